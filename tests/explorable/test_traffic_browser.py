"""The Traffic section in headless Chromium: the controls, the latency readouts, the steps under traffic and
the request-rate curve, at a phone's and a laptop's width (screenshots in artifacts/traffic-*.png)."""
from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from engine import RunConfig, simulate
from tests.explorable.served_app import (
    ARTIFACTS, CHROMIUM, TIMEOUT_MS, full_page_screenshot, new_page, readout, skip_without_chromium,
)

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()


def test_traffic_controls_readouts_steps_and_curve(server, browser):
    context, page, errors = new_page(browser, 1280)
    page.goto(server)
    sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=6 * TIMEOUT_MS)  # the first page may prepare
    # All at once (the article's experiment): no latency readouts.
    assert not page.locator(".traffic-readouts").is_visible()
    page.locator(".guide-tabs button").filter(has_text="Under traffic").click()  # one guide at a time
    page.locator(".traffic-step-button button").filter(has_text="Past the knee").click()
    sync_api.expect(page.locator(".traffic-step-text")).to_have_attribute("data-step", "2")
    sync_api.expect(readout(page, "ttft_ms_p99")).to_be_visible()
    expected = simulate(RunConfig(arrival="rate", request_rate=16.0)).summary()
    sync_api.expect(readout(page, "ttft_ms_p99")).to_have_attribute("data-value", f"{expected['ttft_ms_p99']:.6g}")
    assert float(readout(page, "tpot_ms_p50").get_attribute("data-value")) == pytest.approx(expected["tpot_ms_p50"],
                                                                                           rel=1e-5)
    sync_api.expect(readout(page, "goodput_req_s")).to_be_visible()
    page.wait_for_function("() => location.search.includes('request_rate=16')")
    query = parse_qs(urlparse(page.url).query)
    assert query["arrival"] == ["rate"] and float(query["request_rate"][0]) == 16.0
    # The curve against request rate is drawn (two canvases), and the caption says traffic arrives.
    page.locator(".traffic-curve canvas").nth(1).wait_for()
    sync_api.expect(page.locator(".lane-caption")).to_contain_text("arriving at 16 req/s")
    page.wait_for_timeout(800)
    ARTIFACTS.mkdir(exist_ok=True)
    full_page_screenshot(page, str(ARTIFACTS / "traffic-1280.png"))
    # Back to all at once with the radio button: the latency readouts go away.
    page.locator(".ctl-arrival button").filter(has_text="all at once").click()
    sync_api.expect(page.locator(".traffic-readouts")).to_be_hidden()
    page.wait_for_timeout(500)
    context.close()
    assert not errors, errors


def test_a_link_sets_the_rate_and_the_slo_targets_and_goodput_follows_them(server, browser):
    context, page, errors = new_page(browser, 390)
    page.goto(f"{server}?arrival=rate&request_rate=12&slo_ttft_ms=200&slo_tpot_ms=20")
    sync_api.expect(readout(page, "goodput_req_s")).to_be_visible(timeout=TIMEOUT_MS)
    trace = simulate(RunConfig(arrival="rate", request_rate=12.0))
    t = trace.timing()
    good = ((t.ttft * 1e3 <= 200) & (t.tpot * 1e3 <= 20)).sum() / trace.makespan_s
    assert float(readout(page, "goodput_req_s").get_attribute("data-value")) == pytest.approx(good, rel=1e-5)
    sync_api.expect(page.locator('[data-readout="ttft_ms_p99"] .readout-beside')).to_contain_text("target 200 ms")
    page.locator(".traffic-curve canvas").nth(1).wait_for()
    page.wait_for_timeout(800)
    full_page_screenshot(page, str(ARTIFACTS / "traffic-390.png"))
    context.close()
    assert not errors, errors


def test_an_update_with_traffic_on_restyles_far_less_than_bokeh_would_alone(server, browser):
    """BokehJS rewrites every renderer's position <style> at each paint, moved or not, and each renderer then
    reads its style back: one style recalculation per axis, grid, glyph and span of seven plots. The page keeps
    a sheet whose text is unchanged (explorable.patches.paint_fix); the same clicks with BokehJS's own method put back
    must cost more than twice the recalculations. (A window tall enough for every plot: plots out of sight are
    not painted until they come into sight.)"""
    context, page, errors = new_page(browser, 1280, 3200)
    page.goto(f"{server}?arrival=rate&request_rate=24")
    sync_api.expect(readout(page, "ttft_ms_p99")).to_be_visible(timeout=6 * TIMEOUT_MS)
    page.locator(".traffic-curve canvas").nth(1).wait_for()
    proto = "Bokeh.require('core/dom').InlineStyleSheet.prototype"
    assert page.evaluate(f"() => {proto}.__cbSameSheetKept") is True
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    peaks = {64: simulate(RunConfig(arrival="rate", request_rate=24.0, max_num_seqs=64)).summary()["peak_batch"],
             256: simulate(RunConfig(arrival="rate", request_rate=24.0)).summary()["peak_batch"]}
    assert peaks[64] != peaks[256]  # each click changes the readouts, so each is a full update

    def recalculations() -> float:
        """Style recalculations for a click on the 64 stop and one on the 256 stop, each drawn and settled."""
        count = 0.0
        for seqs in (64, 256):
            before = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            page.locator(".stop-max_num_seqs button").filter(has_text=f"{seqs}").first.click()
            sync_api.expect(readout(page, "peak_batch")).to_have_attribute("data-value", str(peaks[seqs]))
            page.wait_for_timeout(1500)  # the charts are painted in the frames after the readouts change
            after = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            count += after["RecalcStyleCount"] - before["RecalcStyleCount"]
        return count

    recalculations()  # both states computed and their rate curves known: every later click is one update
    kept = recalculations()
    page.evaluate(f"() => {{ const p = {proto}; p._update = p.__cbPlainUpdate; }}")
    plain = recalculations()
    context.close()
    assert not errors, errors
    assert 2 * kept < plain, (kept, plain)
