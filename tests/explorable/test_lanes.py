"""The lane colour rule: what each stretch of each request's time is drawn as, derived from the trace."""
from __future__ import annotations


import numpy as np
import pytest

from engine import Event, RunConfig, Workload, simulate
from explorable.views import palette
from explorable.views.lanes import (
    MAX_LISTED_TIMES, THRASH_PREEMPTIONS, is_thrashing, lane_segments, request_details, state_counts, thin_segments,
)

DEFAULT = RunConfig()
CAP_64 = RunConfig(max_num_seqs=64)
MEMORY_WALL = RunConfig(pool_gib=2.0, max_num_seqs=512)
STATIC = RunConfig(max_num_seqs=64, unit="request", allocation="reserve")

# vLLM 0.11's own schedule-b workload (shared/fixtures): 4 slots and long prompts, where vLLM evicted
# single requests 13 to 33 times.
THRASH_WORKLOAD = Workload(
    np.array([2199, 1803, 1477, 489, 3000, 301, 748, 806, 3000, 1885, 1712, 3000, 3000, 2016, 678, 1880, 364, 1160,
              1155, 378]),
    np.array([63, 117, 60, 3, 3, 12, 3, 8, 4, 163, 77, 245, 32, 168, 64, 29, 9, 2, 31, 11]),
)
PER_REQUEST_THRASH = RunConfig(max_num_seqs=4, max_num_batched_tokens=1024, num_gpu_blocks_override=486,
                               workload=THRASH_WORKLOAD)


@pytest.fixture(scope="module")
def traces():
    return {name: simulate(cfg) for name, cfg in
            [("default", DEFAULT), ("cap64", CAP_64), ("wall", MEMORY_WALL), ("static", STATIC),
             ("per_request", PER_REQUEST_THRASH)]}


def test_the_articles_settings_give_the_articles_colours(traces):
    assert state_counts(lane_segments(traces["cap64"]))["lost"] == 0  # 64 slots: all teal
    assert state_counts(lane_segments(traces["cap64"]))["thrash"] == 0
    default = state_counts(lane_segments(traces["default"]))
    assert default["lost"] > 0 and default["thrash"] == 0  # 256 slots: amber
    wall = state_counts(lane_segments(traces["wall"]))
    assert wall["thrash"] > 0 and wall["lost"] == 0  # 2 GiB, 512 slots: magenta
    assert state_counts(lane_segments(traces["static"]))["lost"] == 0  # reservation never evicts


@pytest.mark.parametrize("name", ["default", "cap64", "wall", "static", "per_request"])
def test_each_lane_is_covered_from_zero_to_its_finish_without_gaps_or_overlaps(traces, name):
    trace = traces[name]
    seg = lane_segments(trace)
    finish = trace.finish_time()
    for r in range(trace.workload.num_requests):
        mine = seg["y"] == r
        left = seg["left"][mine].astype(np.float64)
        right = seg["right"][mine].astype(np.float64)
        order = np.argsort(left)
        left, right = left[order], right[order]
        assert left[0] == 0.0 or seg["state"][mine][order][0] != palette.WAITING
        assert np.allclose(left[1:], right[:-1], atol=1e-5)  # contiguous
        assert right[-1] == pytest.approx(finish[r], abs=1e-4)
        assert seg["state"][mine][order][-1] == palette.CLEAN  # every request ends running cleanly


def test_lost_work_ends_where_the_request_is_evicted(traces):
    trace = traces["default"]
    seg = lane_segments(trace)
    preempts = trace.events_of(Event.PREEMPT)
    evicted_at = {(int(r), round(float(trace.pass_start[p]), 4)) for p, r, _ in preempts}
    lost = seg["state"] == palette.LOST
    ends = {(int(y), round(float(t), 4)) for y, t in zip(seg["y"][lost], seg["right"][lost])}
    assert evicted_at <= ends  # every eviction closes an amber stretch
    # ... and the other amber stretches are recomputes that end when the request caught up.
    caught = trace.events_of(Event.CAUGHT_UP)
    caught_at = {(int(r), round(float(trace.pass_end[p]), 4)) for p, r, _ in caught}
    assert ends - evicted_at <= caught_at
    assert lost.sum() == len(preempts) + len(caught)


def test_requests_never_evicted_are_never_amber(traces):
    trace = traces["default"]
    seg = lane_segments(trace)
    clean_requests = np.flatnonzero(trace.preemptions_per_request == 0)
    assert not np.isin(seg["y"][seg["state"] >= palette.LOST], clean_requests).any()


def test_a_request_evicted_again_and_again_is_thrashing(traces):
    trace = traces["per_request"]
    per_request = trace.preemptions_per_request
    assert per_request.max() >= THRASH_PREEMPTIONS
    flagged = is_thrashing(trace)
    assert (flagged[per_request >= THRASH_PREEMPTIONS]).all()
    seg = lane_segments(trace)
    thrashers = set(np.flatnonzero(per_request >= THRASH_PREEMPTIONS).tolist())
    assert set(seg["y"][seg["state"] == palette.THRASH].tolist()) >= thrashers


def test_a_run_that_evicts_its_whole_batch_three_times_over_is_thrashing(traces):
    wall = traces["wall"]
    assert wall.preemptions_per_request.max() < THRASH_PREEMPTIONS  # no single request is evicted 3 times...
    assert wall.summary()["preemptions"] >= THRASH_PREEMPTIONS * wall.summary()["peak_batch"]  # ...the run is
    assert is_thrashing(wall).all()
    default = traces["default"]
    assert not is_thrashing(default).any()


def test_segments_are_sent_as_compact_numeric_columns(traces):
    seg = lane_segments(traces["wall"])
    assert set(seg) == {"y", "left", "right", "state"}  # hover text goes once per request, not per segment
    assert seg["y"].dtype == np.uint16 and seg["state"].dtype == np.uint8
    assert seg["left"].dtype == np.float32 and seg["right"].dtype == np.float32
    rows, times = request_details(traces["wall"]).values()
    n = traces["wall"].workload.num_requests
    assert all(len(v) == n and v.dtype == np.int32 for v in rows.values())  # numbers: the browser formats them
    assert times["t"].dtype == np.int32 and len(times["t"]) == rows["admitted"].sum() + rows["preempted"].sum()


def listed(details: dict, r: int) -> tuple[list[int], list[int]]:
    """Request r's listed admission and eviction times (hundredths of a second)."""
    rows, t = details["rows"], details["times"]["t"]
    admits = min(int(rows["admitted"][r]), MAX_LISTED_TIMES)
    evictions = min(int(rows["preempted"][r]), MAX_LISTED_TIMES)
    start = int(rows["first"][r])
    return t[start:start + admits].tolist(), t[start + admits:start + admits + evictions].tolist()


def test_hover_details_list_admissions_and_evictions(traces):
    trace = traces["default"]
    details = request_details(trace)
    r = int(np.flatnonzero(trace.preemptions_per_request == 2)[0])
    assert details["rows"]["admitted"][r] == 3 and details["rows"]["preempted"][r] == 2  # two readmissions
    admitted, evicted = listed(details, r)
    mine = trace.events[trace.event_request == r]
    for kinds, shown in (((Event.ADMIT, Event.RESUME), admitted), ((Event.PREEMPT,), evicted)):
        passes = mine[np.isin(mine[:, 2], kinds), 0]
        assert shown == [round(float(trace.pass_start[p]) * 100) for p in sorted(passes)]
    never = int(np.flatnonzero(trace.preemptions_per_request == 0)[0])
    assert details["rows"]["preempted"][never] == 0 and listed(details, never)[1] == []


def test_hover_details_of_a_request_evicted_many_times_are_bounded_and_keep_the_count():
    # The 6 MB update: a 1 GiB pool with a small token budget evicts some requests dozens of times.
    trace = simulate(RunConfig(max_num_seqs=64, pool_gib=1.0, spread=32.0, max_num_batched_tokens=1024))
    r = int(np.argmax(trace.preemptions_per_request))
    count = int(trace.preemptions_per_request[r])
    assert count > MAX_LISTED_TIMES
    details = request_details(trace)
    assert details["rows"]["preempted"][r] == count
    evicted_shown = listed(details, r)[1]
    assert len(evicted_shown) == MAX_LISTED_TIMES
    evicted = trace.event_pass[(trace.event_request == r) & (trace.event_kind == Event.PREEMPT)]
    assert evicted_shown[-1] / 100 == pytest.approx(trace.pass_start[evicted].max(), abs=0.006)  # the last one
    assert len(details["times"]["t"]) <= 2 * MAX_LISTED_TIMES * trace.workload.num_requests


def test_thinning_merges_only_what_shares_a_pixel_column_and_keeps_lost_work():
    # Lane 0: 10 s waiting, then 1,000 alternating 1 ms stretches of running and lost work; lane 1: one clean run.
    left = np.r_[0.0, 10.0 + 0.001 * np.arange(1000), 0.0].astype(np.float32)
    right = np.r_[10.0, 10.0 + 0.001 * np.arange(1, 1001), 20.0].astype(np.float32)
    state = np.r_[palette.WAITING, np.tile([palette.CLEAN, palette.LOST], 500), palette.CLEAN].astype(np.uint8)
    y = np.r_[np.zeros(1001), 1].astype(np.uint16)
    seg = {"y": y, "left": left, "right": right, "state": state}
    assert thin_segments(seg, 20.0, max_segments=5000) is seg  # under the limit: untouched
    thin = thin_segments(seg, 20.0, max_segments=100, columns=200)  # one column = 0.1 s
    assert len(thin["y"]) < 100
    lane0 = thin["y"] == 0
    # The waiting stretch and the other lane are as they were; the 1 s of churn is ten lost columns.
    assert (thin["left"][lane0][0], thin["right"][lane0][0], thin["state"][lane0][0]) == (0.0, 10.0, palette.WAITING)
    assert set(thin["state"][lane0][1:].tolist()) == {palette.LOST}
    assert thin["right"][lane0].max() == np.float32(11.0) and lane0.sum() == 11
    assert (thin["left"][~lane0], thin["right"][~lane0]) == (np.float32(0.0), np.float32(20.0))


def test_the_lane_colours_are_defined_once_and_distinct():
    assert len(set(palette.LANE_COLOURS)) == 5 == len(palette.LANE_LABELS)
    assert (palette.GREY, palette.TEAL, palette.AMBER, palette.MAGENTA, palette.LIGHT_TEAL) == palette.LANE_COLOURS
