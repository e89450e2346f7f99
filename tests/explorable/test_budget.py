"""The compute budget (explorable.server.budget) on its own: pages as fake Bokeh documents, the clock as a number.

What a reader meets on a busy server: a page over its budget keeps its latest values waiting and is served
them once; the waiting page that asked for least goes first; a page that went away is forgotten; simulations
paid in advance are not paid twice.
"""
from __future__ import annotations

import weakref

import pytest

from explorable.server import budget


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeServerSession:
    connection_count = 1


class FakeContext:
    def __init__(self):
        self.session = FakeServerSession()


class FakeDoc:
    """What budget needs of a Bokeh document: a session context and timeout callbacks (run by the test)."""

    def __init__(self):
        self.session_context = FakeContext()
        self.timers: list = []

    def add_timeout_callback(self, callback, ms):
        self.timers.append((callback, ms))
        return len(self.timers)

    def fire(self) -> None:
        timers, self.timers = self.timers, []
        for callback, _ms in timers:
            callback()


class FakeState:
    def __init__(self):
        self.notices: list[str] = []


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(budget.time, "monotonic", clock)
    monkeypatch.setattr(budget, "SERVER", budget.Bucket(budget.SERVER_RATE, budget.SERVER_BURST))
    monkeypatch.setattr(budget, "HEAVY", budget.Bucket(budget.HEAVY_RATE, budget.HEAVY_BURST))
    monkeypatch.setattr(budget, "_sessions", weakref.WeakKeyDictionary())
    return clock


def page(state=None):
    doc = FakeDoc()
    if state is not None:
        budget.attach_state(doc, state)
    return doc


NEW, VISITED = 0.25, budget.CHANGE_COST_S  # what a change to a new state, or a visited one, costs


def send(doc, key, value, cost, applied: list) -> bool:
    """What explorable.server.guard does with one control change: apply it now, or hold it."""
    if budget.admit(doc, lambda: cost) is not None:
        budget.applied(doc, cost)
        applied.append((doc, [value]))
        return True
    budget.hold(doc, [(key, value)], lambda held: applied.append((doc, held)), lambda held: cost)
    return False


def test_a_bucket_refills_at_its_rate_up_to_its_burst(clock):
    b = budget.Bucket(rate=0.5, burst=2.0)
    b.charge(3.0)
    assert b.level() == pytest.approx(-1.0) and b.wait_s() == pytest.approx(2.0)
    clock.now += 3.0
    assert b.level() == pytest.approx(0.5)
    clock.now += 100
    assert b.level() == 2.0


def test_a_page_over_its_budget_is_served_its_latest_values_once_with_a_notice(clock):
    state, applied = FakeState(), []
    doc = page(state)
    n = 0
    while send(doc, "seqs", n, NEW, applied):  # new states until the page's bucket is empty
        n += 1
    assert 1 <= n <= 10 and budget.BUSY_NOTICE in state.notices
    for value in range(100, 150):  # a flood while waiting: nothing runs
        send(doc, "seqs", value, NEW, applied)
    assert len(applied) == n
    for _ in range(100):
        clock.now += 0.5
        doc.fire()
    assert applied[-1] == (doc, [149]) and len(applied) == n + 1  # the latest value, once
    assert budget.BUSY_NOTICE not in state.notices


def test_the_waiting_page_that_asked_for_least_goes_first(clock):
    applied = []
    flooder, reader = page(), page()
    for value in range(40):  # the flooder has asked for many new states
        send(flooder, "spread", value, NEW, applied)
    clock.now += 10  # both pages' buckets are full again; the flooder's demand has not faded yet
    for doc in (flooder, reader):
        doc.fire()
    applied.clear()
    budget.SERVER.tokens = -0.1  # the server is busy
    assert not send(flooder, "spread", 99, NEW, applied)
    assert not send(reader, "seqs", 64, VISITED, applied)
    clock.now += 1.0  # the server's bucket holds tokens again: whose turn?
    flooder.fire()  # the flooder's retry comes first in time, but it is not its turn
    assert applied == []
    reader.fire()
    assert applied == [(reader, [64])]
    clock.now += 1.0
    flooder.fire()
    assert applied[-1] == (flooder, [99])


def test_a_page_that_went_away_is_forgotten(clock):
    applied = []
    doc = page()
    while send(doc, "seqs", 1, NEW, applied):
        pass
    before = len(applied)
    doc.session_context.session.connection_count = 0
    clock.now += 60
    doc.fire()
    assert len(applied) == before and not budget.session_of(doc).pending


def test_simulations_paid_in_advance_are_not_charged_twice(clock, monkeypatch):
    import panel as pn

    doc = page()
    monkeypatch.setattr(type(pn.state), "curdoc", property(lambda self: doc))
    assert budget.admit(doc, lambda: NEW) == NEW
    budget.applied(doc, NEW)
    after_change = budget.session_of(doc).bucket.level()
    foreseen = NEW - budget.CHANGE_COST_S
    budget.meter(foreseen / 2)  # the curves' simulations, within what was paid
    assert budget.session_of(doc).bucket.level() == pytest.approx(after_change)
    budget.meter(foreseen)  # more than foreseen: the rest is charged
    assert budget.session_of(doc).bucket.level() == pytest.approx(after_change - foreseen / 2)


def test_background_simulations_are_charged_to_the_page_alone_not_below_one_change(clock, monkeypatch):
    import panel as pn

    doc = page()
    monkeypatch.setattr(type(pn.state), "curdoc", property(lambda self: doc))
    server = budget.SERVER.level()
    budget.meter_background(0.4)  # the curves of a release, simulated on the worker
    assert budget.session_of(doc).bucket.level() == pytest.approx(budget.SESSION_BURST - 0.4)
    assert budget.SERVER.level() == pytest.approx(server)  # no other page waited for them
    budget.meter_background(5.0)  # far more than the page holds: it goes one change's cost below zero
    assert budget.session_of(doc).bucket.level() == pytest.approx(-budget.CHANGE_COST_S)
