"""The browser tests share one `panel serve app.py` and one headless Chromium for the whole run (each file used
to start its own, about 10-20 s apiece on 2 cores). Every test still opens its own browser context, so each page
is a fresh session of the server."""
from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock

from tests.explorable import served_app


# The files that take longest (about 40-210 s each on 2 cores), longest first: pytest-xdist's two workers take
# files in collection order, so a long file started last would leave the other worker idle at the end.
LONGEST_FIRST = (
    "test_accessibility_browser.py", "test_static_guides.py", "test_your_workload_browser.py",
    "test_accessibility_static_browser.py", "test_layout_browser.py", "test_static_site.py", "test_browser.py",
    "test_traffic_browser.py", "test_phones_browser.py", "test_memory_fixes_browser.py",
    "test_static_data.py", "test_live_gpu_benchmark.py", "test_serving.py", "test_public_server.py",
    "test_fused_ops.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests last: while Playwright's sync API is open, asyncio.run (the websocket tests) cannot run in the
    same thread, and the driver stays open from the first browser test on. Within each part, LONGEST_FIRST's files
    first, the rest in their usual order (a stable sort)."""
    def rank(item: pytest.Item) -> tuple[bool, int]:
        name = item.path.name
        return (item.get_closest_marker("browser") is not None,
                LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST))
    items.sort(key=rank)


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
    export built beforehand, e.g. the full default grid). Built once per run: pytest-xdist's workers share it, the
    first to ask builds it while the other waits (a file lock in the run's common temporary folder)."""
    if os.environ.get("CB_STATIC_SITE"):
        out = Path(os.environ["CB_STATIC_SITE"])
        return StaticBuild(out, sorted(str(p.relative_to(out)) for p in out.rglob("*")), out / "no-work")
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "static-build"
    out, work, listing = root / "site", root / "work", root / "files.json"
    with FileLock(str(root) + ".lock"):
        if not listing.exists():
            root.mkdir(exist_ok=True)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(served_app.ROOT), os.environ.get("PYTHONPATH", "")])}
            args = [sys.executable, "-m", "explorable.export", "--out", str(out), "--work", str(work), "--quiet",
                    "--jobs", "2"]
            for item in STATIC_GRID:
                args += ["--stops", item]
            done = subprocess.run(args, cwd=served_app.ROOT, env=env, capture_output=True, text=True, timeout=600,
                                  check=False)
            assert done.returncode == 0, done.stderr[-3000:]
            listing.write_text(json.dumps(sorted(str(p.relative_to(out)) for p in out.rglob("*"))))
    return StaticBuild(out, json.loads(listing.read_text()), work)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_):
        pass


@pytest.fixture(scope="session")
def static_site(static_build):
    """The shared static build served on loopback: yields its index.html's URL."""
    handler = functools.partial(_QuietHandler, directory=str(static_build.out))
    httpd = served_app.QuietHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    httpd.shutdown()
