"""Chart and text data derived from a run, shared by every session: a class asking for the same state
builds each view's data once.

A view's data is a pure function of the run (and of the view's own options), so it is kept beside the
run's trace in explorable.state.runs, keyed the same way, by the run's config. Bounded by memory as the traces
are: a thrashing run's lanes hold tens of thousands of segments. A measured trace (live GPU) is not a
function of its config, so its data is built every time and not kept.

The values handed out are shared: callers must not modify them (Bokeh copies nothing it is given, but
it only reads a ColumnDataSource's arrays when it serialises them).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from engine import Trace
from explorable.state.bounded_cache import BoundedCache

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
        if value and set(map(type, value)) == {str}:  # per-request text (the hover): summed in C, not per item
            return sys.getsizeof(value) + sum(map(sys.getsizeof, value))
        return sys.getsizeof(value) + sum(approx_bytes(v) for v in value)
    return sys.getsizeof(value)


_VIEWS = BoundedCache(VIEW_CACHE_BYTES, VIEW_CACHE_ITEMS, approx_bytes)
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
