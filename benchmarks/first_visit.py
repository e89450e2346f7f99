"""The first visit after an install: a real `panel serve app.py` with an empty numba cache, and headless Chromium.

Prints, in seconds from the server's start: when it listens, when the first page shows something (the
"preparing" placeholder or the explorable), when the default page is fully drawn (readouts and lanes), and
how long a second visit takes to be fully drawn: another reader's (a browser with nothing cached), then the
same reader's again (their browser has the scripts cached). `--warm` passes Panel's flag; `--keep-cache` reuses numba's
cache (a later start of the same install) instead of an empty one.

    python benchmarks/first_visit.py [--warm] [--keep-cache]
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DRAWN = '[data-readout="peak_batch"] .readout-value'
SHOWN = f'[data-preparing], {DRAWN}'
LIMIT_S = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--warm", action="store_true", help="pass --warm to panel serve")
    ap.add_argument("--keep-cache", action="store_true", help="keep numba's cache from an earlier start")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    cache = Path(tempfile.gettempdir()) / "first-visit-numba-cache"
    if not args.keep_cache:
        shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    port = free_port()
    cmd = [sys.executable, "-m", "panel", "serve", "app.py", "--port", str(port), "--address", "127.0.0.1",
           "--allow-websocket-origin", f"127.0.0.1:{port}"] + (["--warm"] if args.warm else [])
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    listening = threading.Event()
    log: list[str] = []

    def pump():
        for line in proc.stdout:
            log.append(line)
            if "Bokeh app running at" in line:
                listening.set()

    threading.Thread(target=pump, daemon=True).start()
    figures: dict[str, float] = {}
    try:
        if not listening.wait(LIMIT_S):
            raise SystemExit("panel serve did not start:\n" + "".join(log[-30:]))
        figures["listening"] = time.monotonic() - t0
        url = f"http://127.0.0.1:{port}/app"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            # The first reader; a second reader (a browser of their own: nothing cached); the second reader
            # again (their browser keeps the scripts and its compiled code for them).
            second_reader = browser.new_context(viewport={"width": 1280, "height": 800})
            for visit in ("first", "second", "again"):
                if visit == "first":
                    page = browser.new_page(viewport={"width": 1280, "height": 800})
                else:
                    page = second_reader.new_page()
                page.set_default_timeout(LIMIT_S * 1000)
                start = time.monotonic()
                page.goto(url)
                page.locator(SHOWN).first.wait_for()
                shown = time.monotonic()
                page.locator(DRAWN).wait_for()
                page.locator(".lane-chart canvas").first.wait_for()
                drawn = time.monotonic()
                if visit == "first":
                    figures["first page shows something"] = shown - t0
                    figures["first page fully drawn"] = drawn - t0
                    figures["  (from its request)"] = drawn - start
                elif visit == "second":
                    figures["second visit fully drawn (from its request)"] = drawn - start
                else:
                    figures["the same reader again (from its request)"] = drawn - start
                page.close()
            browser.close()
    except Exception:
        print("".join(log[-40:]))
        raise
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(10)
    mode = ("--warm, " if args.warm else "") + ("numba cache kept" if args.keep_cache else "empty numba cache")
    print(f"panel serve app.py ({mode}); seconds from the server's start unless said")
    for name, seconds in figures.items():
        print(f"  {name:<46} {seconds:6.1f}")
    if any("Traceback" in line for line in log):
        print("".join(log))


if __name__ == "__main__":
    main()
