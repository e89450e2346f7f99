"""Work that a page waits for but need not hold the server's event loop: the throughput curves' simulations.

A served page's callbacks all run on one event-loop thread, so while one page's curves simulate up to ~30
settings nobody has tried, every other page's slider release waits behind them. The scheduler core
releases the GIL (numba, nogil), so on a worker thread those simulations run on the second core while the
loop answers the next page. One worker: the loop keeps a core of its own.

Only the latest request of each page matters (a reader who releases a slider twice wants the curves of the
second value): a request that has not started yet is replaced, so a page never has more than one job
waiting and a burst of releases costs one sweep, not one per release.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="explorable-background")
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


def _run(key: Hashable) -> None:
    with _lock:
        work, then = _waiting.pop(key)
    try:
        then(work())
    except Exception:  # a worker must survive one page's problem; the page keeps its previous curves
        log.exception("background work failed")
    finally:
        with _lock:
            counters["done"] += 1


def waiting() -> int:
    """Jobs submitted and not started yet."""
    with _lock:
        return len(_waiting)
