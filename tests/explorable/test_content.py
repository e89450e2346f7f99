"""What the page says: steps name what they set, a link is not a move, stops, modes, an oversized pool, the log."""
from __future__ import annotations

import re

import panel as pn
import pytest

from engine.config import largest_pool_gib

from explorable.views import logs_view
from explorable.state.control_specs import CONTROL_SPECS
from explorable.views.controls import Controls
from explorable.views.guide import PREFIX_STEPS, STEPS, TRAFFIC_STEPS, Guide, matching_step
from explorable.page.layout import build_app
from explorable.views.logs_view import LogView, log_lines
from explorable.state.store import CONTROLS, ExplorableState
from explorable.page.url import apply_query


def shown_text(guide: Guide) -> str:
    return re.sub(r"<[^>]+>", "", guide.text.object)


@pytest.mark.parametrize("index", range(len(STEPS)), ids=[s.title for s in STEPS])
def test_each_step_names_every_control_it_changes(index):
    state = ExplorableState()
    guide = Guide(state=state)
    guide.go(index)
    text = shown_text(guide)
    for name in CONTROLS:
        if getattr(state, name) != state.param[name].default:
            assert state.param[name].label in text, (STEPS[index].title, name)


def test_the_static_batching_step_says_it_reserves_up_front():
    step = next(s for s in STEPS if s.title == "Static batching")
    assert step.settings["allocation"] == "reserve" and "reserve" in step.text


def test_a_link_to_a_state_that_is_no_step_has_no_moved_hint():
    state = ExplorableState()
    apply_query(state, {"max_num_seqs": "100", "pool_gib": "12"})
    guide = Guide(state=state)
    assert "moved" not in guide.text.object and "none of the steps" in guide.text.object
    state.max_num_seqs = 101  # moving on from a state that was never a step is not leaving a step either
    assert "moved" not in guide.text.object


def test_a_later_guide_at_the_starting_point_says_nothing_about_links_or_moves():
    # The traffic and prefix-caching guides start away from the starting point: no link was opened, nothing moved.
    state = ExplorableState()
    for steps in (TRAFFIC_STEPS, PREFIX_STEPS):
        guide = Guide(state=state, steps=steps)
        assert matching_step(state, steps) is None
        assert "none of the steps" not in guide.text.object and "moved" not in guide.text.object
        assert "Step 1 of" in guide.text.object
    state.max_num_seqs = 100  # moving the controls from the start is not leaving any of their steps
    assert "none of the steps" not in guide.text.object and "moved" not in guide.text.object


def test_a_link_to_a_step_of_one_guide_gives_the_other_guides_no_link_hint_and_reset_clears_it():
    state = ExplorableState()
    apply_query(state, {"max_num_seqs": "64"})  # the article's step 2
    assert matching_step(state, STEPS) == 1
    later = [Guide(state=state, steps=steps) for steps in (TRAFFIC_STEPS, PREFIX_STEPS)]
    assert all("none of the steps" not in g.text.object for g in later)
    other = ExplorableState()
    apply_query(other, {"max_num_seqs": "100"})  # no step of any guide
    guides = [Guide(state=other, steps=steps) for steps in (STEPS, TRAFFIC_STEPS, PREFIX_STEPS)]
    assert all("none of the steps" in g.text.object for g in guides)
    other.reset()
    assert all("none of the steps" not in g.text.object and "moved" not in g.text.object for g in guides[1:])


def test_moving_away_from_a_step_shows_the_hint():
    state = ExplorableState()
    guide = Guide(state=state)
    guide.go(1)
    assert "moved" not in guide.text.object
    state.max_num_seqs = 100
    assert "moved" in guide.text.object
    state.max_num_seqs = 64  # back on step 2
    assert "moved" not in guide.text.object


def test_declared_max_tokens_has_one_click_stops():
    state = ExplorableState(allocation="reserve")
    controls = pn.panel(Controls(state=state))
    group = next(g for g in controls.select(pn.widgets.RadioButtonGroup) if "stop-declared_multiple" in g.css_classes)
    root = controls.get_root()
    lit = lambda: group._models[root.ref["id"]][0].active  # noqa: E731  (the button the page lights)
    assert list(group.options) == ["1x", "2x", "4x", "8x"] == [f"{v:g}x" for v in CONTROL_SPECS["declared_multiple"].stops]
    group.value = 1.0  # what Panel sets when the reader clicks "1x"
    assert state.declared_multiple == 1.0 and lit() == 0
    group.value = 8.0
    assert state.declared_multiple == 8.0 and lit() == 3
    state.declared_multiple = 3.0  # the slider, between two stops: no stop is lit
    assert group.value is None and lit() is None
    state.declared_multiple = 2.0  # the slider onto a stop lights it
    assert group.value == 2.0 and lit() == 1


def test_each_mode_names_its_production_setting():
    sidebar = " ".join(p.object for p in pn.panel(Controls(state=ExplorableState())).select(pn.pane.HTML))
    for name in ("GUARANTEED_NO_EVICT", "MAX_UTILIZATION", "STATIC_BATCH"):
        assert name in sidebar
    log = LogView(state=ExplorableState(allocation="reserve", unit="request", max_num_seqs=64)).pane.object
    assert "GUARANTEED_NO_EVICT" in log and "STATIC_BATCH" in log


def test_an_oversized_pool_is_run_and_said_in_the_sidebar_and_the_log():
    state = ExplorableState()
    controls, log = Controls(state=state), LogView(state=state)
    assert not controls.pool_warning.visible and "at most about" not in log.pane.object
    state.pool_gib = 64.0
    assert state.run_error == "" and state.trace.config.pool_gib == 64.0
    largest = f"{largest_pool_gib(state.trace.config):.1f} GiB"  # vLLM's default profile (tests/engine/test_pool_fit.py)
    assert controls.pool_warning.visible and largest in controls.pool_warning.object
    assert f"vLLM would size it at most about {largest}" in log.pane.object
    state.gpu = "H200"  # 64 GiB fits beside the weights there
    assert not controls.pool_warning.visible and "at most about" not in log.pane.object


def test_every_serve_flag_in_the_log_view_has_its_comment():
    state = ExplorableState(pool_gib=2.0, max_num_seqs=512)
    text = LogView(state=state).pane.object
    command = re.search(r'<div class="cmd">([^<]*)</div>', text).group(1)
    for flag in re.findall(r"--[a-z-]+", command):
        assert f"# {flag} " in text, flag


def test_a_long_logs_hidden_lines_still_count_their_preemptions(monkeypatch):
    monkeypatch.setattr(logs_view, "MAX_PERIODIC_LINES", 4)
    state = ExplorableState(pool_gib=2.0, max_num_seqs=512)  # seven stats lines: two hidden
    lines = log_lines(state.trace)
    assert sum(1 for at, _ in lines if at is not None) == 5 and any(line.startswith("# 3 lines") for _, line in lines)
    logged = sum(int(n) for _, line in lines for n in re.findall(r"Preemptions: (\d+)", line))
    assert logged == state.summary["preemptions"]


def test_the_page_builds_with_every_change():
    page = build_app(ExplorableState(pool_gib=64.0, allocation="reserve", declared_multiple=2.0), sync=False)
    assert page.views["controls"].pool_warning.visible


def test_the_gpu_memory_widgets_follow_a_step_without_writing_back():
    from explorable.views.guide import MEMORY_STEPS, step_settings

    state = ExplorableState()
    controls = Controls(state=state)
    switch, slider = controls.utilization.switch, controls.utilization.slider
    state.param.update(**step_settings(state, 1, MEMORY_STEPS))  # as a guided step sets every control at once
    assert state.gpu_memory_utilization == 0.23 and slider.value == 0.23 and switch.value == "set"
    assert "GPU KV cache size: 12,832 tokens" in controls.cache_line.pane.object
    assert controls.pool_note.visible
    switch.value = "unset"  # the reader picks the GiB slider
    assert state.gpu_memory_utilization is None and state.trace.config.pool_source == "pool_gib"
    assert not controls.pool_note.visible
    switch.value = "set"  # and back: the slider's last value
    assert state.gpu_memory_utilization == 0.23


def test_a_page_without_the_memory_guide_names_it_where_it_would_be():
    from explorable.page.layout import ExplorableApp
    from explorable.views.guide import GUIDES

    def said(app) -> list[str]:
        return [p.object for p in pn.panel(app).select(pn.pane.HTML) if "data-absent=" in str(p.object)]

    memory = next(spec for spec in GUIDES if spec.key == "memory_guide")
    served = ExplorableApp(state=ExplorableState())
    assert memory in served.guide_specs() and said(served) == []
    static = ExplorableApp(state=ExplorableState(), traffic=False, prefix=False, memory=False)  # as the static build
    assert memory not in static.guide_specs() and "memory_guide" not in static.views
    assert said(static) == [f'<p class="guide-absent muted" data-absent="memory_guide">{memory.absent}</p>']


def test_a_page_without_your_workload_says_in_its_place_that_it_needs_the_served_explorable():
    from explorable.page.layout import ExplorableApp

    texts = lambda app: " ".join(str(p.object) for p in pn.panel(app).select(pn.pane.HTML))  # noqa: E731
    static = ExplorableApp(state=ExplorableState(), traffic=False, prefix=False, workload=False, memory=False)
    assert "Your workload, your server" in texts(static) and "need the served explorable" in texts(static)
    assert "your_workload" not in static.views
    assert "need the served explorable" not in texts(ExplorableApp(state=ExplorableState()))


def test_the_footer_names_both_versions_and_the_static_page_s_names_only_the_synchronous_one():
    from explorable.page.layout import ExplorableApp

    def footer(app) -> str:
        return next(str(p.object) for p in pn.panel(app).select(pn.pane.HTML) if "<footer>" in str(p.object))
    served = footer(ExplorableApp(state=ExplorableState()))
    assert "vLLM 0.11 (synchronous" in served and "vLLM 0.34's defaults" in served
    static = footer(ExplorableApp(state=ExplorableState(), traffic=False, prefix=False, workload=False, memory=False))
    assert "vLLM 0.11 (synchronous" in static and "0.34" not in static and "only one this static page holds" in static
