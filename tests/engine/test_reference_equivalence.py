"""The numba core and the plain-Python reference make identical schedules, for random configs and workloads."""
import numpy as np
from hypothesis import HealthCheck, given, settings

from engine import RunConfig, simulate, simulate_stepwise
from engine.reference import ReferenceScheduler
from tests.engine.helpers import small_runs


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
