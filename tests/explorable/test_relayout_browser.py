"""What a click makes BokehJS lay out again, in headless Chromium (explorable.patches.paint_fix): a plot whose axis labels
changed width places its own inside only, and a layout that only changed height is left to CSS, so a click
lays out the whole page no more; with BokehJS's own methods put back, the same clicks do."""
from __future__ import annotations

import pytest

from tests.explorable.served_app import skip_without_chromium, TIMEOUT_MS, new_page, readout

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()

# Counts whole-page layouts (compute_layout on a view without a layout parent) and keeps every plot's frame.
COUNT_JS = """() => {
  const L = Bokeh.require("models/layouts/layout_dom").LayoutDOMView;
  const proto = L.prototype;
  if (!proto.__testPlainCompute) {
    proto.__testPlainCompute = proto.compute_layout;
    proto.compute_layout = function () {
      if (!(this.parent instanceof L)) window.__pageLayouts = (window.__pageLayouts || 0) + 1;
      return proto.__testPlainCompute.call(this);
    };
  }
  const plot = Bokeh.require("models/plots/plot_canvas").PlotView.prototype;
  if (!Object.prototype.hasOwnProperty.call(plot, "__testPlainPlotCompute")) {
    plot.__testPlainPlotCompute = plot._compute_layout;
    plot._compute_layout = function () {
      window.__plotLayouts = (window.__plotLayouts || 0) + 1;
      return plot.__testPlainPlotCompute.call(this);
    };
  }
  window.__pageLayouts = 0;
  window.__plotLayouts = 0;
}"""
PLOTS_JS = """() => {
  const Plot = Bokeh.require("models/plots/plot_canvas").PlotView;
  return Object.values(Bokeh.index).flatMap(function walk(view) {
    const mine = view instanceof Plot ? [[view.model.id, view.frame.bbox.x, view.frame.bbox.width,
                                          view.frame.bbox.height]] : [];
    return mine.concat((view.child_views || []).flatMap(walk));
  });
}"""


def _click_stops(page, peaks) -> None:
    """64 then 256: the batch strip's axis goes from two-digit to three-digit labels and the step text changes."""
    for seqs in (64, 256):
        page.locator(".stop-max_num_seqs button").filter(has_text=f"{seqs}").first.click()
        sync_api.expect(readout(page, "peak_batch")).to_have_attribute("data-value", str(peaks[seqs]))
        page.wait_for_timeout(1200)  # painted and resized in the frames after the readouts change


def test_a_click_does_not_lay_out_the_whole_page_and_plots_are_placed_as_bokeh_would(server, browser):
    from engine import RunConfig, simulate

    peaks = {s: simulate(RunConfig(max_num_seqs=s)).summary()["peak_batch"] for s in (64, 256)}
    context, page, errors = new_page(browser, 1280, 2400)  # every plot in sight, so every plot paints
    page.goto(server)
    sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=6 * TIMEOUT_MS)
    page.locator(".lane-chart canvas").first.wait_for()
    _click_stops(page, peaks)  # both states computed: each later click is one update
    page.evaluate(COUNT_JS)
    _click_stops(page, peaks)
    kept = page.evaluate("window.__pageLayouts")
    local = page.evaluate("window.__plotLayouts")  # the strip's axis changed width: its own layout ran
    frames = page.evaluate(PLOTS_JS)
    # The page laid out by BokehJS from the top places every plot's frame where the local layouts put it.
    page.evaluate("() => Object.values(Bokeh.index).forEach(v => v.compute_layout && v.compute_layout())")
    assert page.evaluate(PLOTS_JS) == frames
    plot = "Bokeh.require('models/plots/plot_canvas').PlotView.prototype"
    layout = "Bokeh.require('models/layouts/layout_dom').LayoutDOMView.prototype"
    page.evaluate(f"""() => {{ const p = {plot}, l = {layout};
        p._invalidate_layout_if_needed = p.__cbPlainLayoutIfNeeded; l._after_resize = l.__cbPlainAfterResize;
        window.__pageLayouts = 0; }}""")
    _click_stops(page, peaks)
    plain = page.evaluate("window.__pageLayouts")
    context.close()
    assert not errors, errors
    assert len(frames) >= 5  # lanes, two strips, two curves (the rate curves are built when traffic arrives)
    assert kept == 0 and local >= 2 and plain >= 2, (kept, local, plain)
