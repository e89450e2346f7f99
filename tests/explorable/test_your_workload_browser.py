"""'Your workload, your server' in headless Chromium: a file uploaded gives its histogram and verdict, two numbers
give the per-pass and per-request figures, a pasted log line reaches the reproduced state, and a malformed file,
an oversized one and a hostile paste each get one line and leave the page working (screenshots in
/work/coord/shots/workload when that folder exists, else artifacts/)."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from engine import RunConfig, simulate
from engine.quantile_workload import lognormal_lengths
from explorable.state import your_workload
from tests.explorable.served_app import ARTIFACTS, TIMEOUT_MS, full_page_screenshot, new_page, playwright, readout, \
    skip_without_chromium

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()
expect = sync_api.expect

SHOTS = Path("/work/coord/shots/workload") if Path("/work/coord/shots").is_dir() else ARTIFACTS
MEMORY_CAP = ("INFO 10-12 14:00:41 [kv_cache_utils.py:1087] GPU KV cache size: 232,992 tokens\n"
              "INFO 10-12 14:03:32 [loggers.py:123] Engine 000: Avg prompt throughput: 5120.9 tokens/s, Avg "
              "generation throughput: 2611.3 tokens/s, Running: 83 reqs, Waiting: 131 reqs, GPU KV cache usage: "
              "99.6%, Prefix cache hit rate: 0.0%")


def chat_trace(path: Path, rows: int = 200) -> Path:
    """A BurstGPT-layout CSV whose completions are chat-like: p50 100, p99 about 1,500."""
    rng = np.random.default_rng(7)
    outputs = lognormal_lengths(rows, 100, 1500)[rng.permutation(rows)]
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    lines += [f"{i // 4},ChatGPT,{300 + i},{o},{300 + i + o},Conversation log" for i, o in enumerate(outputs)]
    path.write_text("\n".join(lines) + "\n")
    return path


def open_section(page, url: str) -> None:
    page.goto(url)
    expect(readout(page, "peak_batch")).to_be_visible(timeout=6 * TIMEOUT_MS)
    page.locator(".your-workload .card-header").first.click()
    expect(page.locator(".yw-upload input[type=file]")).to_be_attached()


def page_still_works(page) -> None:
    """A click on a quick stop still runs the engine and redraws the readouts."""
    page.locator(".stop-max_num_seqs button").filter(has_text="32").first.click()
    expect(page.locator('[data-readout="peak_batch"] .readout-beside')).to_contain_text("of 32 slots")


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(600)
    full_page_screenshot(page, str(SHOTS / name))


def one_line(page, selector: str) -> str:
    expect(page.locator(selector)).to_be_visible(timeout=3 * TIMEOUT_MS)
    text = page.locator(selector).inner_text().strip()
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


def test_an_uploaded_trace_gives_its_histogram_and_verdict_and_runs_every_view(server, browser, tmp_path):
    trace = chat_trace(tmp_path / "chat.csv")
    context, page, errors = new_page(browser, 1280)
    open_section(page, server)
    page.locator(".yw-upload input[type=file]").set_input_files(str(trace))
    expect(page.locator(".yw-source")).to_contain_text("BurstGPT layout): 200 requests", timeout=3 * TIMEOUT_MS)
    expect(page.locator(".yw-percentiles")).to_contain_text("p50 100")
    expect(page.locator(".yw-verdict")).to_have_attribute("data-level", "open-ended")
    expect(page.locator(".yw-verdict")).to_contain_text("p99 / p50 = 15")
    expect(page.locator(".yw-histogram canvas").first).to_be_visible()
    # Every view runs the file, at its own times: the readouts are its run's.
    read = your_workload.read_upload(trace.read_bytes(), "chat.csv", 1)
    expected = simulate(RunConfig(workload=read.workload, arrival="workload")).summary()
    expect(readout(page, "throughput_tok_s")).to_have_attribute("data-value", f"{expected['throughput_tok_s']:.6g}")
    expect(page.locator(".traffic-readouts")).to_be_visible()  # with arrival times, the traffic views apply
    assert "chat" not in page.url and "output_p50" not in page.url  # a file never goes into the link
    shot(page, "upload-1280.png")
    page_still_works(page)
    context.close()
    assert not errors, errors


def test_two_numbers_give_the_per_pass_and_per_request_figures_and_go_into_the_link(server, browser):
    context, page, errors = new_page(browser, 1280)
    open_section(page, server)
    for name, value in (("output_p50", 200), ("output_p99", 2000)):
        page.locator(f".yw-{name} input").fill(str(value))
        page.locator(f".yw-{name} input").press("Enter")
    page.locator(".yw-show button").click()
    expect(page.locator(".yw-source")).to_contain_text("p50 200 and p99 2,000", timeout=3 * TIMEOUT_MS)
    cfg = RunConfig(output_p50=200, output_p99=2000)
    per_pass = simulate(cfg).summary()["throughput_tok_s"]
    per_request = simulate(cfg.replace(unit="request")).summary()["throughput_tok_s"]
    expect(page.locator(".yw-gain-value")).to_have_attribute("data-gain", f"{per_pass / per_request:.4f}",
                                                             timeout=3 * TIMEOUT_MS)
    expect(page.locator(".yw-gain")).to_contain_text(f"{per_pass:,.0f}")
    expect(page.locator(".yw-gain")).to_contain_text(f"{per_request:,.0f}")
    page.wait_for_function("() => location.search.includes('output_p99=2000')")
    query = parse_qs(urlparse(page.url).query)
    assert (query["output_p50"], query["output_p99"], query["seed"], query["requests"]) == (
        ["200"], ["2000"], ["1"], ["256"])
    # The link opens the same workload in a fresh page.
    other = context.new_page()
    other.goto(page.url)
    expect(readout(other, "throughput_tok_s")).to_have_attribute("data-value", f"{per_pass:.6g}",
                                                                 timeout=6 * TIMEOUT_MS)
    context.close()
    assert not errors, errors


def test_a_pasted_log_reaches_the_state_that_reproduces_the_server(server, browser):
    context, page, errors = new_page(browser, 1280)
    open_section(page, server)
    page.locator(".yw-paste textarea").fill(MEMORY_CAP)
    page.locator(".yw-max-num-seqs input").fill("512")
    page.locator(".yw-max-num-seqs input").press("Enter")
    page.locator(".yw-diagnose button").click()
    expect(page.locator(".yw-diagnosis")).to_have_attribute("data-case", "memory-cap", timeout=2 * TIMEOUT_MS)
    expect(page.locator(".yw-diagnosis")).to_contain_text("Running is 83 of --max-num-seqs 512 with 131 waiting")
    page.locator(".yw-reproduce button").click()
    expect(page.locator(".yw-reproduced")).to_be_visible(timeout=2 * TIMEOUT_MS)
    # 232,992 tokens of Qwen3-8B's KV are 32 GiB; --max-num-seqs 512.
    page.wait_for_function("() => location.search.includes('pool_gib=32') && location.search.includes('max_num_seqs=512')")
    expected = simulate(RunConfig(pool_gib=32.0, max_num_seqs=512)).summary()
    expect(readout(page, "peak_batch")).to_have_attribute("data-value", f"{expected['peak_batch']:.6g}")
    shot(page, "diagnose-1280.png")
    context.close()
    assert not errors, errors


def test_a_malformed_file_an_oversized_file_and_a_hostile_paste_each_get_one_line(server, browser, tmp_path):
    context, page, errors = new_page(browser, 1280)
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    open_section(page, server)
    before = readout(page, "throughput_tok_s").get_attribute("data-value")
    bad = tmp_path / "bad.csv"
    bad.write_text("Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,20,5\n2,ChatGPT,x,7\n")
    page.locator(".yw-upload input[type=file]").set_input_files(str(bad))
    line = one_line(page, ".yw-status .yw-error")
    assert "line 3" in line and "Request tokens" in line, line
    assert readout(page, "throughput_tok_s").get_attribute("data-value") == before  # nothing else changed
    big = tmp_path / "big.csv"
    big.write_text("prompt_len,output_len\n" + "1000,100\n" * 300_000)  # 2.7 MB
    page.locator(".yw-upload input[type=file]").focus()
    page.locator(".yw-upload input[type=file]").set_input_files(str(big))
    refused = one_line(page, ".cb-upload-refused")
    assert "2.7 MB" in refused and "limit here is 2.0 MB" in refused and "nothing was sent" in refused
    hostile = '<img src=x onerror=alert(1)><script>alert(2)</script> Running: 9 reqs ' + "A" * 9000
    page.locator(".yw-paste textarea").fill(hostile)
    assert len(page.locator(".yw-paste textarea").input_value()) == your_workload.MAX_PASTE_CHARS  # the box stops
    page.locator(".yw-diagnose button").click()
    line = one_line(page, ".yw-result .yw-error")
    assert "stats line" in line or "no vLLM log line" in line, line
    page.wait_for_timeout(500)
    assert not dialogs and readout(page, "throughput_tok_s").get_attribute("data-value") == before
    page_still_works(page)
    shot(page, "refusals-1280.png")
    context.close()
    assert not errors, errors


@pytest.mark.parametrize("device", ["iPhone 13", "Pixel 7"])
def test_the_guided_walk_on_a_phone(server, browser, device):
    context = browser.new_context(**playwright(sync_api).devices[device])
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    open_section(page, server)
    page.locator(".yw-step-button button").filter(has_text="A day").click()
    expect(page.locator(".yw-walk")).to_have_attribute("data-step", "1", timeout=2 * TIMEOUT_MS)
    expect(page.locator(".yw-source")).to_contain_text("BurstGPT layout): 392 requests")
    page.locator(".yw-step-button button").filter(has_text="What continuous").click()
    expect(page.locator(".yw-gain-value")).to_be_visible(timeout=3 * TIMEOUT_MS)
    page.locator(".yw-step-button button").filter(has_text="Diagnose").click()
    expect(page.locator(".yw-diagnosis")).to_have_attribute("data-case", "memory-cap", timeout=2 * TIMEOUT_MS)
    # Nothing wider than the page's layout width (the phone's, once the page declares a viewport).
    width, layout = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= layout + 1, (width, layout)
    page.locator(".your-workload").scroll_into_view_if_needed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(".your-workload").screenshot(path=str(SHOTS / f"walk-{device.replace(' ', '-')}.png"))
    context.close()
    assert not errors, errors


def test_the_section_meets_wcag_21_aa_opened_and_after_each_step_of_its_walk(server, browser):
    """axe-core's WCAG 2.1 A/AA rules, as tests/explorable/test_accessibility_browser.py runs them on the rest of
    the page: the section unfolded, after each step of its walk (a file shown, the comparison, a diagnosis and the
    reproduced server), at 1280 and 390 px. Every field, the file input, the paste box and the walk's buttons have
    an accessible name."""
    from tests.explorable.test_accessibility_browser import at_each_width

    context, page, errors = new_page(browser, 1280)
    open_section(page, server)
    page.wait_for_timeout(600)
    found = at_each_width(page, "section opened")
    for i, title in enumerate(("A day", "What continuous", "Diagnose")):
        page.locator(".yw-step-button button").filter(has_text=title).click()
        expect(page.locator(".yw-walk")).to_have_attribute("data-step", str(i + 1), timeout=2 * TIMEOUT_MS)
        expect(page.locator(".yw-histogram canvas").first).to_be_visible(timeout=3 * TIMEOUT_MS)
        page.wait_for_timeout(800)
        found += at_each_width(page, f"walk step {i + 1}", whole=False)  # (the page-wide rules: first and last)
    page.locator(".yw-reproduce button").click()
    expect(page.locator(".yw-reproduced")).to_be_visible(timeout=2 * TIMEOUT_MS)
    page.wait_for_timeout(800)
    found += at_each_width(page, "server reproduced")
    # Named for a screen reader beyond what axe requires: the walk's group, and each field's spin buttons.
    assert page.locator(".yw-step-button .bk-btn-group").get_attribute("aria-label") == \
        "steps: your workload, your server"
    assert page.locator(".yw-output_p50 .bk-spin-btn-up").get_attribute("aria-label") == \
        "p50 completion tokens: one more"
    context.close()
    assert found == [], "\n".join(found)
    assert not errors, errors
