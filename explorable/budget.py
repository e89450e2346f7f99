"""A compute budget per browser session, and one for the server, so that no page takes more than its share.

Every run a page asks for (a control moved; `runs.budgeted`) costs server CPU: the simulation when the state
is new, and the views' update either way. Each session has a token bucket of CPU seconds (`SESSION_*`);
the server has one too (`SERVER_*`), refilled a little slower than one core so that page opens, websocket
traffic and the GPU queue keep their room. A run goes ahead at once while both buckets hold tokens. Otherwise
the page keeps the values its reader set, shows one notice, and its run waits: when the server's bucket
refills, the waiting page whose own bucket is fullest (who has used least lately) goes first. A page that
floods the server therefore waits behind everyone else, and when it is served it is served its latest
values, once. What a run cost (CPU time of the run and its views; a simulation the curves start later) is
charged to the session's bucket and to the server's; a bucket may go below zero by one run's cost.

State is kept per Bokeh document (weakly: a closed page leaves nothing behind). All of it is touched only
on the server's event-loop thread, where Bokeh runs every session's callbacks.
"""
from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import panel as pn

from explorable import runs

# A page alone may use a quarter of a core for as long as it likes, in bursts of two seconds: a reader
# dragging through new states every second stays well inside it (a new state costs 0.05-0.3 s).
SESSION_RATE = 0.25  # CPU seconds per second
SESSION_BURST = 2.0  # CPU seconds
# The server: most of one core for runs; the rest for everything else a class sends.
SERVER_RATE = 0.7
SERVER_BURST = 2.0
RETRY_S = 0.05  # how often a waiting page looks again while others go first
BUSY_NOTICE = ("The server is busy with other pages: your latest settings will be shown as soon as it is "
               "your turn.")


@dataclass
class Bucket:
    """Tokens in CPU seconds, refilled at `rate` up to `burst`."""

    rate: float
    burst: float
    tokens: float = 0.0
    stamp: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.tokens = self.burst

    def level(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
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
    pending: Callable[[], Any] | None = None  # the run to do when it is this page's turn
    owner: Any = None  # the page's state (for the notice)
    timer: Any = None


SERVER = Bucket(SERVER_RATE, SERVER_BURST)
_sessions: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_metering = False  # inside a gated run: its wall of CPU time is charged whole, not simulation by simulation
counters = {"ran": 0, "deferred": 0, "served_late": 0}


def _session(doc) -> Session:
    found = _sessions.get(doc)
    if found is None:
        found = _sessions[doc] = Session()
    return found


def _waiting() -> list[Session]:
    return [s for s in list(_sessions.values()) if s.pending is not None]


def _my_turn(me: Session) -> bool:
    """Both buckets hold tokens, and no waiting page has used less lately than this one."""
    now = time.monotonic()
    if SERVER.level(now) <= 0 or me.bucket.level(now) <= 0:
        return False
    mine = me.bucket.tokens
    return all(other is me or other.bucket.level(now) <= mine for other in _waiting())


def _run_charged(session: Session, work: Callable[[], Any]) -> None:
    global _metering
    started, _metering = time.thread_time(), True
    try:
        work()
    finally:
        _metering = False
        spent = time.thread_time() - started
        session.bucket.charge(spent)
        SERVER.charge(spent)
        counters["ran"] += 1


def gate(work: Callable[[], Any], owner: Any) -> None:
    """Run `work` (a page's run) now if it is this page's turn, else remember it and try again later."""
    doc = pn.state.curdoc
    if doc is None or doc.session_context is None:  # not a served page (a test, the liveness check)
        work()
        return
    session = _session(doc)
    if session.owner is None and getattr(owner, "trace", True) is None:
        session.owner = owner
        _run_charged(session, work)  # a page's first run builds the page: never deferred
        return
    session.owner = owner
    if session.pending is None and _my_turn(session):
        _run_charged(session, work)
        return
    if session.pending is None:
        counters["deferred"] += 1
        _notice(session, True)
    session.pending = work  # the latest request replaces the one waiting
    _schedule(doc, session)


def _schedule(doc, session: Session) -> None:
    if session.timer is not None:
        return
    wait = max(RETRY_S, SERVER.wait_s(), session.bucket.wait_s())

    def retry():
        session.timer = None
        if session.pending is None:
            return
        if not _my_turn(session):
            _schedule(doc, session)
            return
        work, session.pending = session.pending, None
        counters["served_late"] += 1
        _notice(session, False)
        _run_charged(session, work)

    session.timer = doc.add_timeout_callback(retry, int(1000 * min(wait, 30.0)))


def _notice(session: Session, waiting: bool) -> None:
    state = session.owner
    if state is None or not hasattr(state, "notices"):
        return
    has = BUSY_NOTICE in state.notices
    if waiting and not has:
        state.notices = [*state.notices, BUSY_NOTICE]
    elif not waiting and has:
        state.notices = [n for n in state.notices if n != BUSY_NOTICE]


def meter(seconds: float) -> None:
    """Charge a simulation run outside a gated run (the curves, drawn on the next tick) to its page."""
    if _metering:
        return
    doc = pn.state.curdoc
    SERVER.charge(seconds)
    if doc is not None and doc.session_context is not None:
        _session(doc).bucket.charge(seconds)


def install() -> None:
    """Route the explorable's runs through the budget (idempotent)."""
    runs.gate, runs.meter = gate, meter
