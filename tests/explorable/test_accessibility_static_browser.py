"""WCAG 2.1 A and AA on the static build, as test_accessibility_browser.py checks the served page: no violation of
axe-core's wcag2a, wcag2aa, wcag21a and wcag21aa rules at 1280 and 390 px, at the starting point and after each
guided step the page's script draws. (A file of its own so that the suite's workers walk both pages at once.)"""
from __future__ import annotations

import pytest

from tests.explorable.test_accessibility_browser import WIDTHS, open_page, walk_the_guides

pytestmark = pytest.mark.browser


def test_the_static_page_meets_wcag_21_aa_at_the_start_and_after_every_guided_step(static_site, browser):
    context, page = open_page(browser, static_site, WIDTHS[0])
    try:
        # (The served page's check walks every step of every guide with the same views: here the article's steps,
        # and the first and last under traffic and with prefix caching, which the page's script draws.)
        found = walk_the_guides(page, "static", every=False)
    finally:
        context.close()
    assert found == [], "\n".join(found)
