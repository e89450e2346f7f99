"""The curves' simulations run off the event loop (explorable.state.background): the latest request per page wins,
the result is handed to the page's own thread, and its simulation time is charged to the page then."""
from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest
from bokeh.document import Document
from panel.io.state import set_curdoc

from explorable.state import background, runs
from explorable.views.curves import Curves
from explorable.state.store import ExplorableState


def wait_idle(timeout: float = 60.0) -> None:
    """Until every job submitted so far has finished."""
    deadline = time.monotonic() + timeout
    while background.counters["done"] + background.counters["replaced"] < background.counters["submitted"]:
        assert time.monotonic() < deadline, "the worker did not finish"
        time.sleep(0.01)


def test_a_waiting_request_is_replaced_by_the_pages_latest():
    gate, ran, got = threading.Event(), [], []
    background.submit("blocker", gate.wait, lambda _r: None)  # holds the one worker
    for value in (1, 2, 3):
        background.submit("page", lambda v=value: ran.append(v) or v * 10, got.append)
    assert background.waiting() >= 1
    gate.set()
    wait_idle()
    assert ran == [3] and got == [30]  # only the latest value was simulated and delivered


def test_a_failing_job_leaves_the_worker_serving(caplog):
    got = []
    background.submit("bad", lambda: 1 / 0, got.append)
    background.submit("good", lambda: "ok", got.append)
    wait_idle()
    assert got == ["ok"] and "background work failed" in caplog.text


@pytest.fixture
def served_page(monkeypatch):
    """A state and its curves in a document that looks served; next-tick callbacks captured, not run."""
    doc = Document()
    doc._session_context = lambda: types.SimpleNamespace(server_context=None, id="test",
                                                        request=types.SimpleNamespace(arguments={}))
    ticks = []
    monkeypatch.setattr(doc, "add_next_tick_callback", lambda fn: ticks.append(fn))
    charged = []
    monkeypatch.setattr(runs, "background_meter", charged.append)
    with set_curdoc(doc):
        state = ExplorableState()
        curves = Curves(state=state)
    return doc, state, curves, ticks, charged


def new_pool() -> float:
    """A pool size such that neither it nor the next step has a run or curves in this process yet."""
    base = ExplorableState().run_config()
    probe = Curves(state=ExplorableState())

    def untried(pool: float) -> bool:
        cfg = base.replace(pool_gib=pool)
        return not runs.is_cached(cfg) and not probe.by_seqs.known(cfg)

    for pool in np.arange(3.5, 79, 0.5):
        if untried(float(pool)) and untried(float(pool) + 0.5):
            return float(pool)
    raise AssertionError("no untried pool size left")


def test_new_curves_are_simulated_off_the_loop_and_drawn_by_the_page(served_page):
    doc, state, curves, ticks, charged = served_page
    pool = new_pool()
    before = list(curves.by_seqs.line.data["y"])
    with set_curdoc(doc):
        state.pool_gib = pool  # the run and its readouts go out now; the curves follow
    assert list(curves.by_seqs.line.data["y"]) == before  # nothing simulated for them on the loop
    wait_idle()
    (deliver,) = ticks
    deliver()  # the page's thread draws them
    assert curves.by_pool.marker.location == pool and list(curves.by_seqs.line.data["y"]) != before
    assert len(charged) == 1 and charged[0] > 0  # their simulations are charged to the page


def test_curves_for_a_setting_the_page_has_left_are_not_drawn(served_page):
    doc, state, curves, ticks, charged = served_page
    first, second = new_pool(), None
    gate = threading.Event()
    background.submit("blocker", gate.wait, lambda _r: None)
    with set_curdoc(doc):
        state.pool_gib = first
        second = first + 0.5
        state.pool_gib = second  # replaces the request for `first` before it started
    gate.set()
    wait_idle()
    assert len(ticks) == 1
    ticks[0]()
    assert curves.by_pool.marker.location == second


def test_the_worker_waits_while_the_loop_answers_a_reader(monkeypatch):
    monkeypatch.setattr(background, "QUIET_S", 0.2)
    monkeypatch.setattr(background, "MAX_DEFER_S", 5.0)
    started = []
    background.foreground_busy()  # a reader's change is being handled now
    t0 = time.monotonic()
    background.submit("curves", lambda: (background.yield_to_foreground(), started.append(time.monotonic())),
                      lambda _r: None)
    wait_idle()
    assert started[0] - t0 >= 0.15  # it held back until the loop had been quiet
    t0 = time.monotonic()
    background.submit("curves", lambda: (background.yield_to_foreground(), started.append(time.monotonic())),
                      lambda _r: None)
    wait_idle()
    assert started[1] - t0 < 0.15  # a quiet loop: no wait


def test_a_busy_loop_delays_the_worker_at_most_max_defer(monkeypatch):
    monkeypatch.setattr(background, "QUIET_S", 10.0)
    monkeypatch.setattr(background, "MAX_DEFER_S", 0.3)
    background.foreground_busy()
    waited = []

    def work():
        t0 = time.monotonic()
        background.yield_to_foreground()
        waited.append(time.monotonic() - t0)

    background.submit("curves", work, lambda _r: None)
    wait_idle()
    assert 0.2 <= waited[0] < 2.0


def test_off_the_worker_nothing_waits(monkeypatch):
    monkeypatch.setattr(background, "QUIET_S", 10.0)
    background.foreground_busy()
    t0 = time.monotonic()
    background.yield_to_foreground()  # the loop itself, or a test without a server, never waits
    assert time.monotonic() - t0 < 0.1
