"""The views without a browser: a slider release changes the state, and every view's data follows the engine."""
from __future__ import annotations

import re
import sys

import numpy as np
import panel as pn
import param
import pytest
import pyviz_comms
from bokeh.document import Document

from engine import RunConfig, simulate
from engine.logs import periodic_log_line, startup_log_line
from explorable.state import runs
from explorable.views.curves import SEQ_SWEEP, sweep
from explorable.views.guide import STEPS, matching_step, step_settings
from explorable.page.layout import build_app
from explorable.views.lanes import lane_segments
from explorable.views.live import GpuQueue, live_status
from explorable.views.logs_view import log_lines
from explorable.views.readouts import readouts
from explorable.state.store import ExplorableState
from explorable.state.time_grid import time_quantum


@pytest.fixture
def app():
    page = build_app(sync=False)
    pn.panel(page).get_root(Document(), pyviz_comms.Comm())  # build every Bokeh model, as a served page would
    return page


def release(widget, value):
    """What the browser sends when a slider is let go: a value_throttled change (a constant parameter)."""
    with param.edit_constant(widget):
        widget.value_throttled = value


def readout_values(page) -> dict[str, float]:
    html = page.views["readouts"].pane.object
    return {k: float(v) for k, v in re.findall(r'data-readout="(\w+)".*?data-value="([^"]+)"', html)}


def test_the_page_opens_with_the_default_readouts(app):
    values = readout_values(app)
    summary = simulate(RunConfig()).summary()
    assert values["peak_batch"] == summary["peak_batch"]
    assert 80 <= values["peak_batch"] <= 89
    assert values["throughput_tok_s"] == pytest.approx(summary["throughput_tok_s"], rel=1e-5)
    assert values["preemptions"] == summary["preemptions"] > 0


def test_dragging_the_slider_only_runs_on_release(app):
    slider = app.views["controls"].max_num_seqs
    slider.value = 64  # mid-drag
    assert app.state.max_num_seqs == 256
    release(slider, 64)
    assert app.state.max_num_seqs == 64


def test_releasing_max_num_seqs_at_64_updates_every_view(app):
    lanes, strips = app.views["lanes"], app.views["strips"]
    before = readout_values(app)
    release(app.views["controls"].max_num_seqs, 64)
    after = readout_values(app)
    expected = simulate(RunConfig(max_num_seqs=64))
    assert after["throughput_tok_s"] > before["throughput_tok_s"]
    assert after["preemptions"] == 0 and after["peak_batch"] == 64
    html = app.views["readouts"].pane.object
    assert "+60 tok/s" in html or re.search(r'readout-delta better">\+[\d,]+ tok/s', html)
    # Lanes: the engine's segments, all teal or grey, and the time axis spans the new run.
    assert np.array_equal(lanes.source.data["state"], lane_segments(expected)["state"])
    assert lanes.x_range.end == pytest.approx(expected.makespan_s)
    assert len(lanes.marks.data["y"]) == 0
    # Strips: the cap line moved to 64 and is in view; the batch never exceeds it.
    assert strips.cap.location == 64 and strips.cap.visible
    assert strips.batch_source.data["y"].max() == 64
    # Curves: the marker sits on the new setting.
    assert app.views["curves"].by_seqs.point.data["x"] == [64.0]
    assert app.views["curves"].by_seqs.point.data["y"][0] == pytest.approx(expected.summary()["throughput_tok_s"])
    # Log: no "Preemptions" field once nothing is evicted.
    assert "Preemptions:" not in app.views["logs"].pane.object


def test_chart_data_is_replaced_not_rebuilt(app):
    lanes = app.views["lanes"]
    figure, source = lanes.figure, lanes.source
    app.state.pool_gib = 2.0
    assert lanes.figure is figure and lanes.source is source
    assert len(lanes.marks.data["y"]) > 0


def test_the_cap_line_leaves_the_strip_when_it_would_flatten_the_batch(app):
    strips = app.views["strips"]
    assert not strips.cap.visible  # 256 against a peak in the 80s
    assert "far above" in strips.cap_label.text
    app.state.max_num_seqs = 128
    assert strips.cap.visible


def test_strips_keep_peaks_when_a_long_run_is_reduced():
    from explorable.views.strips import MAX_POINTS, step_series

    trace = simulate(RunConfig(max_num_seqs=1))  # 65,536 passes
    series = step_series(trace.pass_start, trace.pass_end, trace.n_seqs)
    assert len(series["x"]) <= MAX_POINTS + 1
    assert series["y"].max() == trace.n_seqs.max()
    assert series["x"][-1] == pytest.approx(trace.makespan_s, abs=time_quantum(trace.makespan_s))


def step_line(x: np.ndarray, y: np.ndarray, at: np.ndarray) -> np.ndarray:
    """What a step line in Bokeh's 'after' mode draws at times `at`: the value of the last point at or before."""
    return y[np.searchsorted(x, at, side="right") - 1]


def test_strips_leave_out_only_steps_that_draw_nothing_and_keep_a_pixel_grid():
    from explorable.views.strips import KV_QUANTUM, step_series
    from explorable.state.time_grid import snap

    trace = simulate(RunConfig(pool_gib=2.0, max_num_seqs=512))  # the memory wall: a full cache for long stretches
    quantum = time_quantum(trace.makespan_s)
    assert trace.makespan_s / quantum >= 2**16 and np.log2(quantum) == int(np.log2(quantum))
    for values, y_quantum in ((trace.n_seqs, None), (trace.kv_usage, KV_QUANTUM)):
        series = step_series(trace.pass_start, trace.pass_end, values, y_quantum=y_quantum)
        full = step_series(trace.pass_start, trace.pass_end, values, max_points=10**9, y_quantum=y_quantum)
        x, y = series["x"].astype(np.float64), series["y"].astype(np.float64)
        assert np.all(x / quantum == np.round(x / quantum))  # every time on the grid, exactly
        assert np.all(y[1:-1] != y[:-2])  # no step repeats the value before it ...
        # ... and every pass's value is drawn within half a step of the grid: nothing else changed.
        starts = trace.pass_start.astype(np.float64)
        expect = snap(values, y_quantum) if y_quantum else values
        drawn = step_line(full["x"].astype(np.float64), full["y"].astype(np.float64), snap(starts, quantum))
        assert np.abs(drawn - expect).max() <= (y_quantum or 0) / 2 + 1e-6
        assert len(x) < len(full["x"]) and len(full["x"]) < trace.num_passes + 1


def test_curves_are_the_engines_throughput_for_each_value():
    cfg = RunConfig(pool_gib=8.0)
    data = sweep(cfg, "max_num_seqs", SEQ_SWEEP)
    i = int(np.flatnonzero(data["x"] == 64)[0])
    assert data["y"][i] == pytest.approx(simulate(cfg.replace(max_num_seqs=64)).summary()["throughput_tok_s"])
    # Past the memory wall the cap is inert: the curve is flat there.
    assert data["y"][data["x"] == 512][0] == data["y"][data["x"] == 1024][0]


def test_a_curve_point_that_cannot_run_is_a_gap_not_an_error():
    cfg = RunConfig(allocation="reserve", declared_multiple=8.0, pool_gib=16.0)
    data = sweep(cfg, "pool_gib", (1.0, 16.0))
    assert np.isnan(data["y"][0]) and np.isfinite(data["y"][1])


def test_readouts_say_which_way_is_better():
    default = simulate(RunConfig()).summary()
    cap64 = simulate(RunConfig(max_num_seqs=64)).summary()
    rows = {r.key: r for r in readouts(cap64, default, RunConfig(max_num_seqs=64))}
    assert rows["throughput_tok_s"].verdict == "better" and rows["throughput_tok_s"].delta.startswith("+")
    assert rows["preemptions"].verdict == "better" and rows["preemptions"].delta == f"\u2212{default['preemptions']}"
    assert rows["peak_batch"].beside == "of 64 slots"
    assert rows["recomputed_prompt_tokens"].beside.startswith("0.0% of 350,309")
    same = {r.key: r for r in readouts(default, default, RunConfig())}
    assert same["throughput_tok_s"].delta == "no change"
    first = {r.key: r for r in readouts(default, None, RunConfig())}
    assert first["throughput_tok_s"].delta == ""


def test_an_impossible_setting_greys_the_readouts_and_explains(app):
    app.state.param.update(allocation="reserve", declared_multiple=8.0, pool_gib=1.0)
    assert "stale" in app.views["readouts"].pane.object
    assert app.views["readouts"].error.visible
    assert "pool_gib must be at least" in app.views["readouts"].error.object
    app.state.pool_gib = 16.0
    assert not app.views["readouts"].error.visible


def test_log_lines_are_the_engines_lines():
    trace = simulate(RunConfig())
    lines = log_lines(trace)
    assert lines[0] == (None, startup_log_line(trace.config))
    assert lines[1] == (10.0, periodic_log_line(trace, 10.0))
    assert lines[-1][0] == pytest.approx(trace.makespan_s)
    assert any("Preemptions:" in line for _, line in lines)


def test_every_guided_step_runs_and_the_steps_tell_the_articles_story():
    by_title = {}
    s = ExplorableState()
    for i, step in enumerate(STEPS):
        s.param.update(**step_settings(s, i))
        assert s.run_error == "", step.title
        assert matching_step(s) == i
        by_title[step.title] = s.summary
    assert by_title["Cap at 64"]["throughput_tok_s"] > by_title["As shipped"]["throughput_tok_s"]
    assert by_title["Cap at 64"]["preemptions"] == 0
    assert by_title["Static batching"]["throughput_tok_s"] < 0.6 * by_title["Cap at 64"]["throughput_tok_s"]
    assert by_title["Reserve up front"]["preemptions"] == 0
    assert by_title["Memory wall"]["preemptions"] > 0


def test_choosing_a_step_sets_every_control(app):
    guide = app.views["guide"]
    app.state.spread = 4.0
    guide.step_buttons.value = 6  # what Panel sets when the reader clicks "7. Memory wall"
    assert (app.state.pool_gib, app.state.max_num_seqs, app.state.spread) == (2.0, 512, 16.0)
    assert guide.step_buttons.value == 6  # lit
    assert 'data-step="7"' in guide.text.object
    guide.prev.clicks += 1
    assert guide.chosen == 5 and app.state.spread == 1.0 and guide.step_buttons.value == 5
    app.state.spread = 4.0  # the reader moves a control away from the step: no step is lit ...
    assert guide.step_buttons.value is None and guide.chosen == 5
    guide.step_buttons.value = 5  # ... so choosing the step shown again is a click that puts it back
    assert app.state.spread == 1.0 and guide.step_buttons.value == 5


def test_the_guides_ends_are_greyed_by_style_not_disabled(app):
    """At the first step "previous" (at the last, "next") is greyed and takes no pointer: a style, because a
    `disabled` change makes BokehJS rebuild the button and lay out the whole page again."""
    from explorable.views.assets import END_OF_WALK_STYLES

    guide = app.views["guide"]
    ends = lambda: (guide.prev.styles == END_OF_WALK_STYLES, guide.next.styles == END_OF_WALK_STYLES)  # noqa: E731
    assert ends() == (True, False)
    guide.go(3)
    assert ends() == (False, False)
    guide.go(len(guide.steps) - 1)
    assert ends() == (False, True)
    assert not guide.prev.disabled and not guide.next.disabled
    app.state.pool_gib = 32.0  # the reader moves a control, then presses the greyed button with the keyboard
    guide.next.clicks += 1
    assert guide.chosen == len(guide.steps) - 1 and app.state.pool_gib == 32.0
    guide.go(0)
    app.state.spread = 4.0
    guide.prev.clicks += 1
    assert guide.chosen == 0 and app.state.spread == 4.0


def test_stop_buttons_set_the_value(app):
    stops = app.views["controls"]
    panel_obj = pn.panel(stops)
    group = next(w for w in panel_obj.select(pn.widgets.RadioButtonGroup) if "stop-pool_gib" in w.css_classes)
    group.value = group.options["2 GiB"]  # what Panel sets when the reader clicks "2 GiB"
    assert app.state.pool_gib == 2 and group.value == 2


def test_reset_button(app):
    app.state.param.update(max_num_seqs=8, unit="request")
    app.views["controls"].reset.clicks += 1
    assert app.state.control_values() == app.state.defaults()


def test_live_toggle_is_disabled_with_a_reason_when_no_gpu(app, monkeypatch):
    import html

    live = app.views["live"]
    ok, reason = live_status()
    assert live.toggle.disabled == (not ok) and live.__panel__().visible == ok  # hidden where there is no GPU
    if not ok:
        assert reason and html.escape(reason) in live.reason.object


def test_a_broken_live_module_leaves_the_app_working(monkeypatch):
    monkeypatch.setitem(sys.modules, "engine.live.executor", None)  # import raises ImportError
    ok, reason = live_status()
    assert not ok and "not installed" in reason
    page = build_app(sync=False)
    assert page.views["live"].toggle.disabled


def test_the_gpu_queue_runs_one_at_a_time_and_reports_position():
    import threading

    queue = GpuQueue()
    order, positions = [], []
    first_in = threading.Event()
    release_first = threading.Event()

    def first():
        with queue.turn(threading.Event(), lambda n: None):
            first_in.set()
            release_first.wait(5)
            order.append("first")

    def second():
        with queue.turn(threading.Event(), positions.append):
            order.append("second")

    t1 = threading.Thread(target=first)
    t1.start()
    first_in.wait(5)
    t2 = threading.Thread(target=second)
    t2.start()
    for _ in range(100):
        if positions:
            break
        threading.Event().wait(0.01)
    assert positions[:1] == [1]  # one run ahead
    release_first.set()
    t1.join(5)
    t2.join(5)
    assert order == ["first", "second"] and positions[-1] == 0 and len(queue) == 0


def test_runs_are_cached_across_sessions():
    runs.run.cache_clear()
    a = runs.run(RunConfig(max_num_seqs=64))
    b = runs.run(RunConfig(max_num_seqs=64))
    assert a is b


def test_the_pool_curve_moves_a_pool_sized_by_utilization_by_hand_through_the_same_point():
    from engine import RunConfig, simulate
    from explorable.views.curves import curve_base

    cfg = RunConfig(gpu_memory_utilization=0.26, max_num_seqs=512, kv_cache_dtype="fp8", tensor_parallel_size=2)
    base = curve_base(cfg, "pool_gib")
    assert base.pool_source == "pool_gib" and base.num_gpu_blocks == cfg.num_gpu_blocks
    assert simulate(base).summary()["throughput_tok_s"] == simulate(cfg).summary()["throughput_tok_s"]
    assert curve_base(cfg, "max_num_seqs") is cfg


def test_a_flag_in_a_guide_s_text_is_kept_whole_and_only_flags_are():
    from explorable.views.assets import keep_flags_whole
    assert keep_flags_whole("at the wall --max-num-seqs is not; --kv-cache-dtype fp8") == (
        'at the wall <span class="flag">--max-num-seqs</span> is not; <span class="flag">--kv-cache-dtype</span> fp8')
    assert keep_flags_whole("a -- b, x--y, 0.9-0.95") == "a -- b, x--y, 0.9-0.95"
