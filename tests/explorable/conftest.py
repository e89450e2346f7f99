"""The browser tests share one `panel serve app.py` and one headless Chromium for the whole run (each file used
to start its own, about 10-20 s apiece on 2 cores). Every test still opens its own browser context, so each page
is a fresh session of the server."""
from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.explorable import served_app


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests last, in their usual order: while Playwright's sync API is open, asyncio.run (the
    websocket tests) cannot run in the same thread, and the driver stays open from the first browser test on."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)  # a stable sort


def pytest_sessionfinish() -> None:
    served_app.stop_playwright()


@pytest.fixture(scope="session")
def server():
    """The served explorable's /app URL; its log must end without a traceback (checked when the run ends)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(served_app.ROOT), os.environ.get("PYTHONPATH", "")])}
    with served_app.panel_serve(env) as url:
        yield url


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    with served_app.chromium(sync_api) as b:
        yield b


# A small static build shared by the static tests: every guided step's settings and one neighbour of each, on both
# units and allocations (72 states of the article's grid), and every step under traffic and with prefix caching
# with each control it names at two stops (and at the values the guide's own steps give it).
STATIC_GRID = ["max_num_seqs=64,256,512", "pool_gib=2,16", "declared_multiple=1,4", "spread=1,16",
               "request_rate=4,16", "burstiness=0.5,1", "max_num_batched_tokens=1024,8192", "system_prompt_len=0,1024",
               "turns=1,2"]


@dataclass
class StaticBuild:
    out: Path  # the site's folder
    files: list[str]  # what the export left in it, right after the build (relative paths)
    work: Path  # the resume cache it was told to use (--work), which it must have removed


@pytest.fixture(scope="session")
def static_build(tmp_path_factory) -> StaticBuild:
    """`python -m explorable.export` run as a course author would, on STATIC_GRID (with CB_STATIC_SITE=DIR, an
    export built beforehand, e.g. the full default grid)."""
    if os.environ.get("CB_STATIC_SITE"):
        out = Path(os.environ["CB_STATIC_SITE"])
        return StaticBuild(out, sorted(str(p.relative_to(out)) for p in out.rglob("*")), out / "no-work")
    root = tmp_path_factory.mktemp("static-build")
    out, work = root / "site", root / "work"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(served_app.ROOT), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "explorable.export", "--out", str(out), "--work", str(work), "--quiet", "--jobs", "2"]
    for item in STATIC_GRID:
        args += ["--stops", item]
    done = subprocess.run(args, cwd=served_app.ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return StaticBuild(out, sorted(str(p.relative_to(out)) for p in out.rglob("*")), work)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_):
        pass


@pytest.fixture(scope="session")
def static_site(static_build):
    """The shared static build served on loopback: yields its index.html's URL."""
    handler = functools.partial(_QuietHandler, directory=str(static_build.out))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    httpd.shutdown()
