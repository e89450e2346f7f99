"""No control of the sidebar overlaps another, on the served page and on the static build, at every width from a
320 px phone to a 1920 px screen (on the static page at 1280 and 1920 px the pool's stops used to wrap under the
allocation toggle). One page per site, resized to each width, so each width costs a layout and not a page load.
"""
from __future__ import annotations

import pytest

from tests.explorable.served_app import FIRST_PAGE_TIMEOUT_MS, new_page, skip_without_chromium

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()

WIDTHS = (320, 390, 820, 1280, 1920)

# Every control's widget (class ctl-<name>), quick-stop row (stop-<name>) and the share link under them, in any
# shadow root, that is drawn: the pairs of different ones whose boxes overlap by more than half a pixel. (In a
# window shorter than the sidebar, the share link was drawn over the GPU memory section: the controls' column
# was shrunk to the window's height and ran on below its box.)
OVERLAPS_JS = """() => {
  const found = [];
  const walk = (root) => { for (const el of root.querySelectorAll('*')) {
    const name = [...(el.classList || [])].find((c) => /^(ctl|stop)-|^share$/.test(c));
    if (name) found.push([name, el.getBoundingClientRect()]);
    if (el.shadowRoot) walk(el.shadowRoot);
  } };
  walk(document);
  const drawn = found.filter(([, r]) => r.width > 0 && r.height > 0);
  const out = [];
  drawn.forEach(([na, a], i) => drawn.slice(i + 1).forEach(([nb, b]) => {
    if (na !== nb && a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5)
      out.push(`${na} [${[a.left, a.top, a.width, a.height].map(Math.round)}] over ${nb} [${[b.left, b.top, b.width, b.height].map(Math.round)}]`);
  }));
  // The share link comes after every control, not over one of them or over a note between them.
  const share = drawn.filter(([n]) => n === 'share').map(([, r]) => r);
  const lowest = Math.max(...drawn.filter(([n]) => n !== 'share').map(([, r]) => r.bottom));
  share.forEach((r) => { if (r.top < lowest - 0.5) out.push(`share [${Math.round(r.top)}] above the last control's bottom [${Math.round(lowest)}]`); });
  return [drawn.length, out];
}"""


def overlaps_at_each_width(browser, url: str) -> list[str]:
    context, page, _ = new_page(browser, WIDTHS[0])
    try:
        page.goto(url)
        sync_api.expect(page.locator('[data-readout="throughput_tok_s"] .readout-value')).to_be_visible(
            timeout=FIRST_PAGE_TIMEOUT_MS)
        if "index.html" in url:
            page.evaluate("window.cbStatic.ready")
        found = []
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
            page.wait_for_timeout(200)
            drawn, overlaps = page.evaluate(OVERLAPS_JS)
            assert drawn >= 8, f"{width} px: only {drawn} controls found"
            found += [f"{width} px: {o}" for o in overlaps]
            assert page.evaluate("document.documentElement.scrollWidth <= innerWidth"), f"{width} px: scrolls sideways"
        return found
    finally:
        page.wait_for_timeout(300)
        context.close()


def test_no_control_of_the_served_pages_sidebar_overlaps_another_at_any_width(server, browser):
    assert overlaps_at_each_width(browser, server) == []


def test_no_control_of_the_static_pages_sidebar_overlaps_another_at_any_width(static_site, browser):
    assert overlaps_at_each_width(browser, static_site) == []
