"""The served page with every patch of explorable.patches off still opens and answers a click (test_patches has the
patches one by one). A file of its own: browser tests run after every other file (tests/explorable/conftest.py)."""
from __future__ import annotations

import os
import re

import pytest

from explorable import patches
from tests.conftest import ROOT
from tests.explorable.served_app import (
    FIRST_PAGE_TIMEOUT_MS, TIMEOUT_MS, panel_serve, readout, skip_without_chromium,
)

pytestmark = pytest.mark.browser


# -- the served page with every patch off --------------------------------------------------------------------
def test_the_served_page_with_every_patch_off_answers_a_click(browser):
    skip_without_chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    env = {**os.environ, patches.OFF_VARIABLE: "all",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with panel_serve(env) as url:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=FIRST_PAGE_TIMEOUT_MS)
        assert page.locator(".paint-fix, .aria-names").count() == 0  # the BokehJS patches are not on the page
        page.locator(".stop-max_num_seqs button").filter(has_text=re.compile(r"^\s*64\s*$")).click()
        sync_api.expect(readout(page, "preemptions")).to_have_text("0")
        sync_api.expect(readout(page, "peak_batch")).to_have_text("64")
        page.wait_for_timeout(500)  # the curves' follow-up, before the page closes
        context.close()
        assert not errors, errors
