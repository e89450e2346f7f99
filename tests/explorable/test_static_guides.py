"""The static build's three guides (all at once, under traffic, with prefix caching) against the served app's own
views, in headless Chromium: every step of every guide, each control a step names moved to each of its held values
from that step, the SLO targets at values between any stops, and links to held and unheld settings.

The served app's figures are computed in-process by the same code the served page shows: an `ExplorableState` at the
settings and its `Readouts` view (explorable.views.readouts), whose panes the served page draws. The static page must
show the same text, to the digit shown, in every readout card (label value, the text beside it).

Uses the session's small export (tests/explorable/conftest.py STATIC_GRID); skipped without Chromium or playwright.
"""
from __future__ import annotations

import html
import json
import re

import pytest
import test_layout_browser as layout_checks

from explorable.page.url import query_values
from explorable.state.store import ExplorableState
from explorable.static_site import export
from explorable.views.guide import GUIDES
from explorable.views.readouts import Readouts
from tests.explorable import served_app
from tests.explorable.conftest import STATIC_GRID
from tests.explorable.served_app import ARTIFACTS, full_page_screenshot
from tests.explorable.test_static_site import CHROMIUM_ARGS, refuse_other_hosts

pytestmark = pytest.mark.browser
sync_api = layout_checks.sync_api
HELD = [spec for spec in GUIDES if not spec.needs or spec.needs in ("traffic", "prefix")]
CARD = re.compile(r'data-readout="([^"]+)".*?data-value="([^"]*)">(.*?)</span><span class="readout-beside">(.*?)</span>',
                  re.S)


@pytest.fixture(scope="module")
def browser():
    with served_app.chromium(sync_api, CHROMIUM_ARGS) as b:
        yield b


@pytest.fixture(scope="module")
def page(static_site, browser):
    """One page of the static build, opened at its starting point; every request to another host refused."""
    context, pg, _ = served_app.new_page(browser, 1280)
    pg.refused = refuse_other_hosts(pg)
    pg.goto(static_site)
    pg.evaluate("window.cbStatic.ready")
    yield pg
    context.close()
    assert pg.refused == [], f"requests to other hosts: {pg.refused}"


_served: dict[str, dict] = {}
# The readout cards on the static page: the run's, and the traffic ones while shown.
CARDS = ".run-readouts [data-readout], .traffic-readouts [data-readout]"


def readouts_html(view: Readouts) -> str:
    """The served page's readout cards: the run's, and the traffic ones where it shows them."""
    return view.pane.object + (view.traffic.object if view.traffic.visible else "")


def served(settings: dict, slo: dict | None = None) -> dict[str, tuple[str, str, str]] | None:
    """The served app's readout cards for these settings (the rest at the start): key -> (data-value, the value
    as shown, the text beside it), from its Readouts view; the traffic cards only where the served page shows them.
    None for settings that cannot run."""
    key = json.dumps([sorted(settings.items()), sorted((slo or {}).items())], default=str)
    if key not in _served:
        state = ExplorableState(**settings, **(slo or {}))
        if state.run_error:
            return None
        text = readouts_html(Readouts(state=state))
        _served[key] = {k: (v, html.unescape(t), html.unescape(b)) for k, v, t, b in CARD.findall(text)}
    return _served[key]


def shown(pg) -> dict[str, list[str]]:
    """The static page's readout cards, as a reader sees them (the traffic cards only while shown)."""
    cards = pg.locator(CARDS).evaluate_all("""els => els
        .filter(el => el.checkVisibility())
        .map(el => [el.dataset.readout, el.querySelector('.readout-value').dataset.value,
                    el.querySelector('.readout-value').textContent, el.querySelector('.readout-beside').textContent])""")
    return {k: [v, t, b] for k, v, t, b in cards}


DELTA = re.compile(r'data-readout="([^"]+)".*?<div class="readout-delta ([a-z]*)">(.*?)</div>', re.S)


def served_changes(before: dict, settings: dict) -> dict[str, list[str]]:
    """The change cells the served app's Readouts shows after a reader goes from `before` to `settings` (key ->
    [verdict, text]): its state and view at `before`, then every control set to `settings`' values at once."""
    state = ExplorableState(**before)
    view = Readouts(state=state)  # (open before the change: it keeps the goodput it showed, as on the served page)
    defaults = ExplorableState.__new__(ExplorableState).defaults()
    state.param.update(**{**defaults, **settings})
    text = readouts_html(view)
    return {k: [v, html.unescape(t).replace("\xa0", "")] for k, v, t in DELTA.findall(text)}


def shown_changes(pg) -> dict[str, list[str]]:
    cards = pg.locator(CARDS).evaluate_all("""els => els
        .filter(el => el.checkVisibility())
        .map(el => { const d = el.querySelector('.readout-delta');
                     return [el.dataset.readout, d.className.replace('readout-delta', '').trim(),
                             d.textContent.replace(/\u00a0/g, '')]; })""")
    return {k: [v, t] for k, v, t in cards}


def texts(settings: dict) -> dict[str, str]:
    """A setting's held controls as the page's script holds them (URL texts)."""
    defaults = ExplorableState.__new__(ExplorableState).defaults()
    return {n: export.url_text(n, {**defaults, **settings}[n]) for n in export.HELD_CONTROLS}


def wait_for(pg, settings: dict) -> None:
    want = texts(settings)
    pg.wait_for_function("want => Object.entries(want).every(([n, v]) => window.cbStatic.values()[n] === v)", arg=want)


def tab_and_step(pg, spec, i: int) -> None:
    pg.locator(".guide-tabs button").filter(has_text=spec.label).click()
    pg.locator(f".{spec.css}-button button").nth(i).click()
    wait_for(pg, spec.steps[i].settings)


def set_control(pg, name: str, value) -> None:
    """Move a control's widget as a reader does (Bokeh's model changes, its callback hands it to the script)."""
    spec = export.CONTROL_SPECS[name]
    if name in export.CHOICES:
        attr, new = "active", list(ExplorableState.param[name].objects).index(value)
    elif name in export.BOOLS:
        attr, new = "active", bool(value)
    else:
        attr, new = "value", spec.to_slider(float(value))
    pg.evaluate("""([name, attr, x]) => {
        const C = window.CB_STATIC_CONFIG, m = Bokeh.documents[0].get_model_by_id(C.ids['ctl.' + name]);
        m[attr] = x;
        if (attr === 'value') m.value_throttled = x;
    }""", [name, attr, new])


@pytest.mark.parametrize("spec", HELD, ids=[s.key for s in HELD])
def test_every_step_of_every_guide_shows_the_served_apps_readouts(page, spec):
    for i, step in enumerate(spec.steps):
        tab_and_step(page, spec, i)
        sync_api.expect(page.locator(f".{spec.css}-text").first).to_have_attribute("data-step", str(i + 1))
        want, got = served(step.settings), shown(page)
        assert got == {k: list(v) for k, v in want.items()}, (spec.label, step.title)
        if i:  # each figure's change against the step before, as the served app says it
            assert shown_changes(page) == served_changes(spec.steps[i - 1].settings, step.settings), step.title
        # The traffic views show exactly where the served page shows them.
        arriving = step.settings.get("arrival") == "rate"
        assert page.locator(".traffic-curve").first.is_visible() == arriving, step.title
    ARTIFACTS.mkdir(exist_ok=True)
    full_page_screenshot(page, str(ARTIFACTS / f"static-{spec.key}-last-step-1280.png"))


@pytest.mark.parametrize("spec", [s for s in HELD if s.tries], ids=[s.key for s in HELD if s.tries])
def test_each_control_a_step_names_at_each_of_its_stops_gives_the_served_outcome(page, spec):
    stops = export.neighbourhood_stops(export.parse_stops(STATIC_GRID), spec)
    moves = 0
    for i, step in enumerate(spec.steps):
        base = {**ExplorableState.__new__(ExplorableState).defaults(), **step.settings}
        for name in spec.tries:
            for value in stops[name]:
                if export.url_text(name, value) == export.url_text(name, base[name]):
                    continue
                tab_and_step(page, spec, i)
                set_control(page, name, value)
                settings = {**step.settings, name: value}
                wait_for(page, settings)
                want = served(settings)
                error = page.locator('[data-notice="run-error"]')
                if want is None:  # the served app says why and keeps the step's figures on screen, greyed
                    sync_api.expect(error).to_be_visible()
                    state = ExplorableState(**step.settings)
                    state.param.update(**{name: value})
                    sync_api.expect(error).to_contain_text(state.run_error[:60])
                    want = served(step.settings)
                    sync_api.expect(page.locator(".run-readouts .readouts.stale")).to_have_count(1)
                else:
                    sync_api.expect(error).to_be_hidden()
                    assert shown_changes(page) == served_changes(step.settings, settings), (step.title, name, value)
                assert shown(page) == {k: list(v) for k, v in want.items()}, (step.title, name, value)
                moves += 1
    assert moves >= 3 * len(spec.steps)


def test_the_slo_targets_move_goodput_live_at_any_value_as_the_served_app_computes_it(page):
    spec = next(s for s in GUIDES if s.needs == "traffic")
    settings = spec.steps[1].settings  # past the knee: some requests miss, some meet
    tab_and_step(page, spec, 1)
    goodputs = set()
    for ttft, tpot in ((1000.0, 50.0), (250.0, 20.0), (1730.0, 27.0), (5000.0, 100.0), (60.0, 13.0)):
        set_control(page, "slo_ttft_ms", ttft)
        set_control(page, "slo_tpot_ms", tpot)
        page.wait_for_function("([t, p]) => { const s = window.cbStatic.slo(); return s.slo_ttft_ms === t && "
                               "s.slo_tpot_ms === p; }", arg=[ttft, tpot])
        want = served(settings, {"slo_ttft_ms": ttft, "slo_tpot_ms": tpot})
        assert shown(page) == {k: list(v) for k, v in want.items()}, (ttft, tpot)
        goodputs.add(want["goodput_req_s"][1])
        # The target lines and the address follow the sliders.
        spans = page.evaluate("""() => { const C = window.CB_STATIC_CONFIG, d = Bokeh.documents[0];
            return [d.get_model_by_id(C.ids['traffic.ttft_slo']).location,
                    d.get_model_by_id(C.ids['traffic.tpot_slo']).location]; }""")
        assert spans == [ttft, tpot]
        query = dict(re.findall(r"([^?&=]+)=([^&]*)", page.evaluate("location.search")))
        assert float(query["slo_ttft_ms"]) == ttft and float(query["slo_tpot_ms"]) == tpot
    assert len(goodputs) >= 3  # the targets were chosen to change it
    set_control(page, "slo_ttft_ms", 1000.0)
    set_control(page, "slo_tpot_ms", 50.0)


def test_a_served_link_to_a_held_state_opens_it_and_an_unheld_one_the_nearest_with_a_notice(static_site, browser):
    context, pg, _ = served_app.new_page(browser, 1280)
    refused = refuse_other_hosts(pg)
    try:
        # The served app's own links (its URL keys and texts) to a traffic and a prefix-caching step's neighbour.
        for settings in ({"arrival": "rate", "request_rate": 10.0, "max_num_seqs": 16, "burstiness": 0.5},
                         {"enable_prefix_caching": True, "system_prompt_len": 1024, "turns": 1},
                         {"enable_prefix_caching": True, "pool_gib": 2.0, "max_num_seqs": 512}):
            state = ExplorableState(**settings, slo_ttft_ms=500.0)
            link = "?" + "&".join(f"{k}={v}" for k, v in query_values(state).items())
            pg.goto(static_site + link)
            pg.evaluate("window.cbStatic.ready")
            wait_for(pg, settings)
            assert pg.locator('[data-notice="link"]').count() == 0 or not pg.locator(".notices").first.is_visible()
            assert shown(pg) == {k: list(v) for k, v in served(settings, {"slo_ttft_ms": 500.0}).items()}
        # Not held: a rate of 7/s (the page holds 4, 8, 10 and 16 at this step) opens 8, and says so.
        pg.goto(static_site + "?arrival=rate&request_rate=7.0")
        pg.evaluate("window.cbStatic.ready")
        notice = pg.locator('[data-notice="link"]')
        sync_api.expect(notice).to_contain_text("request rate (req/s) 7 is not held here: showing 8")
        wait_for(pg, {"arrival": "rate", "request_rate": 8.0})
        assert shown(pg) == {k: list(v) for k, v in served({"arrival": "rate", "request_rate": 8.0}).items()}
        # Two controls off every step's neighbourhood: the nearest held state, each changed control named.
        pg.goto(static_site + "?arrival=rate&request_rate=16.0&burstiness=0.5&max_num_batched_tokens=1024")
        pg.evaluate("window.cbStatic.ready")
        text = notice.inner_text()
        now = pg.evaluate("window.cbStatic.values()")
        changed = [n for n, v in {"burstiness": "0.5", "max_num_batched_tokens": "1024"}.items() if now[n] != v]
        assert len(changed) == 1 and f"({changed[0]})" in text and now["request_rate"] == "16.0", (text, now)
    finally:
        context.close()
    assert refused == []


def test_a_moved_control_off_the_held_states_goes_to_the_nearest_keeping_the_move(page):
    spec = next(s for s in GUIDES if s.needs == "traffic")
    tab_and_step(page, spec, 1)  # 16/s
    set_control(page, "burstiness", 0.5)
    wait_for(page, {"arrival": "rate", "request_rate": 16.0, "burstiness": 0.5})
    # --max-num-seqs 64 at 16/s with burstiness 0.5 is two changes from every step: the rate's own neighbourhood
    # (burstiness back to 1) keeps the reader's 64.
    set_control(page, "max_num_seqs", 64)
    wait_for(page, {"arrival": "rate", "request_rate": 16.0, "max_num_seqs": 64})
    sync_api.expect(page.locator('[data-notice="link"]')).to_contain_text(
        "burstiness 0.5 is not held here with --max-num-seqs 64: showing 1 (burstiness).")
    assert shown(page) == {k: list(v) for k, v in served({"arrival": "rate", "request_rate": 16.0,
                                                              "max_num_seqs": 64}).items()}
    page.locator(".notices button").first.click()
