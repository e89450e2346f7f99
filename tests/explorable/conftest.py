"""The browser tests share one `panel serve app.py` and one headless Chromium for the whole run (each file used
to start its own, about 10-20 s apiece on 2 cores). Every test still opens its own browser context, so each page
is a fresh session of the server."""
from __future__ import annotations

import os

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
