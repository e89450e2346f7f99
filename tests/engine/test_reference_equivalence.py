"""The numba core and the plain-Python reference make identical schedules, for random configs and workloads."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Event, RunConfig, Workload, simulate, simulate_stepwise
from engine.reference import ReferenceScheduler
from tests.engine.helpers import cached_runs, small_runs


def _assert_same_schedule(cfg: RunConfig) -> None:
    trace = simulate(cfg)
    ref = ReferenceScheduler(cfg)
    passes = ref.run()
    assert trace.digest == ref.digest_hex
    assert trace.n_seqs.tolist() == [len(p.scheduled) for p in passes]
    assert trace.n_tokens.tolist() == [sum(n for _, n in p.scheduled) for p in passes]
    assert trace.preempted_lists() == [p.preempted for p in passes]
    assert trace.output_per_pass.tolist() == [p.output_tokens for p in passes]
    assert trace.recomputed_per_request.tolist() == [r.recomputed for r in ref.requests]
    assert trace.recomputed_prompt_per_request.tolist() == [r.recomputed_prompt for r in ref.requests]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_runs())
def test_numba_core_matches_reference_on_random_runs(cfg):
    _assert_same_schedule(cfg)


def test_numba_core_matches_reference_on_article_scenarios():
    for cfg in (
        RunConfig(),
        RunConfig(max_num_seqs=64),
        RunConfig(pool_gib=2, max_num_seqs=512),
        RunConfig(max_num_seqs=64, allocation="reserve", unit="request"),
        RunConfig(allocation="reserve", declared_multiple=8),
        RunConfig(scheduler_reserve_full_isl=True),
        RunConfig(spread=1, unit="request"),
    ):
        _assert_same_schedule(cfg)


@settings(max_examples=60, deadline=None)
@given(small_runs())
def test_step_at_a_time_interface_gives_the_whole_run_loop_schedule(cfg):
    whole = simulate(cfg)
    stepwise = simulate_stepwise(cfg)
    assert stepwise.digest == whole.digest
    np.testing.assert_array_equal(stepwise.passes, whole.passes)
    np.testing.assert_array_equal(stepwise.events, whole.events)
    np.testing.assert_array_equal(stepwise.pass_duration, whole.pass_duration)


def test_stepwise_equals_whole_run_on_default_scenario():
    whole, stepwise = simulate(RunConfig()), simulate_stepwise(RunConfig())
    assert whole.summary() == stepwise.summary()


# -- async scheduling (vLLM's AsyncScheduler behind its batch queue of two) ---------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_runs())
def test_numba_core_matches_reference_with_async_scheduling(cfg):
    _assert_same_schedule(cfg.replace(async_scheduling=True))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cached_runs())
def test_numba_core_matches_reference_with_async_scheduling_and_prefix_caching(cfg):
    cfg = cfg.replace(async_scheduling=True)
    _assert_same_schedule(cfg)
    trace, ref = simulate(cfg), ReferenceScheduler(cfg)
    passes = ref.run()
    assert trace.admit_lists() == [[list(a) for a in p.admitted] for p in passes]
    assert trace.cache_hits_per_request.tolist() == [r.cache_hits for r in ref.requests]


@st.composite
def arriving_runs(draw) -> RunConfig:
    """A random tight configuration whose requests arrive over time (sorted random arrival times)."""
    cfg = draw(st.one_of(small_runs(), cached_runs()))
    wl = cfg.build_workload()
    gaps = draw(st.lists(st.floats(0.0, 0.05), min_size=wl.num_requests, max_size=wl.num_requests))
    return cfg.replace(arrival="workload", workload=Workload(
        wl.prompt_len, wl.output_len, np.cumsum(gaps), wl.prefix_group, wl.prefix_len))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arriving_runs(), st.booleans())
def test_numba_core_matches_reference_with_arrivals(cfg, overlap):
    """Arrivals join before the first pass that starts at or after them, in both; the reference takes the
    passes' starts from the core's clock (it keeps none)."""
    cfg = cfg.replace(async_scheduling=overlap)
    trace, ref = simulate(cfg), ReferenceScheduler(cfg)
    passes = ref.run(arrival_s=trace.arrival_s.tolist(), starts=trace.pass_start.tolist())
    assert trace.digest == ref.digest_hex
    assert trace.n_seqs.tolist() == [len(p.scheduled) for p in passes]
    assert trace.preempted_lists() == [p.preempted for p in passes]
    assert trace.output_per_pass.tolist() == [p.output_tokens for p in passes]
    assert all(r.status == "FINISHED" for r in ref.requests)


@settings(max_examples=60, deadline=None)
@given(st.one_of(small_runs(), cached_runs(), arriving_runs()))
def test_step_at_a_time_interface_gives_the_whole_run_loop_schedule_with_async_scheduling(cfg):
    cfg = cfg.replace(async_scheduling=True)
    whole, stepwise = simulate(cfg), simulate_stepwise(cfg)
    assert stepwise.digest == whole.digest
    np.testing.assert_array_equal(stepwise.passes, whole.passes)
    np.testing.assert_array_equal(stepwise.events, whole.events)
    np.testing.assert_array_equal(stepwise.pass_duration, whole.pass_duration)
    np.testing.assert_array_equal(stepwise.pass_start, whole.pass_start)


def test_async_scheduling_frees_a_finished_request_s_blocks_one_pass_later():
    """Request 2 waits for request 0's three blocks while request 1 keeps decoding: with async scheduling it is
    admitted one pass later, as request 0's blocks come back only when its last output is processed, after the
    next pass was scheduled."""
    wl = Workload(np.array([32, 8, 32]), np.array([3, 8, 3]))
    cfg = RunConfig(max_num_seqs=4, block_size=16, num_gpu_blocks_override=5, workload=wl)
    admitted = {}
    for overlap in (False, True):
        trace = simulate(cfg.replace(async_scheduling=overlap))
        admitted[overlap] = [p for p, lst in enumerate(trace.admit_lists()) for r, _ in lst if r == 2]
    assert admitted[False] == [3]  # r0: prefill, then two decodes; its blocks are free for pass 3
    assert admitted[True] == [4]


def test_async_scheduling_hides_the_host_share_of_each_pass():
    """Same schedule shape, each pass shorter by the cost model's host share (engine/cost_model.py)."""
    from engine.cost_model import HOST_SHARE_OF_OVERHEAD

    wl = Workload(np.array([64]), np.array([8]))
    cfg = RunConfig(workload=wl)
    sync, overlap = simulate(cfg), simulate(cfg.replace(async_scheduling=True))
    assert sync.n_tokens.tolist() == overlap.n_tokens.tolist()
    host = HOST_SHARE_OF_OVERHEAD * cfg.gpu_spec.pass_overhead_s
    assert host > 0
    np.testing.assert_allclose(sync.pass_duration - overlap.pass_duration, host, rtol=1e-12)


def test_async_request_preempted_with_its_last_token_in_flight_finishes_in_waiting():
    """A request whose last token is in flight can still be the newest running one and be evicted: it keeps the
    token when that pass's output comes back and finishes from waiting, never readmitted (vLLM removes it from
    waiting). Its finish (in the pass in flight) then precedes its preemption (in the pass scheduled next)."""
    wl = Workload(np.array([14, 23, 6, 34, 18, 35]), np.array([4, 4, 2, 4, 1, 3]))
    cfg = RunConfig(max_num_seqs=8, max_num_batched_tokens=64, block_size=4, num_gpu_blocks_override=13,
                    async_scheduling=True, workload=wl)
    _assert_same_schedule(cfg)
    trace = simulate(cfg)
    ev = trace.events[:, :3].tolist()
    finished_then_preempted = [r for p, r, k in ev if k == Event.PREEMPT and
                               any(r2 == r and k2 == Event.FINISH and p2 < p for p2, r2, k2 in ev)]
    assert finished_then_preempted
    assert not [r for p, r, k in ev if k == Event.RESUME and r in finished_then_preempted]
