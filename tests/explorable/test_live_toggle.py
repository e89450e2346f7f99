"""The live-GPU hook against a stand-in executor: results land in the state, failures are reported, runs cancel."""
from __future__ import annotations

import dataclasses
import threading
import time
import types

import pytest

from engine import simulate
from explorable.live import LivePanel
from explorable.state import ExplorableState


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
