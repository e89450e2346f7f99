"""The cross-session cache of views' data: one build per run config, bounded by bytes, never for a measured run."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine import RunConfig
from explorable.state import runs, view_data
from explorable.state.bounded_cache import BoundedCache
from explorable.views.lanes import lane_view_data
from explorable.page.layout import build_app


@pytest.fixture(autouse=True)
def fresh_cache():
    view_data.cache_clear()
    yield
    view_data.cache_clear()


def test_two_pages_on_one_state_build_its_lanes_once():
    first, second = build_app(sync=False), build_app(sync=False)
    for app in (first, second):
        app.state.max_num_seqs = 64
    assert first.state.trace is second.state.trace
    # The second page found the first page's data: the very same arrays, not a copy built again.
    assert first.views["lanes"].source.data["left"] is second.views["lanes"].source.data["left"]
    assert first.views["logs"].pane.object == second.views["logs"].pane.object
    assert view_data.cache_info()["hits"] > 0


def test_cached_data_equals_a_fresh_build():
    trace = runs.run(RunConfig(max_num_seqs=64))
    cached = view_data.derived("lanes", trace, lane_view_data)
    fresh = lane_view_data(trace)
    assert cached["caption"] == fresh["caption"]
    for part in ("segments", "marks"):
        for name, column in fresh[part].items():
            np.testing.assert_array_equal(cached[part][name], column)


def test_measured_trace_is_never_served_from_the_cache():
    trace = runs.run(RunConfig(max_num_seqs=64))
    view_data.derived("lanes", trace, lambda t: "simulated")
    measured = dataclasses.replace(trace, measured=True)
    assert view_data.derived("lanes", measured, lambda t: "measured") == "measured"


def test_cache_is_bounded_by_bytes():
    cache = BoundedCache(max_bytes=40_000, max_items=100, size_of=view_data.approx_bytes)  # as view_data's
    for i in range(10):
        cache.put(("v", i), np.zeros(1000))  # ~8 kB each
    info = cache.info()
    assert info["bytes"] <= 40_000
    assert 0 < info["items"] < 10
    assert cache.get(("v", 9))[0] and not cache.get(("v", 0))[0]  # least recently used went first
    cache.put(("huge", 0), np.zeros(10_000))  # more than a quarter of the budget: not kept at all
    assert not cache.get(("huge", 0))[0]
