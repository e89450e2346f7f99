"""The live-GPU hook against a stand-in executor: results land in the state, failures are reported, runs cancel."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace
import threading
import time
import types

import pytest

from engine import simulate
from explorable.views.live import LivePanel
from explorable.state.store import ExplorableState


def fake_executor(run_live):
    module = types.ModuleType("engine.live.executor")
    module.live_available = lambda: (True, "Fake GPU")
    module.run_live = run_live
    return module


@pytest.fixture
def with_executor(monkeypatch):
    def install(run_live):
        monkeypatch.setitem(__import__("sys").modules, "engine.live.executor", fake_executor(run_live))
    return install


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def measured_run(cfg, progress=None, cancel=None, **_):
    trace = simulate(cfg)
    for i in range(3):
        progress(i, i + 1, 3)
    return dataclasses.replace(trace, pass_duration=trace.pass_duration * 1.1, measured=True)


def test_a_measurement_of_a_setting_the_reader_has_since_left_is_not_published(with_executor):
    state = ExplorableState(max_num_seqs=64)

    def reader_moves_a_control_meanwhile(cfg, progress=None, cancel=None, **_):
        trace = measured_run(cfg, progress=progress)
        state.max_num_seqs = 32  # while the GPU ran
        return trace

    with_executor(reader_moves_a_control_meanwhile)
    live = LivePanel(state=state)
    live.toggle.value = True
    live.run_button.clicks += 1
    assert wait_until(lambda: not live.cancel_button.visible)
    assert not state.trace.measured and state.config.max_num_seqs == 32
    assert "controls changed while the GPU ran" in live.status.object and not live.run_button.disabled


def test_a_measured_run_replaces_the_simulated_one_and_is_compared_with_it(with_executor):
    with_executor(measured_run)
    state = ExplorableState(max_num_seqs=64)
    simulated = state.summary
    live = LivePanel(state=state)
    assert not live.toggle.disabled
    live.toggle.value = True
    assert live.run_button.visible
    live.run_button.clicks += 1
    assert wait_until(lambda: state.trace.measured)
    assert wait_until(lambda: not live.cancel_button.visible)
    assert state.previous_summary == simulated  # deltas read "measured minus predicted"
    assert state.summary["throughput_tok_s"] == pytest.approx(simulated["throughput_tok_s"] / 1.1)
    assert "Measured" in live.status.object and not live.run_button.disabled
    state.max_num_seqs = 32  # touching a control goes back to the simulation
    assert not state.trace.measured


def test_a_failed_gpu_run_is_reported_not_fatal(with_executor):
    def out_of_memory(cfg, **_):
        raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")

    with_executor(out_of_memory)
    state = ExplorableState()
    before = state.trace
    live = LivePanel(state=state)
    live.toggle.value = True
    live.run_button.clicks += 1
    assert wait_until(lambda: "failed" in live.status.object)
    assert "out of memory" in live.status.object
    assert state.trace is before and not live.run_button.disabled


def test_a_run_can_be_cancelled(with_executor):
    started = threading.Event()

    def slow(cfg, progress=None, cancel=None, **_):
        started.set()
        assert cancel.wait(5)
        raise type("LiveCancelled", (Exception,), {})("cancelled")

    with_executor(slow)
    state = ExplorableState()
    live = LivePanel(state=state)
    live.toggle.value = True
    live.run_button.clicks += 1
    assert started.wait(5)
    live.cancel_button.clicks += 1
    assert wait_until(lambda: "Cancelled" in live.status.object)
    assert not state.trace.measured


def test_a_second_page_waits_its_turn_with_its_queue_position(with_executor):
    # One GPU for the whole server: page B queues behind page A, sees its position, then runs.
    release = threading.Event()
    started = []

    def run(cfg, progress=None, cancel=None, **_):
        started.append(cfg.max_num_seqs)
        if len(started) == 1:
            assert release.wait(5)
        return measured_run(cfg, progress=progress)

    with_executor(run)
    pages = []
    for seqs in (64, 32):
        state = ExplorableState(max_num_seqs=seqs)
        live = LivePanel(state=state)
        live.toggle.value = True
        pages.append((state, live))
    pages[0][1].run_button.clicks += 1
    assert wait_until(lambda: started == [64])
    pages[1][1].run_button.clicks += 1
    assert wait_until(lambda: "1 run(s) ahead" in pages[1][1].status.object)
    assert started == [64] and not pages[1][0].trace.measured
    release.set()
    assert wait_until(lambda: pages[0][0].trace.measured and pages[1][0].trace.measured)
    assert started == [64, 32]
    assert pages[1][0].trace.config.max_num_seqs == 32


def test_a_full_queue_refuses_politely_and_starts_nothing(with_executor, monkeypatch):
    from explorable.views import live as live_module

    release = threading.Event()
    calls = []

    def run(cfg, progress=None, cancel=None, **_):
        calls.append(cfg)
        assert release.wait(5)
        return measured_run(cfg, progress=progress)

    with_executor(run)
    monkeypatch.setattr(live_module, "MAX_QUEUED_RUNS", 1)
    first, second = LivePanel(state=ExplorableState()), LivePanel(state=ExplorableState())
    for page in (first, second):
        page.toggle.value = True
    first.run_button.clicks += 1
    assert wait_until(lambda: len(calls) == 1)
    second.run_button.clicks += 1
    assert "queue is full" in second.status.object and not second.run_button.disabled
    release.set()
    assert wait_until(lambda: not first.cancel_button.visible)
    assert len(calls) == 1


def test_the_note_says_which_weights_the_gpu_runs(with_executor, monkeypatch):
    with_executor(measured_run)
    live = LivePanel(state=ExplorableState())
    monkeypatch.delenv("CB_LIVE_WEIGHTS_DIR", raising=False)
    live.toggle.value = True
    assert "Random weights" in live.status.object
    live.toggle.value = False
    monkeypatch.setenv("CB_LIVE_WEIGHTS_DIR", "/srv/models/Qwen3-8B")
    live.toggle.value = True
    assert "checkpoint" in live.status.object and "Random" not in live.status.object
    assert "/srv" not in live.status.object  # the server's paths are not shown to students


def test_a_measured_run_names_its_device_and_the_prediction_it_is_set_against(with_executor):
    from explorable.views.lanes import LaneChart
    from explorable.views.logs_view import LogView
    from explorable.views.readouts import Readouts

    def on_device(cfg, progress=None, cancel=None, **_):
        trace = measured_run(cfg, progress=progress)
        live = SimpleNamespace(device="NVIDIA H100 80GB HBM3", model_preset="Qwen3-8B", dtype="bf16")
        return dataclasses.replace(trace, live=live)

    with_executor(on_device)
    state = ExplorableState(max_num_seqs=64)
    predicted = state.summary["throughput_tok_s"]
    views = Readouts(state=state), LaneChart(state=state), LogView(state=state)
    live = LivePanel(state=state)
    live.toggle.value = True
    live.run_button.clicks += 1
    # Without a document the worker thread updates the views itself: its end, not the trace, says they are done.
    live.worker.join(timeout=10)
    assert not live.worker.is_alive() and state.trace.measured
    readouts, lanes, logs = views
    assert f"simulated {predicted:,.0f}" in readouts.pane.object
    assert "measured on NVIDIA H100 80GB HBM3 (Qwen3-8B shapes, bf16)" in lanes.caption.object
    assert "on NVIDIA H100 80GB HBM3 (Qwen3-8B shapes, bf16), measured" in logs.pane.object


def test_without_a_cuda_device_the_control_is_hidden_and_a_crafted_click_starts_nothing(monkeypatch):
    calls = []
    module = fake_executor(lambda cfg, **_: calls.append(cfg))
    module.live_available = lambda: (False, "torch sees no CUDA device")
    monkeypatch.setitem(__import__("sys").modules, "engine.live.executor", module)
    live = LivePanel(state=ExplorableState())
    assert not live.__panel__().visible and live.toggle.disabled
    assert "no CUDA device" in live.reason.object
    live.toggle.value = True  # a crafted websocket message can still set it
    live.run_button.clicks += 1
    assert live.worker is None and calls == []


def test_with_a_cuda_device_the_control_is_shown(with_executor):
    with_executor(measured_run)
    assert LivePanel(state=ExplorableState()).__panel__().visible
