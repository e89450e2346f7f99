"""A compute budget per browser session, and one for the server, so that no page takes more than its share.

What a page makes the server do starts with a control change its browser sends (a slider released, a stop
or guided step clicked): Panel processes it (20-30 ms for this page) and the state runs the engine
(a simulation for the run when the state is new; its new curve points run off the loop). Each session has a token bucket
of CPU seconds (`SESSION_*`), the server has one (`SERVER_*`), refilled slower than one core so that page
opens and websocket traffic keep their room, and pages that keep asking share a smaller one (`HEAVY_*`). explorable.server.guard asks `admit(doc, cost)` for each patch that
changes a control: it is applied at once while both buckets hold tokens and no waiting page comes first.
Otherwise `hold` keeps it, merged with what the page already had waiting (the latest value of each control
wins), the page shows one notice, and its changes are applied when it is its turn. Turns go to the waiting
page that has asked for least lately (the cost of what it sent over the last DEMAND_TAU_S, served or not):
a reader moving between visited states goes before a page that keeps asking for new ones, and a flooding
page waits behind everyone else, then is served its latest values once. A change is charged in advance
(`change_cost`); the simulations explorable.state.runs reports beyond what was paid in advance are charged as
measured (wall time: what other pages wait for); a bucket may go below zero by one change's cost.

State is kept per Bokeh document, weakly, and holds nothing that holds the document except while changes
wait (a WeakKeyDictionary value that refers to its key would keep every closed page alive); `forget(doc)`
drops it when Bokeh destroys the session. Everything here runs on the
server's event-loop thread, where Bokeh runs every session's callbacks.
"""
from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import panel as pn

from explorable.state import runs

# Panel's processing of one control change on this page, before any simulation: 20-30 ms (cProfile showed
# 20-60 ms with its own overhead, on the shared 2-core machine). It also sets how fast a page that keeps
# sending while it waits becomes heavy (HEAVY_DEMAND_S): tuned together with benchmarks/attack.py.
CHANGE_COST_S = 0.03
DRAG_COST_S = 0.005  # a slider's value while it is dragged (it runs nothing until released)
# A state nobody has asked for also runs the engine: the run, on the event loop, which explorable.server.guard
# estimates (`guard.change_cost`) and is charged in advance, so that twenty pages asking at once cannot all
# be let in before their simulations are counted; and each new point of the two curves (up to ~30
# simulations, 0.05-0.3 s) on a worker thread (explorable.state.background), charged to the page alone when drawn
# (`meter_background`): they keep no other page's release waiting.
# A page alone may use a quarter of a core for as long as it likes, in bursts of a second: a reader
# releasing a slider at new states every second or two stays inside it.
SESSION_RATE = 0.25  # CPU seconds per second
SESSION_BURST = 1.0  # CPU seconds
# The server: most of a core's worth of changes a second (the rest keeps page opens and websocket traffic
# moving), let in at most SERVER_BURST at once (what the next page may have to wait behind). A class
# releasing at once on visited states (0.03 s a page) fits in it.
SERVER_RATE = 0.85
SERVER_BURST = 2.0
# Pages that keep asking (more than HEAVY_DEMAND_S of work over the last DEMAND_TAU_S, served or not: a
# script, a stuck key) share a smaller bucket, so the loop keeps room for everyone else's next change.
DEMAND_TAU_S = 10.0
HEAVY_DEMAND_S = 1.0
HEAVY_RATE = 0.3
HEAVY_BURST = 0.3
RETRY_S = 0.1  # how soon a waiting page looks again while another goes first
BUSY_NOTICE = ("The server is busy with other pages: your latest settings will be shown as soon as it is "
               "your turn.")


@dataclass
class Bucket:
    """Tokens in CPU seconds, refilled at `rate` up to `burst`; starts full."""

    rate: float
    burst: float
    tokens: float = -1.0
    stamp: float = field(default_factory=lambda: time.monotonic())  # looked up at call time (tests fake the clock)

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def level(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.stamp) * self.rate)
        self.stamp = now
        return self.tokens

    def charge(self, seconds: float) -> None:
        self.level()
        self.tokens -= seconds

    def wait_s(self) -> float:
        """Seconds until this bucket holds tokens again (0 if it does)."""
        level = self.level()
        return 0.0 if level > 0 else -level / self.rate


@dataclass
class Session:
    bucket: Bucket = field(default_factory=lambda: Bucket(SESSION_RATE, SESSION_BURST))
    pending: dict[Any, Any] = field(default_factory=dict)  # what the page sent while waiting, latest per key
    apply: Callable[[list], None] | None = None  # applies held events to the page's document
    timer: Any = None
    state_ref: Any = None  # weak: the page's ExplorableState (its notices show the busy notice)
    prepaid: float = 0.0  # simulation time charged in advance, not yet used
    estimate: Callable[[list], float] | None = None  # what held changes will cost, from (key, event) pairs
    demand: float = 0.0  # cost of what it asked for, decaying with DEMAND_TAU_S
    demand_stamp: float = field(default_factory=lambda: time.monotonic())  # looked up at call time (tests fake the clock)

    def demanded(self, now: float, cost: float = 0.0) -> float:
        self.demand = self.demand * math.exp(-(now - self.demand_stamp) / DEMAND_TAU_S) + cost
        self.demand_stamp = now
        return self.demand

    @property
    def state(self) -> Any:
        return self.state_ref() if self.state_ref is not None else None

    def clear(self) -> None:
        self.pending, self.apply, self.estimate = {}, None, None


SERVER = Bucket(SERVER_RATE, SERVER_BURST)
HEAVY = Bucket(HEAVY_RATE, HEAVY_BURST)
_sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
counters = {"applied": 0, "held": 0, "served_late": 0}


def session_of(doc) -> Session:
    found = _sessions.get(doc)
    if found is None:
        found = _sessions[doc] = Session()
    return found


def attach_state(doc, state: Any) -> None:
    """The page's state: it shows the busy notice and tells which changes lead to a new state."""
    session_of(doc).state_ref = weakref.ref(state)


def forget(doc) -> None:
    """The page's session is gone (Bokeh destroyed it)."""
    _sessions.pop(doc, None)


def admit(doc, cost: Callable[[], float]) -> float | None:
    """May this page's control change be applied now (it has nothing waiting, and it is its turn)? Its cost
    (estimated by `cost()` unless the page already waits) when it may; None when it must wait."""
    me = session_of(doc)
    now = time.monotonic()
    if me.pending:
        me.demanded(now, CHANGE_COST_S)  # asking again while waiting counts, cheaply
        return None
    estimate = cost()
    me.demanded(now, estimate)
    return estimate if _my_turn(me) else None


def _my_turn(me: Session) -> bool:
    """Its buckets hold tokens, and no other waiting page that could go has asked for less lately."""
    now = time.monotonic()
    mine = me.demanded(now)
    if SERVER.level(now) <= 0 or me.bucket.level(now) <= 0 or (mine > HEAVY_DEMAND_S and HEAVY.level(now) <= 0):
        return False
    return all(other is me or not other.pending or other.bucket.level(now) <= 0 or other.demanded(now) >= mine
               for other in list(_sessions.values()))


def charge(doc, seconds: float) -> None:
    """Charge this page and the server (and the heavy pages' share, for a heavy page)."""
    session = session_of(doc)
    session.bucket.charge(seconds)
    SERVER.charge(seconds)
    if session.demanded(time.monotonic()) > HEAVY_DEMAND_S:
        HEAVY.charge(seconds)


def applied(doc, cost: float) -> None:
    """A change goes ahead: charge it now (its simulations are paid in advance as far as foreseen)."""
    counters["applied"] += 1
    session = session_of(doc)
    session.prepaid += max(0.0, cost - CHANGE_COST_S)
    charge(doc, cost)


def hold(doc, events: list[tuple[Any, Any]], apply: Callable[[list], None],
         estimate: Callable[[list], float]) -> None:
    """Keep (key, event) pairs for later (a later event of the same key replaces an earlier one); `apply`
    applies a list of events, `estimate` says what a list of (key, event) pairs will cost when applied."""
    session = session_of(doc)
    if not session.pending:
        counters["held"] += 1
        _notice(session, True)
    for key, event in events:
        session.pending.pop(key, None)  # re-insert: the order of the latest changes is kept
        session.pending[key] = event
    session.apply, session.estimate = apply, estimate
    _schedule(doc, session)


def _schedule(doc, session: Session) -> None:
    if session.timer is not None:
        return
    heavy = session.demanded(time.monotonic()) > HEAVY_DEMAND_S
    wait = max(RETRY_S, SERVER.wait_s(), session.bucket.wait_s(), HEAVY.wait_s() if heavy else 0.0)

    def retry():
        session.timer = None
        if not session.pending:
            return
        if not _connected(doc):  # the page went away: nobody waits for its changes (a reconnect re-reads the page)
            session.clear()
            return
        if not _my_turn(session):
            _schedule(doc, session)
            return
        held, apply, estimate = list(session.pending.items()), session.apply, session.estimate
        session.clear()
        counters["served_late"] += 1
        _notice(session, False)
        applied(doc, estimate(held))
        apply([event for _key, event in held])

    session.timer = doc.add_timeout_callback(retry, int(1000 * min(wait, 30.0)))


def _connected(doc) -> bool:
    server_session = getattr(getattr(doc, "session_context", None), "session", None)  # Bokeh's ServerSession
    return getattr(server_session, "connection_count", 1) > 0


def _notice(session: Session, waiting: bool) -> None:
    state = session.state
    if state is None or not hasattr(state, "notices"):
        return
    has = BUSY_NOTICE in state.notices
    if waiting and not has:
        state.notices = [*state.notices, BUSY_NOTICE]
    elif not waiting and has:
        state.notices = [n for n in state.notices if n != BUSY_NOTICE]


def meter(seconds: float) -> None:
    """explorable.state.runs reports each simulation it ran (a cache miss): charge it to the page that asked."""
    doc = pn.state.curdoc
    if doc is None or doc.session_context is None:
        SERVER.charge(seconds)
        return
    session = session_of(doc)
    paid = min(session.prepaid, seconds)
    session.prepaid -= paid
    charge(doc, seconds - paid)


def meter_background(seconds: float) -> None:
    """Simulations run for this page off the event loop (the curves, explorable.state.background), reported from
    the page's thread when they are drawn: its own bucket pays them; the server's does not, since they
    kept no other page waiting (the loop answered them meanwhile)."""
    doc = pn.state.curdoc
    if doc is None or doc.session_context is None:
        return
    session = session_of(doc)
    paid = min(session.prepaid, seconds)
    session.prepaid -= paid
    # At most down to one change's cost below zero, as for a change: they arrive late (after the page's next
    # changes may have been admitted), and a page sending many changes has one sweep waiting at most
    # (explorable.state.background), so charging every one in full would hold its latest value for many seconds.
    session.bucket.charge(min(seconds - paid, max(0.0, session.bucket.level() + CHANGE_COST_S)))


def install() -> None:
    """Have explorable.state.runs report its simulations here (idempotent)."""
    runs.meter = meter
    runs.background_meter = meter_background
