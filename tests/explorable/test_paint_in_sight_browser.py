"""Plots out of sight are painted when they come into sight (explorable.patches.paint_fix), in headless Chromium: a
click paints the plots on screen and none of those below it; scrolling one into view paints it before the
frame that shows it, with the same pixels as a paint of its own; printing paints them all. On a course page
the frame's plots wait for the parent page's scroll. With BokehJS's own methods put back, the same click
paints every plot."""
from __future__ import annotations

import pytest

from tests.explorable.served_app import TIMEOUT_MS, course_page, new_page, readout, skip_without_chromium

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()

# Counts each plot's paints (BokehJS's _actual_paint, which every painting path ends in) by model id.
COUNT_JS = """() => {
  const plot = Bokeh.require("models/plots/plot_canvas").PlotView.prototype;
  if (!Object.prototype.hasOwnProperty.call(plot, "__testPlainActualPaint")) {
    plot.__testPlainActualPaint = plot._actual_paint;
    plot._actual_paint = function () {
      window.__paints[this.model.id] = (window.__paints[this.model.id] || 0) + 1;
      return plot.__testPlainActualPaint.call(this);
    };
  }
  window.__paints = {};
}"""
# Every plot on the page: [model id, top and bottom of its element in the viewport's coordinates].
PLOTS_JS = """() => {
  const Plot = Bokeh.require("models/plots/plot_canvas").PlotView;
  return Object.values(Bokeh.index).flatMap(function walk(view) {
    const box = view instanceof Plot ? view.el.getBoundingClientRect() : null;
    const mine = box && box.height > 0 ? [[view.model.id, box.top, box.bottom]] : [];
    return mine.concat((view.child_views || []).flatMap(walk));
  });
}"""
PLAIN_JS = """() => { const p = Bokeh.require("models/plots/plot_canvas").PlotView.prototype;
  p.repaint = p.__cbPlainRepaint; p.paint = p.__cbPlainPaint; }"""
# Scrolls to page offset `y` and returns the paints counted by the first frame drawn after the scroll.
SCROLL_JS = """async (y) => {
  window.scrollTo(0, y);
  await new Promise(resolve => requestAnimationFrame(resolve));
  return {...window.__paints};
}"""


def _click(page, seqs: int, peak: int) -> None:
    page.locator(".stop-max_num_seqs button").filter(has_text=f"{seqs}").first.click()
    sync_api.expect(readout(page, "peak_batch")).to_have_attribute("data-value", str(peak))
    page.wait_for_timeout(1200)  # painted in the frames after the readouts change


def _curve_pixels_match_a_fresh_paint(page) -> None:
    """The last curve as drawn now is what a paint of the current state draws."""
    curve = page.locator(".curves canvas").last
    drawn = curve.screenshot()
    page.evaluate("""() => { const Plot = Bokeh.require("models/plots/plot_canvas").PlotView;
        Object.values(Bokeh.index).forEach(function walk(view) {
          if (view instanceof Plot) view.request_paint();
          (view.child_views || []).forEach(walk); }); }""")
    page.wait_for_timeout(500)
    assert curve.screenshot() == drawn


def test_a_click_paints_the_plots_in_sight_and_a_scroll_paints_the_rest(server, browser):
    from engine import RunConfig, simulate

    peaks = {s: simulate(RunConfig(max_num_seqs=s)).summary()["peak_batch"] for s in (64, 256)}
    # 600 px tall: the lanes reach into the window; strips and curves lie below it (with one guide shown at a
    # time the lanes start about 420 px down the page, and the batch strip about 750 px down).
    context, page, errors = new_page(browser, 1280, 600)
    try:
        page.goto(server)
        sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=6 * TIMEOUT_MS)
        page.locator(".lane-chart canvas").first.wait_for()
        _click(page, 64, peaks[64])  # both states computed: the next click is one update
        _click(page, 256, peaks[256])
        page.evaluate(COUNT_JS)
        _click(page, 64, peaks[64])
        painted = page.evaluate("({...window.__paints})")
        plots = page.evaluate(PLOTS_JS)
        height = page.evaluate("innerHeight")
        in_sight = [pid for pid, top, bottom in plots if top < height and bottom > 0]
        below = [pid for pid, top, _ in plots if top > height + 100]
        assert in_sight and len(below) >= 3, plots  # the lanes reach into the window; strips and curves do not
        assert all(painted.get(pid, 0) >= 1 for pid in in_sight), (painted, in_sight)
        assert not any(painted.get(pid, 0) for pid in below), (painted, below)
        # Scrolled to: every plot below has painted by the first frame that shows it.
        for pid, top, _ in plots:
            if pid in below:
                after = page.evaluate(SCROLL_JS, max(0, top - 50))
                assert after.get(pid, 0) >= 1, (after, pid)
        _curve_pixels_match_a_fresh_paint(page)
        # Printing (or a full-page capture that says it prints) paints every plot still owed.
        page.evaluate("window.scrollTo(0, 0)")
        page.evaluate(COUNT_JS)
        _click(page, 256, peaks[256])
        assert not any(page.evaluate("({...window.__paints})").get(pid, 0) for pid in below)
        page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
        printed = page.evaluate("({...window.__paints})")
        assert all(printed.get(pid, 0) >= 1 for pid in below), (printed, below)
        # BokehJS's own way: the same click paints the plots out of sight too.
        page.evaluate(PLAIN_JS)
        page.evaluate(COUNT_JS)
        _click(page, 64, peaks[64])
        plain = page.evaluate("({...window.__paints})")
        assert all(plain.get(pid, 0) >= 1 for pid in below), (plain, below)
    finally:
        context.close()
    assert not errors, errors


def test_in_a_course_page_the_frame_paints_its_plots_when_the_parent_scrolls_to_them(server, browser):
    from engine import RunConfig, simulate

    peak = simulate(RunConfig(max_num_seqs=64)).summary()["peak_batch"]
    # A frame as tall as the explorable: the course page scrolls, the frame never does.
    parent = (f"<!doctype html><html><body style='margin:0'><h1>Week 3</h1>"
              f"<iframe id='cb' src='{server}' style='width:1000px; height:3200px; border:0'></iframe>"
              f"<p>After.</p></body></html>")

    with course_page(parent) as url:
        context, page, errors = new_page(browser, 1100, 1000)
        try:
            page.goto(url)
            frame = page.frame_locator("#cb")
            sync_api.expect(frame.locator('[data-readout="peak_batch"] .readout-value')).to_be_visible(
                timeout=6 * TIMEOUT_MS)
            inner = next(f for f in page.frames if f.url.startswith(server))
            inner.locator(".lane-chart canvas").first.wait_for()
            page.wait_for_timeout(1500)
            inner.evaluate(COUNT_JS)
            _click(inner, 64, peak)
            painted = inner.evaluate("({...window.__paints})")
            offset = page.locator("#cb").bounding_box()["y"]
            plots = inner.evaluate(PLOTS_JS)
            below = [pid for pid, top, _ in plots if offset + top > 1000 + 100]
            assert len(below) >= 3 and not any(painted.get(pid, 0) for pid in below), (painted, below)
            # The course page scrolls them into its window (they span less than its height).
            first = min(t for pid, t, _ in plots if pid in below)
            last = max(b for pid, _, b in plots if pid in below)
            assert last - first < 950, plots
            page.evaluate(f"window.scrollTo(0, {offset + first - 20})")
            inner.wait_for_function(f"{below!r}.every(pid => window.__paints[pid] >= 1)")
            _curve_pixels_match_a_fresh_paint(inner)
        finally:
            context.close()
    assert not errors, errors
