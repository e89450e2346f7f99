"""Keep the server process's own long-lived objects out of every full garbage collection.

A full collection visits every container object the process holds and stops the whole server while it runs
(about 0.6-1.3 µs per object on the 2-core machine). After start-up, before any reader's page, a server process
already holds about 380,000 of them (Panel, Bokeh, numba's compiled core, the runs' caches): more than a third
of what a collection visits with 30 pages open. They live as long as the process, so visiting them finds
nothing; and collections are frequent (CPython's own, as pages open; Panel's, 5 s after a session ends).

`gc.freeze()` moves every object the collector tracks to a generation it never visits. It is done once per
process, at the first moment no page is alive and the simulator is prepared (right after `panel serve --warm`
has built and discarded its warm-up page, before the first reader; without --warm, once the first readers'
pages have all ended and their teardown has run), after a full collection, so no page's leftovers are frozen
with the baseline. A frozen object still goes when its last reference does; only a frozen reference cycle would
stay for good, and the baseline holds none that ends.
"""
from __future__ import annotations

import gc
import logging

import panel as pn
from bokeh.document import Document
from tornado.ioloop import IOLoop

from explorable.page import startup

log = logging.getLogger(__name__)

# A served page's teardown goes on after its session-destroyed callbacks (Panel cancels its write tasks, which
# unwind on later turns of the loop); freezing while they still hold the page would keep it for good.
SETTLE_S = 2.0

_alive: set[int] = set()  # id() of each page's document, from its app.py run until its session ends
_frozen = False


def track(doc: Document | None) -> None:
    """Count `doc` as a page until its session ends; freeze the baseline once none is left."""
    if doc is None or _frozen or pn.config.autoreload:  # --dev re-imports modules: nothing stays long-lived
        return
    key = id(doc)
    context = doc.session_context
    warm_up = context is None or context.server_context is None  # --warm's page (or a health check's)
    _alive.add(key)
    doc.on_session_destroyed(lambda _context: _ended(key, warm_up))


def _ended(key: int, warm_up: bool) -> None:
    _alive.discard(key)
    if _alive or _frozen:
        return
    if warm_up:  # no reader's page yet: this runs as the event loop starts, before the first connection
        IOLoop.current().add_callback(_freeze_if_idle)
    else:
        IOLoop.current().call_later(SETTLE_S, _freeze_if_idle)


def _freeze_if_idle() -> None:
    global _frozen
    if _alive or _frozen:
        return
    if not startup.ready():  # numba's core is still being prepared: it belongs in the baseline too
        IOLoop.current().call_later(SETTLE_S, _freeze_if_idle)
        return
    gc.collect()  # the ended pages' reference cycles go now, not frozen with the baseline
    gc.freeze()
    _frozen = True
    log.info("%d long-lived objects kept out of garbage collection", gc.get_freeze_count())


def frozen() -> bool:
    return _frozen
