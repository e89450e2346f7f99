"""The static build in headless Chromium: a small export (`python -m explorable.export` on a reduced grid) served
by `http.server` on loopback, every request to another host refused twice over (Chromium's resolver maps every
other name to nothing, and Playwright's routing records and aborts whatever still tries).

Needs Debian's chromium (/usr/bin/chromium, or $CHROMIUM) and the playwright package; skipped otherwise.
Screenshots land in artifacts/. With CB_STATIC_SITE=DIR the same checks run on an export built beforehand
(`python -m explorable.export --out DIR`, the full grid: its ten pool stops must not widen the sidebar).
"""
from __future__ import annotations

import functools
import json
import http.server
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import test_layout_browser as layout_checks  # the served app's layout checks, run on the static page

from engine import RunConfig, simulate
from explorable.views.guide import STEPS, step_settings
from explorable.state.store import ExplorableState
from explorable.state.control_specs import config_fields
from tests.explorable import served_app
from tests.explorable.served_app import ARTIFACTS, ROOT, full_page_screenshot

pytestmark = pytest.mark.browser

sync_api = layout_checks.sync_api
# Every guided step's settings and one neighbour of each, on both units and allocations: 72 states.
SMALL_GRID = ["max_num_seqs=64,256,512", "pool_gib=2,16", "declared_multiple=1,4", "spread=1,16"]
CHROMIUM_ARGS = [*served_app.CHROMIUM_ARGS, "--disable-quic", "--no-first-run", "--disable-component-update",
                 "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
READOUT_FIELDS = ("throughput_tok_s", "peak_batch", "mean_batch", "preemptions", "recomputed_prompt_tokens",
                  "live_cache_fraction")


def build_site(out: Path, grid=SMALL_GRID) -> None:
    """Run the export as a reader would, on a reduced grid."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "explorable.export", "--out", str(out), "--quiet", "--jobs", "2"]
    for item in grid:
        args += ["--stops", item]
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def site_dir(static_build) -> Path:
    """The run's small export (tests/explorable/conftest.py), or with CB_STATIC_SITE=DIR an export already built."""
    return static_build.out


@pytest.fixture(scope="module")
def site(site_dir):
    """The small export, served on loopback: yields the page's URL."""
    out = site_dir
    handler = functools.partial(_QuietHandler, directory=str(out))
    httpd = served_app.QuietHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    httpd.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_):
        pass


@pytest.fixture(scope="module")
def browser():
    """A Chromium of its own (resolving no other host), from the run's one Playwright driver."""
    with served_app.chromium(sync_api, CHROMIUM_ARGS) as b:
        yield b


def refuse_other_hosts(page) -> list[str]:
    """Abort every request whose host is not loopback; the returned list records them."""
    refused: list[str] = []

    def route(r):
        host = urlparse(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return refused


def shown_readouts(page) -> dict[str, float]:
    return {key: float(page.locator(f'[data-readout="{key}"] .readout-value').get_attribute("data-value"))
            for key in READOUT_FIELDS}


def engine_readouts(settings: dict) -> dict[str, float]:
    """What the readouts must say for `settings`, straight from the engine."""
    s = simulate(RunConfig(**config_fields(settings))).summary()
    return {**{k: float(s[k]) for k in READOUT_FIELDS}, "live_cache_fraction": 100 * s["live_cache_fraction"]}


def test_every_guided_step_shows_the_engines_numbers_with_no_request_to_another_host(site, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(served_app.TIMEOUT_MS)
    refused = refuse_other_hosts(page)
    try:
        page.goto(site)
        page.evaluate("window.cbStatic.ready")
        state = ExplorableState.__new__(ExplorableState)  # step_settings reads only the declared defaults
        throughput = page.locator('[data-readout="throughput_tok_s"] .readout-value')
        # Through the steps and back to the first (the default page itself is drawn by the shell).
        for i in [*range(1, len(STEPS)), 0]:
            before = throughput.get_attribute("data-value")
            page.locator(".step-button button").filter(has_text=STEPS[i].title).click()
            settings = {**ExplorableState.param.values(), **step_settings(state, i)}
            settings = {k: settings[k] for k in state.defaults()}
            want = engine_readouts(settings)
            if f"{want['throughput_tok_s']:.6g}" != before:
                sync_api.expect(throughput).not_to_have_attribute("data-value", before)
            sync_api.expect(page.locator(".step-text")).to_have_attribute("data-step", str(i + 1))
            got = shown_readouts(page)
            for key in READOUT_FIELDS:
                assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-9), (STEPS[i].title, key)
            # The URL names the state with the served app's keys.
            query = dict(re.findall(r"([^?&=]+)=([^&]*)", page.evaluate("location.search")))
            assert int(query["max_num_seqs"]) == settings["max_num_seqs"]
            assert float(query["pool_gib"]) == settings["pool_gib"] and query["unit"] == settings["unit"]
        ARTIFACTS.mkdir(exist_ok=True)
        full_page_screenshot(page, str(ARTIFACTS / "static-1280.png"))
    finally:
        context.close()
    assert refused == [], f"requests to other hosts: {refused}"


def test_a_link_opens_its_state_and_an_off_grid_value_snaps_with_a_notice(site, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    refused = refuse_other_hosts(page)
    try:
        # A link the served app writes (Cap at 64), with a pool between stops (nearest: 16 on the small grid and
        # on the full one).
        page.goto(site + "?max_num_seqs=64&pool_gib=15&allocation=on-demand&unit=pass&spread=16.0")
        page.evaluate("window.cbStatic.ready")
        sync_api.expect(page.locator('[data-notice="link"]')).to_contain_text("pool_gib")
        page.wait_for_function("new URLSearchParams(location.search).get('pool_gib') === '16.0'")
        settings = {**ExplorableState.__new__(ExplorableState).defaults(), "max_num_seqs": 64}
        assert shown_readouts(page)["throughput_tok_s"] == pytest.approx(
            engine_readouts(settings)["throughput_tok_s"], rel=1e-5)
        sync_api.expect(page.locator(".step-text")).to_have_attribute("data-step", "2")
        # A stop click gives the deltas the served app shows against the setting before.
        page.locator(".stop-max_num_seqs button").filter(has_text=re.compile(r"^256$")).click()
        sync_api.expect(page.locator('[data-readout="throughput_tok_s"] .readout-delta')).to_have_text(
            re.compile(r"^\u2212[\d,]+ tok/s$"))
    finally:
        context.close()
    assert refused == []


def test_the_request_rate_figures_are_left_out_of_the_shell_and_added_before_traffic_shows(site, site_dir, browser):
    """The shell opens at a state without traffic: it leaves the request-rate figures' models out (a fifth of them),
    and the page's script adds them, whole, before they are shown, here with a link straight to a traffic state
    (before the page is idle)."""
    config = json.loads(re.search(r"window\.CB_STATIC_CONFIG = (.*?);</script>",
                                  (site_dir / "index.html").read_text()).group(1).replace("<\\/", "</"))
    docs = re.search(r'<script type="application/json" id="[^"]+">\s*(.*?)\s*</script>',
                     (site_dir / "index.html").read_text(), re.S).group(1)
    named = {name: i for name, i in config["ids"].items() if name.startswith("traffic.") and name != "traffic.pane"}
    assert sorted(named.values()) == config["trafficIds"] and len(named) >= 6
    assert not [i for i in named.values() if f'"id":"{i}"' in docs.replace(" ", "")]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(site + "?arrival=rate&request_rate=16.0")
        page.evaluate("window.cbStatic.ready")
        present = page.evaluate("ids => ids.map(i => !!Bokeh.documents[0].get_model_by_id(i))", list(named.values()))
        assert all(present), dict(zip(named, present))
        sync_api.expect(page.locator(".traffic-curve canvas").first).to_be_visible()
        assert page.evaluate("i => Bokeh.documents[0].get_model_by_id(i).data.rate.length",
                             named["traffic.source"]) == 12
    finally:
        context.close()


def test_the_page_formats_numbers_as_python_does_ties_included(site, browser):
    """The script says readouts' changes from two summaries (explorable.views.readouts.CHANGES): its number format
    must be Python's to the digit, at exact ties (to even) and at values a float multiplication would make ties."""
    import random

    rng = random.Random(7)
    values = [0.15, 0.25, 0.35, 2.5, 3.5, 0.125, 0.375, 1.005, 2.675, 1234567.5, 1234568.5, 999.95, 0.05, 0.0, 1e-9,
              45.0, 123456789.125, *(rng.uniform(0, 5000) for _ in range(300)), *(rng.randrange(0, 10**7) / 8 for _ in range(100)),
              *(rng.randrange(0, 10**5) / 100 for _ in range(100))]
    cases = [[x, d, comma] for x in values for d in (0, 1, 2) for comma in (True, False)]
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(site)
        page.evaluate("window.cbStatic.ready")
        got = page.evaluate("cases => cases.map(([x, d, c]) => window.cbStatic.fixed(x, d, c))", cases)
    finally:
        context.close()
    want = [format(x, f"{',' if comma else ''}.{d}f") for x, d, comma in cases]
    assert [(c, g) for c, g, w in zip(cases, got, want) if g != w] == []


@pytest.mark.parametrize("width", (390, 1280))
def test_the_static_page_passes_the_served_apps_layout_checks(site, browser, width):
    # Any query but the projector flag: the checks expect the compact view and save no screenshot of their own.
    layout_checks.test_the_page_fits_the_screen(site, browser, width, "?from=static-test")


def test_the_readme_iframe_snippet_sizes_the_frame_to_the_static_page(site, site_dir, browser):
    """The documented snippet (docs/embedding.md, "Embed without a server") in an 820 px course column: no inner
    scrollbar."""
    text = (ROOT / "docs" / "embedding.md").read_text()
    section = text[text.index("## Embed without a server"):]
    snippet = re.search(r"```html\n(.*?)```", section, re.DOTALL).group(1)
    assert "https://course.example.edu/explorable/index.html" in snippet
    snippet = snippet.replace("https://course.example.edu/explorable/index.html", site)
    (site_dir / "course-page.html").write_text(
        "<!doctype html><html><body style='margin:0'><main style='width:820px; margin:0 auto'>"
        f"<h1>Week 3: batching</h1>{snippet}<p>After the explorable.</p></main></body></html>")
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    page = context.new_page()
    refused = refuse_other_hosts(page)
    try:
        page.goto(site.replace("index.html", "course-page.html"))
        frame = page.frame_locator("#cb-explorable")
        sync_api.expect(frame.locator('[data-readout="throughput_tok_s"] .readout-value')).to_be_visible()
        inner = next(f for f in page.frames if "/index.html" in f.url)
        inner.evaluate("window.cbStatic.ready")
        fits = {}
        for _ in range(60):  # the height arrives within a second or so
            fits = inner.evaluate("""() => ({content: document.documentElement.scrollHeight, view: innerHeight,
                                            wide: document.documentElement.scrollWidth, across: innerWidth})""")
            if fits["content"] <= fits["view"] and fits["view"] > 1000:
                break
            page.wait_for_timeout(250)
        assert fits["wide"] <= fits["across"] == 820, fits
        assert fits["content"] <= fits["view"], f"the frame scrolls inside: {fits}"
        ARTIFACTS.mkdir(exist_ok=True)
        full_page_screenshot(page, str(ARTIFACTS / "static-embed-820.png"))
    finally:
        context.close()
    assert refused == []


def test_the_projector_flag_opens_the_served_apps_projector_view(site, browser):
    """`?projector=1` on a static link opens projector.html (the app's own projector view, built by the export):
    every chart text at 16 px or more, the flag kept in the address and the share link; and it fits at 320 px."""
    layout_checks.test_the_page_fits_the_screen(site, browser, 320, "?projector=1")
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    page = context.new_page()
    refused = refuse_other_hosts(page)
    try:
        page.goto(site + "?max_num_seqs=64&projector=1")
        page.evaluate("window.cbStatic.ready")
        assert urlparse(page.url).path.endswith("/projector.html")
        sizes = page.evaluate("""() => [...Bokeh.documents[0].all_models].flatMap(m =>
            m.type.endsWith('Axis') ? [m.major_label_text_font_size, m.axis_label_text_font_size]
            : m.type === 'Label' ? [m.text_font_size] : [])""")
        assert len(sizes) >= 10 and all(float(s.rstrip("px")) >= 16 for s in sizes), sizes
        for selector in (".legend-item", ".log-line", ".terminal .cmd"):
            px = page.locator(selector).first.evaluate("el => getComputedStyle(el).fontSize")
            assert float(px.rstrip("px")) >= 16, selector
        query = dict(re.findall(r"([^?&=]+)=([^&]*)", page.evaluate("location.search")))
        assert query["projector"] == "1" and query["max_num_seqs"] == "64"
        href = page.locator(".share-link").first.get_attribute("href")
        assert href.startswith(urlparse(page.url).path + "?") and "projector=1" in href
        ARTIFACTS.mkdir(exist_ok=True)
        full_page_screenshot(page, str(ARTIFACTS / "static-projector-1280x720.png"))
        # Without the flag, the projector page hands over to the compact one.
        page.goto(site.replace("index.html", "projector.html") + "?max_num_seqs=64")
        page.evaluate("window.cbStatic.ready")
        assert urlparse(page.url).path.endswith("/index.html")
    finally:
        context.close()
    assert refused == []


def test_the_share_link_follows_the_state_and_the_fixed_advanced_controls_say_so(site, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    refused = refuse_other_hosts(page)
    try:
        page.goto(site)
        page.evaluate("window.cbStatic.ready")
        link = page.locator(".share-link").first
        sync_api.expect(link).to_be_visible()
        page.locator(".stop-max_num_seqs button").filter(has_text=re.compile(r"^64$")).click()
        page.wait_for_function("new URLSearchParams(location.search).get('max_num_seqs') === '64'")
        here = page.evaluate("location.pathname + location.search")
        sync_api.expect(link).to_have_attribute("href", here)
        # The link opens the same state in a page of its own.
        other = context.new_page()
        other.goto(urlparse(site)._replace(path="", query="").geturl() + link.get_attribute("href"))
        other.evaluate("window.cbStatic.ready")
        assert other.evaluate("window.cbStatic.values()")["max_num_seqs"] == "64"
        assert (other.locator('[data-readout="throughput_tok_s"] .readout-value').get_attribute("data-value")
                == page.locator('[data-readout="throughput_tok_s"] .readout-value').get_attribute("data-value"))
        # Advanced: the controls the grid does not hold are named with their fixed values, not drawn.
        page.locator(".advanced").first.get_by_text("Advanced").click()
        note = page.locator(".fixed-note").first
        sync_api.expect(note).to_contain_text("static build")
        # (a choice by the label the served sidebar gives it; an unset setting says unset)
        for said in ("Qwen3-8B", "H100 SXM", "--gpu-memory-utilization: unset"):
            sync_api.expect(note).to_contain_text(said)
        # The controls the guides under traffic and with prefix caching name are drawn, not named: the page holds them.
        for held in ("--max-num-batched-tokens", "traffic:", "prefix caching", "conversation turns"):
            sync_api.expect(note).not_to_contain_text(held)
        assert page.locator(".advanced select").count() == 0 and page.locator(".ctl-model").count() == 0
        assert page.locator(".ctl-arrival").count() == 1 and page.locator(".ctl-max_num_batched_tokens").count() == 1
    finally:
        context.close()
    assert refused == []
