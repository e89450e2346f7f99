"""The four fixes for the memory wall in headless Chromium: the guide's steps, its closing table against the runs,
the GPU memory controls and the URL, at 1280 px and on an emulated phone (screenshots in artifacts/memory-*.png)."""
from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from engine import RunConfig, simulate
from explorable.state.store import ExplorableState, config_fields
from explorable.views.guide import GUIDES, MEMORY_STEPS, step_settings
from tests.explorable import served_app
from tests.explorable.served_app import ARTIFACTS, TIMEOUT_MS, full_page_screenshot, new_page, readout, \
    skip_without_chromium

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()

SHOTS = Path("/work/coord/shots/fixes")  # where the team looks at screenshots (outside the repository)
MEMORY_GUIDE = next(spec for spec in GUIDES if spec.steps is MEMORY_STEPS)


def step_summary(index: int) -> dict:
    """The run of guide step `index`, simulated here (not read from the page's cache)."""
    values = step_settings(ExplorableState(), index, MEMORY_STEPS)
    return json.loads(json.dumps(simulate(RunConfig(**config_fields(values))).summary()))


def save(page, name: str) -> None:
    """The whole page in artifacts/; for the team, the screen with the guide's step at its top."""
    ARTIFACTS.mkdir(exist_ok=True)
    full_page_screenshot(page, str(ARTIFACTS / name))
    if SHOTS.parent.is_dir():
        SHOTS.mkdir(exist_ok=True)
        page.locator(".memory-step-button").first.evaluate("el => el.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)
        page.screenshot(path=str(SHOTS / name))


def check_table(page) -> None:
    """Every cell of the closing table holds its row's run's figure, exactly."""
    table = page.locator(".fixes-table")
    sync_api.expect(table).to_be_visible(timeout=TIMEOUT_MS)
    for row, (index, _name) in enumerate(MEMORY_STEPS[-1].table):
        summary = step_summary(index)
        for cell in table.locator(f'tr[data-row="{row}"] td[data-key]').all():
            key = cell.get_attribute("data-key")
            assert cell.get_attribute("data-value") == repr(summary[key]), (row, key)


def test_the_guide_walks_the_four_fixes_and_ends_on_the_runs_table(server, browser):
    context, page, errors = new_page(browser, 1280)
    page.goto(server)
    sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=6 * TIMEOUT_MS)
    # The page opens at the first guide; the memory guide is one tab of the guides, shown when chosen.
    buttons = page.locator(".memory-step-button button")
    sync_api.expect(buttons.first).to_be_hidden()
    page.locator(".guide-tabs button").filter(has_text=MEMORY_GUIDE.label).click()
    sync_api.expect(buttons.first).to_be_visible(timeout=TIMEOUT_MS)
    for index, step in enumerate(MEMORY_STEPS):
        buttons.filter(has_text=step.title).click()
        # (expect's own timeout is 5 s; a loaded machine may take longer to run a step it has not seen)
        sync_api.expect(page.locator(".memory-step-text")).to_have_attribute("data-step", str(index + 1),
                                                                             timeout=TIMEOUT_MS)
        expected = step_summary(index)
        for key in ("peak_batch", "preemptions", "throughput_tok_s"):
            sync_api.expect(readout(page, key)).to_have_attribute("data-value", f"{expected[key]:.6g}",
                                                                  timeout=TIMEOUT_MS)
        if expected["num_gpus"] > 1:
            sync_api.expect(readout(page, "throughput_per_gpu_tok_s")).to_have_attribute(
                "data-value", f"{expected['throughput_per_gpu_tok_s']:.6g}")
        sync_api.expect(page.locator(".cache-line")).to_contain_text(f"GPU KV cache size: {expected['kv_cache_tokens']:,}")
    check_table(page)
    sync_api.expect(page.locator(".fixes-scroll-hint")).to_be_hidden()  # the whole table fits: no swipe hint
    sync_api.expect(page.locator(".terminal")).to_contain_text("Available KV cache memory")
    page.wait_for_function("() => location.search.includes('tensor_parallel_size=2')")
    query = parse_qs(urlparse(page.url).query)
    assert (query["gpu_memory_utilization"], query["kv_cache_dtype"], query["max_model_len"]) == (
        ["0.26"], ["fp8"], ["4096"])
    page.locator(".memory-step-text").scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    save(page, "memory-guide-last-1280.png")
    context.close()
    assert not errors, errors


@pytest.mark.parametrize("phone", ["iPhone 13", "390 px"])
def test_the_last_step_on_a_phone_keeps_its_table_inside_the_page(server, browser, phone):
    device = served_app.playwright(sync_api).devices[phone] if phone in ("iPhone 13",) else {
        "viewport": {"width": 390, "height": 844}}
    context = browser.new_context(**device)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    values = step_settings(ExplorableState(), len(MEMORY_STEPS) - 1, MEMORY_STEPS)
    changed = {k: v for k, v in values.items() if v != ExplorableState.param[k].default}
    page.goto(f"{server}?{urlencode(changed)}")
    # A link to the guide's last step opens the page at the memory guide's tab.
    sync_api.expect(page.locator(".memory-step-text")).to_be_visible(timeout=6 * TIMEOUT_MS)
    sync_api.expect(page.locator(".memory-step-text")).to_have_attribute(
        "data-step", str(len(MEMORY_STEPS)), timeout=6 * TIMEOUT_MS)
    check_table(page)
    # The table scrolls inside its own box, and says so; the page itself never scrolls sideways.
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    wrap = page.locator(".fixes-table-wrap")
    assert wrap.evaluate("el => el.scrollWidth > el.clientWidth")
    sync_api.expect(page.locator(".fixes-scroll-hint")).to_be_visible()
    # A flag is never split at its hyphens across two lines (each is one unbroken box).
    for flag in page.locator(".memory-step-text .flag").all():
        assert len(flag.evaluate("el => Array.from(el.getClientRects())")) == 1, flag.inner_text()
    page.wait_for_timeout(800)
    save(page, f"memory-guide-last-{phone.replace(' ', '-').lower()}.png")
    context.close()
    assert not errors, errors


def test_the_pool_from_switch_sizes_the_cache_as_vllm_does(server, browser):
    context, page, errors = new_page(browser, 1280)
    page.goto(server)
    sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=6 * TIMEOUT_MS)
    page.locator(".ctl-gpu_memory_utilization-from button").filter(has_text="--gpu-memory-utilization").click()
    cfg = RunConfig(gpu_memory_utilization=0.9)
    tokens = f"{cfg.num_gpu_blocks * 16:,}"
    sync_api.expect(page.locator(".cache-line")).to_contain_text(f"GPU KV cache size: {tokens} tokens")
    sync_api.expect(page.locator(".terminal")).to_contain_text(f"GPU KV cache size: {tokens} tokens")
    sync_api.expect(readout(page, "peak_batch")).to_have_attribute(
        "data-value", f"{simulate(cfg).summary()['peak_batch']:.6g}")
    page.wait_for_function("() => location.search.includes('gpu_memory_utilization=0.9')")
    page.locator(".ctl-gpu_memory_utilization-from button").filter(has_text="GiB slider").click()
    sync_api.expect(page.locator(".cache-line")).to_contain_text("GPU KV cache size: 116,496 tokens")
    page.wait_for_function("() => location.search.includes('gpu_memory_utilization=null')")
    context.close()
    assert not errors, errors
