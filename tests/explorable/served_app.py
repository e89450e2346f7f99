"""What the browser tests share: Chromium's location and flags, and a real `panel serve app.py` on a free
loopback port whose log must end without a traceback."""
from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TIMEOUT_MS = 20_000  # a loaded 2-core machine can take more than 5 s to draw a page
# The first page of a fresh server may wait for the simulator to be prepared (compiled, or loaded from numba's
# cache while other tests load the machine): the first_visit benchmark times that; tests only wait for it.
FIRST_PAGE_TIMEOUT_MS = 90_000



class QuietHTTPServer(http.server.ThreadingHTTPServer):
    """Python's threaded file server without its traceback when Chromium closes a connection mid-reply (a page
    closed while a file was on its way: not an error of the page or the test)."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

def skip_without_chromium() -> None:
    """Skip the calling test module (or fixture) when the system's Chromium is not installed."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no Chromium at {CHROMIUM} (install Debian's chromium or set $CHROMIUM)", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The README's message limit (it carries the largest upload under "Your workload"; tests/explorable/
# test_your_workload.py checks the README says the same).
WEBSOCKET_MAX_MESSAGE_SIZE = 3_145_728


@contextmanager
def panel_serve(env: dict[str, str] | None = None) -> Iterator[str]:
    """A served explorable at the yielded /app URL; fails the test if it does not start in 60 s, or if its
    log shows a traceback by the time it is stopped."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", "app.py", "--port", str(port), "--address", "127.0.0.1",
         "--allow-websocket-origin", f"127.0.0.1:{port}",
         "--websocket-max-message-size", str(WEBSOCKET_MAX_MESSAGE_SIZE)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    ready = threading.Event()
    log: list[str] = []

    def pump():
        for line in proc.stdout:
            log.append(line)
            if "Bokeh app running at" in line:
                ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60):
        proc.kill()
        pytest.fail("panel serve did not start:\n" + "".join(log[-30:]))
    yield f"http://127.0.0.1:{port}/app"
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
    assert not any("Traceback" in line for line in log), "".join(log)


_playwright = None  # one Playwright driver per test run: its sync API allows only one open at a time


def playwright(sync_api):
    """The run's Playwright driver, started on first use; tests/explorable/conftest.py stops it at the end.
    While it is open, asyncio.run cannot be called in this thread (the conftest runs browser tests last)."""
    global _playwright
    if _playwright is None:
        _playwright = sync_api.sync_playwright().start()
    return _playwright


def stop_playwright() -> None:
    global _playwright
    if _playwright is not None:
        _playwright.stop()
        _playwright = None


@contextmanager
def chromium(sync_api, args: list[str] = CHROMIUM_ARGS) -> Iterator:
    """Headless Chromium through Playwright (the system build: nothing is downloaded)."""
    browser = playwright(sync_api).chromium.launch(executable_path=CHROMIUM, args=args)
    try:
        yield browser
    finally:
        browser.close()


def new_page(browser, width: int, height: int = 900):
    """A page in a fresh context at `width`, with the tests' timeout; returns (context, page, page errors)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return context, page, errors


def readout(page, key: str):
    """The value text of the readout card `key` (a summary key)."""
    return page.locator(f'[data-readout="{key}"] .readout-value')


def full_page_screenshot(page, path: str) -> None:
    """A screenshot of the whole page with every plot drawn. The page paints a plot out of sight when it comes
    into sight or is printed (explorable.patches.paint_fix); a full-page capture is neither, so this says it prints,
    in the page and in each of its frames (an embedded explorable), first. The window is made as tall as the page
    for the capture (and restored): what is laid out by the window's height (the sticky sidebar beside the charts)
    is then drawn as in a window that tall, not resized in the middle of the capture."""
    size = page.viewport_size
    tall = page.evaluate("document.documentElement.scrollHeight")
    if size and tall > size["height"]:
        page.set_viewport_size({"width": size["width"], "height": tall})
        page.wait_for_timeout(500)
    for frame in page.frames:
        frame.evaluate("window.dispatchEvent(new Event('beforeprint'))")
    page.wait_for_timeout(200)
    page.screenshot(path=path, full_page=True)
    if size and tall > size["height"]:
        page.set_viewport_size(size)


@contextmanager
def course_page(html: str) -> Iterator[str]:
    """A course page (`html`, e.g. one that embeds the explorable in an iframe) served on loopback at the
    yielded URL, on a port of its own (so the frame is cross-origin, as on a real course site)."""
    body = html.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    httpd = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
