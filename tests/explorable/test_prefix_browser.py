"""Prefix caching in headless Chromium: the switch, the steps, the cache readout, the lanes' legend and the URL,
at a laptop's and a phone's width (screenshots in artifacts/prefix-*.png)."""
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


def test_the_switch_and_a_step_show_the_cache_readout_legend_and_url(server, browser):
    context, page, errors = new_page(browser, 1280)
    page.goto(server)
    sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=6 * TIMEOUT_MS)
    assert readout(page, "prefix_cache_hit_tokens").count() == 0
    assert "from cache" not in page.locator(".lane-legend").inner_text()
    page.locator(".ctl-enable_prefix_caching input").check()
    expected = simulate(RunConfig(enable_prefix_caching=True)).summary()
    sync_api.expect(readout(page, "prefix_cache_hit_tokens")).to_have_attribute(
        "data-value", f"{expected['prefix_cache_hit_tokens']:.6g}")
    sync_api.expect(readout(page, "recomputed_prompt_tokens")).to_have_attribute(
        "data-value", f"{expected['recomputed_prompt_tokens']:.6g}")
    sync_api.expect(page.locator(".lane-legend")).to_contain_text("from cache")
    sync_api.expect(page.locator(".prefix-step-text")).to_have_attribute("data-step", "1")
    page.wait_for_function("() => location.search.includes('enable_prefix_caching=true')")
    page.locator(".prefix-step-button button").filter(has_text="A shared system prompt").click()
    sync_api.expect(readout(page, "peak_batch")).to_have_attribute("data-value", "256")
    page.wait_for_function("() => location.search.includes('system_prompt_len=1024')")
    query = parse_qs(urlparse(page.url).query)
    assert query["enable_prefix_caching"] == ["true"] and query["system_prompt_len"] == ["1024"]
    page.wait_for_timeout(800)
    ARTIFACTS.mkdir(exist_ok=True)
    full_page_screenshot(page, str(ARTIFACTS / "prefix-1280.png"))
    context.close()
    assert not errors, errors


def test_a_link_turns_caching_on_at_a_phones_width(server, browser):
    context, page, errors = new_page(browser, 390)
    page.goto(f"{server}?enable_prefix_caching=true&pool_gib=2&max_num_seqs=512")
    expected = simulate(RunConfig(enable_prefix_caching=True, pool_gib=2.0, max_num_seqs=512)).summary()
    sync_api.expect(readout(page, "prefix_cache_hit_tokens")).to_have_attribute(
        "data-value", f"{expected['prefix_cache_hit_tokens']:.6g}", timeout=6 * TIMEOUT_MS)
    sync_api.expect(page.locator(".prefix-step-text")).to_have_attribute("data-step", "2")
    page.wait_for_timeout(800)
    ARTIFACTS.mkdir(exist_ok=True)
    full_page_screenshot(page, str(ARTIFACTS / "prefix-390.png"))
    context.close()
    assert not errors, errors
