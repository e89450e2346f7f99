"""Each chart's text alternative (explorable.views.in_words) says what the chart shows, with the readouts' own
numbers, and changes with the state; the results bar repeats the readouts' figures; one guide is shown at a time,
whatever the number of guides.
"""
from __future__ import annotations

import re

import panel as pn
import pytest
from bokeh.document import Document
from pyviz_comms import Comm

from explorable.page.layout import ExplorableApp, group_names
from explorable.state.store import CONTROLS, ExplorableState
from explorable.views.guide import GUIDES, STEPS, Guide, GuideSpec, Step
from explorable.views.guide_tabs import GuideTabs
from explorable.views.in_words import curve_in_words
from explorable.views.readouts import readouts


def page(**settings) -> ExplorableApp:
    app = ExplorableApp(state=ExplorableState(**settings))
    pn.panel(app).get_root(Document(), Comm())
    return app


def words(app: ExplorableApp, view: str) -> str:
    text = app.views[view].words.object
    assert f'data-words="{view.replace("traffic_curve", "traffic")}"' in text
    return re.sub(r"<[^>]+>", "", text)


def shown(app: ExplorableApp) -> dict[str, str]:
    """The readouts' numbers as the cards show them."""
    s = app.state
    return {r.key: r.text for r in readouts(s.summary, None, s.config)}


@pytest.fixture(scope="module")
def default_page() -> ExplorableApp:
    return page()


@pytest.fixture(scope="module")
def capped_page() -> ExplorableApp:
    return page(max_num_seqs=64)


def test_the_lanes_in_words_say_when_the_batch_peaked_the_cache_filled_and_who_was_preempted(default_page):
    said, numbers = words(default_page, "lanes"), shown(default_page)
    trace = default_page.state.trace
    assert f"peaked at {numbers['peak_batch']} running requests (of 256 slots)" in said
    assert f"{numbers['preemptions']} preemptions in all" in said
    assert f"{numbers['recomputed_prompt_tokens']} prompt tokens were recomputed" in said
    assert f"{int((trace.preemptions_per_request > 0).sum())} requests were preempted" in said
    assert "The KV cache filled" in said and "amber" in said
    assert f"{trace.makespan_s:,.1f} s" in said


def test_each_charts_words_change_with_the_state_and_carry_its_readouts(default_page, capped_page):
    for view in ("lanes", "strips", "curves"):
        assert words(default_page, view) != words(capped_page, view), view
    capped, numbers = words(capped_page, "lanes"), shown(capped_page)
    assert "No request was preempted" in capped and "never filled" in capped
    assert f"peaked at {numbers['peak_batch']} running requests (of 64 slots)" in capped
    strips = words(capped_page, "strips")
    assert f"largest {numbers['peak_batch']}" in strips and f"{numbers['mean_batch']} on average" in strips
    assert f"held cache holding a token: {numbers['live_cache_fraction']}" in strips
    # The curves: where the reader stands is the throughput readout, and where the peak is.
    for app in (default_page, capped_page):
        curves, numbers = words(app, "curves"), shown(app)
        here = f"where you are, at {app.state.max_num_seqs}: {numbers['throughput_tok_s']} tok/s"
        assert here in curves, curves
        assert f"at {app.state.pool_gib:g} GiB: {numbers['throughput_tok_s']} tok/s" in curves
        assert "highest" in curves


def test_the_request_rate_curves_in_words_follow_the_rate_and_the_targets():
    app = page(arrival="rate", request_rate=4.0)
    app.views["traffic_curve"].refresh()
    said = words(app, "traffic_curve")
    assert "keeps up with the offered rate" in said and "(target 1,000 ms)" in said
    app.state.slo_ttft_ms = 500.0
    assert "(target 500 ms)" in words(app, "traffic_curve")
    app.state.request_rate = 16.0
    app.views["traffic_curve"].refresh()
    assert words(app, "traffic_curve") != said


def test_a_curve_in_words_names_its_peak_and_the_readers_place_on_it():
    data = {"x": [1.0, 2.0, 4.0], "y": [100.0, 300.0, 200.0]}
    said = curve_in_words("--max-num-seqs", "", data, 4.0)
    assert "highest 300 tok/s at 2" in said and "at 4: 200 tok/s, 33% below the highest" in said
    assert "lowest 100 tok/s at 1" in said
    assert "no setting along it can run" in curve_in_words("x", "", {"x": [1.0], "y": [float("nan")]}, 1.0)


def test_the_results_bar_repeats_four_readouts_as_their_cards_show_them(default_page, capped_page):
    for app in (default_page, capped_page):
        bar, numbers = app.views["readouts"].bar.object, shown(app)
        cells = dict(re.findall(r'data-result="(\w+)"><b>([^<]+)', bar))
        assert cells == {k: numbers[k] for k in ("throughput_tok_s", "peak_batch", "preemptions",
                                                 "recomputed_prompt_tokens")}
        assert f"/{app.state.max_num_seqs}" in bar
        assert "data-readout" not in bar  # the cards stay the one place of each figure


def test_one_guide_is_shown_at_a_time_and_the_tabs_take_any_number_of_guides():
    state = ExplorableState()
    extra = GuideSpec("extra_guide", "A fourth", (Step("Only step", "text", {"max_num_seqs": 8}),), "extra-step")
    specs = [*GUIDES, extra]
    tabs = GuideTabs(state=state, guides=[(spec, Guide(state=state, steps=spec.steps, css=spec.css)) for spec in specs])
    assert list(tabs.tabs.options) == [spec.label for spec in specs]
    last = len(specs) - 1
    assert [p.visible for p in tabs.panels] == [True] + [False] * last
    tabs.tabs.value = last
    assert [p.visible for p in tabs.panels] == [False] * last + [True] and tabs.chosen == last
    # A page opened at a guide's step opens at that guide.
    linked = ExplorableState(max_num_seqs=8)
    assert GuideTabs(state=linked, guides=[(s, Guide(state=linked, steps=s.steps, css=s.css)) for s in specs]).chosen == last


def test_the_page_shows_every_guide_under_its_tab_and_names_every_button_group(default_page):
    tabs = default_page.views["guides"]
    assert [spec.label for spec, _ in tabs.guides] == [spec.label for spec in GUIDES]
    assert sum(p.visible for p in tabs.panels) == 1
    names = group_names(list(GUIDES))
    assert all(f"ctl-{n}" in names and f"stop-{n}" in names for n in CONTROLS)
    assert names["step-row"] == "steps: all at once" and names["guide-tabs"] == "guides"
    assert STEPS == GUIDES[0].steps


def test_the_tabs_follow_the_settings_to_the_guide_that_has_them_as_a_step():
    state = ExplorableState()
    specs = list(GUIDES)
    tabs = GuideTabs(state=state, guides=[(s, Guide(state=state, steps=s.steps, css=s.css)) for s in specs])
    prefix = next(i for i, s in enumerate(specs) if s.key == "prefix_guide")
    state.enable_prefix_caching = True  # the prefix guide's first step
    assert tabs.chosen == prefix and tabs.panels[prefix].visible
    tabs.tabs.value = 0  # the reader's choice of tab holds while the settings are no step of the guide shown
    state.enable_prefix_caching = False  # back at the article's first step
    assert tabs.chosen == 0
