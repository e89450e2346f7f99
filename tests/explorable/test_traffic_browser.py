"""The Traffic section in headless Chromium: the controls, the latency readouts, the steps under traffic and
the request-rate curve, at a phone's and a laptop's width (screenshots in artifacts/traffic-*.png)."""
from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from engine import RunConfig, simulate
from tests.explorable.served_app import ARTIFACTS, CHROMIUM, TIMEOUT_MS, new_page, readout

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
    pytest.skip(f"no Chromium at {CHROMIUM}", allow_module_level=True)


def test_traffic_controls_readouts_steps_and_curve(server, browser):
    context, page, errors = new_page(browser, 1280)
    page.goto(server)
    sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=6 * TIMEOUT_MS)  # the first page may prepare
    # All at once (the article's experiment): no latency readouts.
    assert not page.locator(".traffic-readouts").is_visible()
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
    page.screenshot(path=str(ARTIFACTS / "traffic-1280.png"), full_page=True)
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
    page.screenshot(path=str(ARTIFACTS / "traffic-390.png"), full_page=True)
    context.close()
    assert not errors, errors
