"""The page on every screen, in headless Chromium against a real `panel serve app.py`: phone (320, 390 px),
a course page's column (820 px) and a laptop (1280 px); the README's iframe snippet; the projector view.

Needs Debian's chromium (/usr/bin/chromium, or $CHROMIUM) and the playwright package; skipped otherwise.
Screenshots land in artifacts/ for a person to look at.
"""
from __future__ import annotations

import re
import time

import pytest

from tests.explorable.served_app import (
    ARTIFACTS, CHROMIUM, FIRST_PAGE_TIMEOUT_MS, ROOT, TIMEOUT_MS, course_page, full_page_screenshot,
    skip_without_chromium,
)

pytestmark = pytest.mark.browser

WIDTHS = (320, 390, 820, 1280)

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()
sync_api.expect.set_options(timeout=TIMEOUT_MS)  # a loaded 2-core machine can take more than 5 s to draw


def open_page(browser, url: str, width: int, height: int = 800, on_page=None):
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    if on_page:
        on_page(page)
    page.goto(url)
    sync_api.expect(page.locator('[data-readout="throughput_tok_s"] .readout-value')).to_be_visible(
        timeout=FIRST_PAGE_TIMEOUT_MS)  # a page may wait while the simulator is prepared
    page.locator(".curves canvas").first.wait_for()
    page.wait_for_timeout(400)  # the curves follow the first update
    return context, page


# Bokeh draws tick labels on a canvas: read where it puts them from its own views (the plot's frame and
# x scale, the axis' ticks and label font) and measure the label texts in that font.
CURVE_TICK_LABELS_JS = """(xLabel) => {
  const roots = Bokeh.index.roots ? [...Bokeh.index.roots] : Object.values(Bokeh.index);
  const views = [];
  const walk = (v) => { views.push(v); for (const c of (v.child_views ?? [])) walk(c); };
  roots.forEach(walk);
  const plot = views.find(v => v.model.below && v.model.below[0] && v.model.below[0].axis_label === xLabel);
  const axis = plot.model.below[0];
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = `${axis.major_label_text_font_style} ${axis.major_label_text_font_size} ${axis.major_label_text_font}`;
  const overrides = axis.major_label_overrides;
  const text = (t) => (overrides instanceof Map ? (overrides.get(t) ?? overrides.get(String(t))) : overrides[t]) ?? String(t);
  const frame = plot.frame.bbox;
  return axis.ticker.ticks.map((t) => {
    const x = plot.frame.x_scale.compute(t), w = ctx.measureText(text(t)).width;
    return {tick: t, left: x - w / 2, right: x + w / 2, frame_left: frame.left, frame_right: frame.right};
  });
}"""


def close(context) -> None:
    """Close a tab once its last update has arrived (a tab closed while the server writes to it makes Panel
    log a closed-websocket traceback, which the server fixture counts)."""
    for page in context.pages:
        page.wait_for_timeout(500)
    context.close()


def boxes(page, selector: str) -> list[dict]:
    return [loc.bounding_box() for loc in page.locator(selector).all()]


def overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["width"] - 0.5 and b["x"] < a["x"] + a["width"] - 0.5
            and a["y"] < b["y"] + b["height"] - 0.5 and b["y"] < a["y"] + a["height"] - 0.5)


@pytest.mark.parametrize("width,query", [(w, "") for w in WIDTHS] + [(320, "?projector=1")])
def test_the_page_fits_the_screen(server, browser, width, query):
    context, page = open_page(browser, server + query, width)
    try:
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        assert scroll <= inner, f"{width} px: the page scrolls sideways ({scroll} px of content)"

        cards = boxes(page, "[data-readout]")
        assert len(cards) == 6
        for i, a in enumerate(cards):
            assert a["x"] >= 0 and a["x"] + a["width"] <= inner
            for b in cards[i + 1:]:
                assert not overlap(a, b), f"{width} px: readouts overlap: {a} {b}"
        # Each large number fits inside its own card.
        for card, number in zip(cards, boxes(page, "[data-readout] .readout-value")):
            assert number["x"] + number["width"] <= card["x"] + card["width"] + 0.5, f"{width} px: {number} {card}"

        for x_label in ("--max-num-seqs", "KV cache pool (GiB)"):
            labels = page.evaluate(CURVE_TICK_LABELS_JS, x_label)
            assert len(labels) >= 4
            for a, b in zip(labels, labels[1:]):
                assert a["right"] + 2 <= b["left"], f"{width} px, {x_label}: tick labels {a} and {b} overlap"

        # The controls sit beside the charts on a wide screen and above them on a narrow one.
        sidebar, lanes = page.locator(".sidebar").first.bounding_box(), page.locator(".lane-chart").first.bounding_box()
        if width >= 900:
            assert sidebar["x"] + sidebar["width"] <= lanes["x"] and lanes["y"] < sidebar["y"] + sidebar["height"]
        else:
            assert sidebar["y"] + sidebar["height"] <= lanes["y"] and lanes["width"] >= 0.9 * width - 30
        log_px = float(page.locator(".log-line").first.evaluate("el => getComputedStyle(el).fontSize").rstrip("px"))
        assert (log_px >= 16) == ("projector" in query)  # compact unless the link asks for the projector view
        if width in (390, 1280) and not query:
            ARTIFACTS.mkdir(exist_ok=True)
            full_page_screenshot(page, str(ARTIFACTS / f"layout-{width}.png"))
    finally:
        close(context)


def readme_snippet() -> str:
    """The README's iframe snippet (the html block under "Embedding in a course page"), as a course page uses it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Embedding in a course page"):]
    return re.search(r"```html\n(.*?)```", section, re.S).group(1)


def test_the_readme_iframe_snippet_sizes_the_frame_in_an_820_px_column(server, browser):
    snippet = readme_snippet().replace("https://explore.example.edu/app", server)
    assert server in snippet
    # The page posts its height; the snippet posts only the part of the frame on screen back (its results bar).
    assert re.findall(r'type: "([^"]+)"', snippet) == ["continuous-batching-explorable:viewport"]
    parent = (f"<!doctype html><html><body style='margin:0'><main style='width:820px; margin:0 auto'>"
              f"<h1>Week 3: batching</h1>{snippet}<p>After the explorable.</p></main></body></html>")

    with course_page(parent) as url:
        context = browser.new_context(viewport={"width": 1100, "height": 800})
        try:
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(url)
            frame = page.frame_locator("#cb-explorable")
            sync_api.expect(frame.locator('[data-readout="throughput_tok_s"] .readout-value')).to_be_visible()
            inner = next(f for f in page.frames if f.url.startswith(server))
            inner.locator(".curves canvas").first.wait_for()
            deadline = time.monotonic() + 15
            fits = None
            while time.monotonic() < deadline:
                fits = inner.evaluate("""() => ({content: document.documentElement.scrollHeight, view: innerHeight,
                                                wide: document.documentElement.scrollWidth, across: innerWidth})""")
                if fits["content"] <= fits["view"] and fits["view"] > 1000:
                    break
                page.wait_for_timeout(250)
            assert fits["wide"] <= fits["across"] == 820, fits  # no sideways scrolling inside the frame
            assert fits["content"] <= fits["view"], f"the frame scrolls inside: {fits}"
            height = page.locator("#cb-explorable").bounding_box()["height"]
            assert height == pytest.approx(fits["content"], abs=2) and height < 6000  # sized to the page, not growing
            ARTIFACTS.mkdir(exist_ok=True)
            full_page_screenshot(page, str(ARTIFACTS / "embed-820.png"))
        finally:
            close(context)


def test_projector_view_draws_every_chart_text_at_16_px_or_more(server, browser):
    context, page = open_page(browser, server + "?max_num_seqs=64&projector=1", 1280, 720)
    try:
        sizes = page.evaluate("""() => [...Bokeh.documents[0].all_models].flatMap(m =>
            m.type.endsWith('Axis') ? [m.major_label_text_font_size, m.axis_label_text_font_size]
            : m.type === 'Label' ? [m.text_font_size] : [])""")
        assert len(sizes) >= 10 and all(float(s.rstrip("px")) >= 16 for s in sizes), sizes
        font = lambda sel: float(page.locator(sel).first.evaluate(  # noqa: E731
            "el => getComputedStyle(el).fontSize").rstrip("px"))
        for selector in (".legend-item", ".log-line", ".terminal .cmd", ".log-reading"):
            assert font(selector) >= 16, selector
        # The flag stays in the address bar (and the share link) beside the controls.
        page.wait_for_function("new URLSearchParams(location.search).get('projector') === '1'"
                               " && new URLSearchParams(location.search).get('max_num_seqs') === '64'")
        assert "projector=1" in page.locator(".share-link").first.get_attribute("href")
        ARTIFACTS.mkdir(exist_ok=True)
        full_page_screenshot(page, str(ARTIFACTS / "layout-projector-1280x720.png"))
    finally:
        close(context)


def test_a_guided_step_reaches_the_page_as_one_update(server, browser):
    """A step sets several controls; the page gets one PATCH-DOC for it (once its curves have been drawn)."""
    headers: list[str] = []
    listen = lambda page: page.on("websocket", lambda ws: ws.on(  # noqa: E731
        "framereceived", lambda f: headers.append(f) if isinstance(f, str) and '"msgtype"' in f else None))
    context, page = open_page(browser, server, 1280, on_page=listen)
    try:
        step = lambda title: page.locator(".step-button button").filter(has_text=title)  # noqa: E731
        peak = page.locator('[data-readout="peak_batch"] .readout-value')
        for title, shown in (("Memory wall", re.compile(r"^(?!8\d$)")), ("As shipped", re.compile(r"^8\d$"))):
            step(title).click()  # both states and their curves are drawn once
            sync_api.expect(peak).to_have_text(shown)
            page.wait_for_timeout(1000)
        headers.clear()
        step("Memory wall").click()
        sync_api.expect(peak).not_to_have_text(re.compile(r"^8\d$"))
        page.wait_for_timeout(1000)
        patches = [h for h in headers if '"PATCH-DOC"' in h]
        assert len(patches) == 1, headers
        page.wait_for_function("new URLSearchParams(location.search).get('pool_gib') === '2.0'"
                               " && new URLSearchParams(location.search).get('max_num_seqs') === '512'")
    finally:
        close(context)
