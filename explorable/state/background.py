"""Work that a page waits for but need not hold the server's event loop: the throughput curves' simulations.

A served page's callbacks all run on one event-loop thread, so while one page's curves simulate up to ~30
settings nobody has tried, every other page's slider release waits behind them. The scheduler core
releases the GIL (numba, nogil), so on a worker thread those simulations run on the second core while the
loop answers the next page. One worker: the loop keeps a core of its own.

The loop's own work comes first. The worker's simulations release the GIL, but the Python around each of
them (building the trace) holds it, and the loop, which gives the GIL up for every socket read and write,
then waits for it again each time: a class releasing together waited seconds behind sixty pages' curves.
So the worker starts a simulation only once the loop has been quiet for QUIET_S (no control change
received or being handled: `foreground_busy`), holding back at most MAX_DEFER_S per job, and runs at a
lower OS priority than the loop.

Only the latest request of each page matters (a reader who releases a slider twice wants the curves of the
second value): a request that has not started yet is replaced, so a page never has more than one job
waiting and a burst of releases costs one sweep, not one per release.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

QUIET_S = 0.1  # Panel handles a slider release 50 ms after it arrives (its debounce): a quiet loop is quieter
MAX_DEFER_S = 2.0  # a job's curves still come under a steady stream of changes from other pages
WORKER_NICENESS = 10  # the loop's thread keeps its core when both want one (Linux: priority per thread)
_THREAD_PREFIX = "explorable-background"


def _lower_priority() -> None:
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICENESS)
    except (AttributeError, OSError):  # not Linux, or not allowed: the deferral alone still holds
        pass


_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=_THREAD_PREFIX, initializer=_lower_priority)
_last_busy = [0.0]  # monotonic time the loop last said it was answering a reader
_job = threading.local()  # on the worker: when its current job started
_lock = threading.Lock()
_waiting: OrderedDict[Hashable, tuple[Callable[[], Any], Callable[[Any], None]]] = OrderedDict()
counters = {"submitted": 0, "replaced": 0, "done": 0}


def submit(key: Hashable, work: Callable[[], Any], then: Callable[[Any], None]) -> None:
    """Run `work()` on the worker, then `then(result)` there (it must hand the result to the page's own
    thread, e.g. with `doc.add_next_tick_callback`). A job of `key` still waiting is replaced."""
    with _lock:
        counters["submitted"] += 1
        queued = key in _waiting
        if queued:
            counters["replaced"] += 1
        _waiting[key] = (work, then)
    if not queued:
        _pool.submit(_run, key)


def foreground_busy() -> None:
    """The event loop is receiving or handling a reader's change: the worker holds back its next simulation."""
    _last_busy[0] = time.monotonic()


def yield_to_foreground() -> None:
    """On the worker, before a simulation: wait until the loop has been quiet for QUIET_S (at most until the
    job has waited MAX_DEFER_S). Anywhere else (the loop itself, tests without a server) it returns at once."""
    started = getattr(_job, "started", None)
    if started is None:
        return
    while True:
        now = time.monotonic()
        quiet_for, left = now - _last_busy[0], started + MAX_DEFER_S - now
        if quiet_for >= QUIET_S or left <= 0:
            return
        time.sleep(min(QUIET_S - quiet_for, left))


def _run(key: Hashable) -> None:
    with _lock:
        work, then = _waiting.pop(key)
    _job.started = time.monotonic()
    try:
        then(work())
    except Exception:  # a worker must survive one page's problem; the page keeps its previous curves
        log.exception("background work failed")
    finally:
        _job.started = None
        with _lock:
            counters["done"] += 1


def waiting() -> int:
    """Jobs submitted and not started yet."""
    with _lock:
        return len(_waiting)
