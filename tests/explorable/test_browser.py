"""The served explorable in headless Chromium: a real `panel serve app.py`, driven with Playwright.

Needs Debian's chromium (/usr/bin/chromium, or $CHROMIUM) and the playwright package; no `playwright
install`. Screenshots land in artifacts/ for a person to look at.
"""
from __future__ import annotations

import io
import re

import pytest

from tests.explorable.served_app import (
    ARTIFACTS, CHROMIUM, FIRST_PAGE_TIMEOUT_MS, TIMEOUT_MS, full_page_screenshot, readout, skip_without_chromium,
)

pytestmark = pytest.mark.browser


sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    # Let the last update's follow-up (the curves) arrive: a tab closed while the server writes to it
    # makes Panel log a closed-websocket traceback, which the server fixture counts.
    pg.wait_for_timeout(500)
    context.close()
    assert not errors, errors


def value(page, key: str) -> float:
    return float(readout(page, key).get_attribute("data-value"))


def open_app(page, url: str) -> None:
    page.goto(url)
    sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=FIRST_PAGE_TIMEOUT_MS)  # may prepare first
    page.locator(".lane-chart canvas").first.wait_for()


def stop_colour(page, label) -> str:
    """The background colour of a --max-num-seqs stop button, as the browser draws it."""
    button = page.locator(".stop-max_num_seqs button").filter(has_text=re.compile(rf"^\s*{label}\s*$"))
    return button.evaluate("el => getComputedStyle(el).backgroundColor")


def lane_colour_pixels(page) -> dict[str, int]:
    """Pixels of the lanes' canvas close to the amber and magenta lane colours."""
    Image = pytest.importorskip("PIL.Image", reason="Pillow is needed to read the chart's colours")
    import numpy as np

    from explorable.views import palette

    page.wait_for_timeout(300)  # let the canvas repaint
    png = page.locator(".lane-chart canvas").first.screenshot()  # the lanes only: the legend is HTML above
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int32)
    counts = {}
    for name, colour in (("amber", palette.AMBER), ("magenta", palette.MAGENTA)):
        target = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
        counts[name] = int((np.abs(pixels - target).sum(axis=2) < 40).sum())
    return counts


def test_the_page_opens_with_the_default_readouts(server, page):
    open_app(page, server)
    peak = value(page, "peak_batch")
    assert 80 <= peak <= 89  # the largest batch at 256 slots is in the 80s
    sync_api.expect(readout(page, "peak_batch")).to_have_text(str(int(peak)))
    assert value(page, "preemptions") > 0
    assert value(page, "throughput_tok_s") > 2500
    sync_api.expect(page.locator("#title")).to_have_text("Continuous batching is not a bigger batch")
    # Once loaded, the address bar names every control (so it can be copied as a link).
    page.wait_for_function("location.search.includes('pool_gib=16') && location.search.includes('unit=pass')")
    colours = lane_colour_pixels(page)
    assert colours["amber"] > 0 and colours["magenta"] == 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "explorable-default.png"))


def test_the_shared_stylesheet_styles_each_component(server, page):
    """The one stylesheet model reaches every shadow root that asked for it: header, sidebar, readout cards."""
    open_app(page, server)
    css = lambda selector, prop: page.locator(selector).first.evaluate(  # noqa: E731
        f"el => getComputedStyle(el).getPropertyValue('{prop}')")
    assert css("#title", "font-size") == "26px"
    assert css(".readout", "background-color") == "rgb(245, 246, 248)"  # --panel
    assert css(".readout-value", "font-size") == "30px"
    assert css(".terminal", "background-color") == "rgb(20, 24, 31)"
    sidebar = page.locator(".sidebar").first.evaluate("el => getComputedStyle(el).backgroundColor")
    assert sidebar == "rgb(245, 246, 248)"  # :host(.sidebar)
    # The sheet is one model in the browser's document, installed in many shadow roots.
    counts = page.evaluate("""() => {
        const sheets = [...Bokeh.documents[0].all_models].filter(m => m.type === 'InlineStyleSheet'
            && m.css.includes('.readout-value'));
        const roots = [];
        const walk = (node) => { for (const el of node.querySelectorAll('*')) if (el.shadowRoot) {
            roots.push(el.shadowRoot); walk(el.shadowRoot); } };
        walk(document);
        const styled = roots.filter(r => [...r.children]
            .some(s => s.tagName === 'STYLE' && s.textContent.includes('.readout-value'))).length;
        return {sheets: sheets.length, styled};
    }""")
    assert counts["sheets"] == 1 and counts["styled"] >= 40, counts


def test_moving_max_num_seqs_to_64_is_faster_and_evicts_nobody(server, page):
    open_app(page, server)
    before = value(page, "throughput_tok_s")
    page.locator(".stop-max_num_seqs button").filter(has_text=re.compile(r"^\s*64\s*$")).click()
    sync_api.expect(readout(page, "peak_batch")).to_have_text("64")
    sync_api.expect(readout(page, "preemptions")).to_have_text("0")
    assert value(page, "throughput_tok_s") > before
    sync_api.expect(page.locator('[data-readout="throughput_tok_s"] .readout-delta')).to_have_text(
        re.compile(r"^\+[\d,]+ tok/s$"))
    page.wait_for_function("new URLSearchParams(location.search).get('max_num_seqs') === '64'")
    # Only the chosen stop looks current: the one it replaces loses its highlight in the browser too.
    stop = lambda label: page.locator(".stop-max_num_seqs button").filter(  # noqa: E731
        has_text=re.compile(rf"^\s*{label}\s*$"))
    sync_api.expect(stop(256)).not_to_have_css("background-color", stop_colour(page, 64))
    assert lane_colour_pixels(page) == {"amber": 0, "magenta": 0}  # all teal
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "explorable-max-num-seqs-64.png"))
    # The slider itself, from the keyboard: one arrow press is one release.
    page.locator(".ctl-max_num_seqs .noUi-handle").focus()
    page.keyboard.press("ArrowRight")
    sync_api.expect(readout(page, "peak_batch")).to_have_text("65")
    page.wait_for_function("new URLSearchParams(location.search).get('max_num_seqs') === '65'")


def test_a_link_with_max_num_seqs_64_opens_in_that_state(server, page):
    open_app(page, server + "?max_num_seqs=64")
    sync_api.expect(readout(page, "peak_batch")).to_have_text("64")
    sync_api.expect(readout(page, "preemptions")).to_have_text("0")
    sync_api.expect(page.locator(".ctl-max_num_seqs")).to_contain_text("64")
    # A link opens a state; it is not a change, so there are no deltas yet.
    sync_api.expect(page.locator('[data-readout="throughput_tok_s"] .readout-delta')).not_to_have_text(
        re.compile(r"tok/s"))


def test_a_bad_link_falls_back_with_a_notice(server, page):
    open_app(page, server + "?max_num_seqs=banana&pool_gib=-4&spread=8")
    notice = page.locator('[data-notice="link"]')
    sync_api.expect(notice).to_contain_text("banana")
    sync_api.expect(notice).to_contain_text("pool_gib")
    sync_api.expect(page.locator(".ctl-spread")).to_contain_text("8.0")  # the good value still applies
    page.wait_for_function("new URLSearchParams(location.search).get('max_num_seqs') === '256'")
    page.get_by_role("button", name="Dismiss").click()
    sync_api.expect(notice).to_be_hidden()


def time_axis_end(page) -> float:
    """The end of the shared time range, as the browser's Bokeh document holds it."""
    ends = page.evaluate("""() => [...Bokeh.documents[0].all_models]
        .filter(m => m.type === 'Range1d' && m.reset_end != null).map(m => m.end)""")
    assert len(ends) == 1
    return ends[0]


def test_the_memory_wall_step_turns_the_lanes_magenta(server, page):
    open_app(page, server)
    page.locator(".step-button button").filter(has_text="Memory wall").click()
    sync_api.expect(readout(page, "peak_batch")).not_to_have_text(re.compile(r"^8\d$"))
    page.wait_for_function("new URLSearchParams(location.search).get('pool_gib') === '2.0'")
    assert lane_colour_pixels(page)["magenta"] > 0
    # The time axis grew to the new, longer run (it once stayed clamped to the previous run's length).
    makespan = float(page.locator(".lane-caption [data-value]").get_attribute("data-value"))
    assert makespan > 40 and time_axis_end(page) == pytest.approx(makespan, abs=1e-3)
    ARTIFACTS.mkdir(exist_ok=True)
    full_page_screenshot(page, str(ARTIFACTS / "explorable-memory-wall.png"))
