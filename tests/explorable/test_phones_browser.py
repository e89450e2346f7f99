"""Real phones, as Playwright's device descriptors emulate them (an iPhone 13 and a Pixel 7: their screen size,
device scale factor, touch and mobile viewport), on the served page and on the static build: the page is laid out
at the device's width (not a 980 px desktop page shrunk to the screen), nothing scrolls sideways, and after a tap
on a control its result is on the screen without scrolling (the results bar stays in sight beside the controls).
Also the README's iframe snippet in an 820 px course column: the frame is sized to the page, so its results bar
follows the course page's scroll (explorable.page.layout's viewport message).

Screenshots land in artifacts/.
"""
from __future__ import annotations

import re

import pytest

from tests.explorable import served_app
from tests.explorable.served_app import (
    ARTIFACTS, FIRST_PAGE_TIMEOUT_MS, TIMEOUT_MS, course_page, full_page_screenshot, skip_without_chromium,
)

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()
sync_api.expect.set_options(timeout=TIMEOUT_MS)  # a loaded 2-core machine can take more than 5 s to draw

PHONES = ("iPhone 13", "Pixel 7")  # one iOS-sized, one Android-sized
BAR = ".results-bar .results"


def open_phone(browser, url: str, device: str):
    descriptor = served_app.playwright(sync_api).devices[device]
    context = browser.new_context(**descriptor)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    sync_api.expect(page.locator('[data-readout="throughput_tok_s"] .readout-value')).to_be_visible(
        timeout=FIRST_PAGE_TIMEOUT_MS)
    if "index.html" in url:
        page.evaluate("window.cbStatic.ready")
    page.wait_for_timeout(500)
    return context, page, errors, descriptor


def on_screen(page, selector: str) -> bool:
    """Whether the element is wholly inside the window as it is now (no scrolling)."""
    box = page.locator(selector).first.bounding_box()
    height, width = page.evaluate("[innerHeight, innerWidth]")
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= height and box["x"] >= 0 \
        and box["x"] + box["width"] <= width + 0.5


def tap_and_see(page, control: str, label: str) -> None:
    """Tap a quick stop of `control`; its results must change and be on screen where the tap left the page."""
    bar = page.locator(BAR).first
    before = bar.text_content()
    button = page.locator(f".stop-{control} button").filter(has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))
    button.scroll_into_view_if_needed()
    page.wait_for_timeout(200)
    scrolled = page.evaluate("scrollY")
    button.tap()
    sync_api.expect(bar).not_to_have_text(before)
    assert page.evaluate("scrollY") == scrolled  # nothing scrolled the page for the reader
    assert on_screen(page, BAR), f"after a tap on {control} {label}, the results are off the screen"
    assert on_screen(page, f".stop-{control}"), "the control tapped went off the screen"


def check_phone(browser, url: str, device: str, shot: str) -> None:
    context, page, errors, descriptor = open_phone(browser, url, device)
    try:
        width = descriptor["viewport"]["width"]
        inner, scroll, meta = page.evaluate("""[innerWidth, document.documentElement.scrollWidth,
            document.querySelector('meta[name=viewport]')?.content]""")
        assert "width=device-width" in (meta or ""), "no viewport tag: a phone lays the page out 980 px wide"
        assert inner == width, f"{device}: laid out {inner} px wide, not at its {width} px"
        assert scroll <= inner, f"{device}: the page scrolls sideways ({scroll} px of content)"
        # A control at the top of the sidebar, and one far down it: each time the result is in sight.
        tap_and_see(page, "max_num_seqs", "64")
        tap_and_see(page, "spread", "4x")
        peak = page.locator('.results [data-result="peak_batch"]').first
        assert re.match(r"^\d[\d,]*/64(?!\d)", peak.text_content()), peak.text_content()
        assert page.evaluate("document.documentElement.scrollWidth") <= inner
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{shot}-{device.replace(' ', '-')}.png"))
        assert errors == []
    finally:
        page.wait_for_timeout(300)
        context.close()


@pytest.mark.parametrize("device", PHONES)
def test_a_phone_lays_the_served_page_out_at_its_width_with_the_result_in_sight(server, browser, device):
    check_phone(browser, server, device, "phone-served")


@pytest.mark.parametrize("device", PHONES)
def test_a_phone_lays_the_static_page_out_at_its_width_with_the_result_in_sight(static_site, browser, device):
    check_phone(browser, static_site, device, "phone-static")


def test_wide_screens_keep_the_controls_beside_the_charts_as_the_page_scrolls(server, browser):
    """From 900 px the sidebar stays in the window while the page scrolls the charts past it."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(server)
        page.locator(".curves canvas").first.wait_for(timeout=FIRST_PAGE_TIMEOUT_MS)
        page.mouse.move(900, 400)
        page.mouse.wheel(0, 1200)
        page.wait_for_timeout(400)
        assert page.evaluate("scrollY") > 500
        top = page.locator(".sidebar").first.bounding_box()["y"]
        assert abs(top) < 1, f"the sidebar scrolled away ({top} px)"
        assert on_screen(page, ".stop-max_num_seqs")
        assert not page.locator(BAR).first.is_visible()  # beside the readouts, the bar is not needed
    finally:
        context.close()


def readme_snippet() -> str:
    import test_layout_browser
    return test_layout_browser.readme_snippet()


def test_in_an_820_px_course_column_the_results_bar_follows_the_course_pages_scroll(server, browser):
    snippet = readme_snippet().replace("https://explore.example.edu/app", server)
    parent = (f"<!doctype html><html><head><meta name='viewport' content='width=device-width, initial-scale=1'>"
              f"</head><body style='margin:0'><main style='width:820px; margin:0 auto'><h1>Week 3: batching</h1>"
              f"{snippet}<p>After the explorable.</p></main></body></html>")
    with course_page(parent) as url:
        context = browser.new_context(viewport={"width": 1100, "height": 800})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        try:
            page.goto(url)
            frame = page.frame_locator("#cb-explorable")
            sync_api.expect(frame.locator('[data-readout="throughput_tok_s"] .readout-value')).to_be_visible(
                timeout=FIRST_PAGE_TIMEOUT_MS)
            page.wait_for_function("document.getElementById('cb-explorable').getBoundingClientRect().height > 2000")
            # Scroll the course page to a control far down the frame's sidebar, and tap it.
            stop = frame.locator(".stop-spread button").filter(has_text=re.compile(r"^\s*4x\s*$"))
            stop.scroll_into_view_if_needed()
            page.wait_for_timeout(400)
            bar = frame.locator(BAR).first
            before = bar.text_content()
            stop.click()
            sync_api.expect(bar).not_to_have_text(before)
            page.wait_for_timeout(300)
            box, view = bar.bounding_box(), page.evaluate("innerHeight")  # in the course page's coordinates
            # (within a pixel: the frame's top sits at a fraction of one as the course page scrolls)
            assert -1 <= box["y"] and box["y"] + box["height"] <= view + 1, f"the bar is off the screen: {box}"
            assert page.evaluate("scrollY") > 300  # it followed the course page's scroll
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "embed-820-scrolled.png"))
            full_page_screenshot(page, str(ARTIFACTS / "embed-820-full.png"))
        finally:
            page.wait_for_timeout(300)
            context.close()
