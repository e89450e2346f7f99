"""Chart and text data derived from a run, shared by every session: a class asking for the same state
builds each view's data once.

A view's data is a pure function of the run (and of the view's own options), so it is kept beside the
run's trace in explorable.runs, keyed the same way, by the run's config. Bounded by memory as the traces
are: a thrashing run's lanes hold tens of thousands of segments. A measured trace (live GPU) is not a
function of its config, so its data is built every time and not kept.

The values handed out are shared: callers must not modify them (Bokeh copies nothing it is given, but
it only reads a ColumnDataSource's arrays when it serialises them).
"""
from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from engine import Trace

VIEW_CACHE_BYTES = 64 * 2**20  # a default run's views ~0.1 MB, a thrashing run's a few MB
VIEW_CACHE_ITEMS = 4096

T = TypeVar("T")


def approx_bytes(value: Any) -> int:
    """Memory held by a view's data: arrays, strings, and the containers around them (roughly)."""
    if isinstance(value, np.ndarray):
        return value.nbytes + 112
    if isinstance(value, (str, bytes)):
        return sys.getsizeof(value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(approx_bytes(k) + approx_bytes(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sys.getsizeof(value) + sum(approx_bytes(v) for v in value)
    return sys.getsizeof(value)


class _ViewCache:
    """Least-recently-used view data by (view, config, options), within a byte and an item budget."""

    def __init__(self, max_bytes: int, max_items: int):
        self.max_bytes, self.max_items = max_bytes, max_items
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return False, None
            self._items.move_to_end(key)
            self.hits += 1
            return True, found[0]

    def put(self, key: Hashable, value: Any) -> None:
        size = approx_bytes(value)
        if size > self.max_bytes // 4:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._items and (self._bytes > self.max_bytes or len(self._items) > self.max_items):
                _, (_, old) = self._items.popitem(last=False)
                self._bytes -= old

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    def info(self) -> dict[str, int]:
        return {"items": len(self._items), "bytes": self._bytes, "hits": self.hits, "misses": self.misses}


_VIEWS = _ViewCache(VIEW_CACHE_BYTES, VIEW_CACHE_ITEMS)
cache_clear = _VIEWS.clear
cache_info = _VIEWS.info


def derived(view: str, trace: Trace, build: Callable[[Trace], T], *options: Hashable) -> T:
    """`build(trace)`, the data of `view` for this run, computed once per config (and options) for all
    sessions. The result is shared: read it, never modify it."""
    if trace.measured or trace.config is None:
        return build(trace)
    key = (view, trace.config, options)
    found, value = _VIEWS.get(key)
    if not found:
        value = build(trace)
        _VIEWS.put(key, value)
    return value
