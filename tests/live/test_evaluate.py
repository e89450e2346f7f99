"""Scoring predictions against a live run, pass kinds, and the schedule's costs known before a run."""
import numpy as np
import pytest

from benchmarks.live_gpu_evaluate import by_pass_kind, roofline_seconds, schedule_costs, score
from engine import cost_model
from engine.cost_model import pass_seconds
from engine.live.stats import PASS_KINDS, LivePasses, pass_kind
from engine.presets import GPUS, MODELS
from tests.live.helpers import tight_config


def test_pass_kind_follows_the_runner_one_token_rows_are_decodes():
    assert PASS_KINDS[pass_kind(np.array([1, 1, 1]))] == "decode"
    assert PASS_KINDS[pass_kind(np.array([1, 40]))] == "mixed"
    assert PASS_KINDS[pass_kind(np.array([16, 40]))] == "prefill"
    assert PASS_KINDS[pass_kind(np.array([], dtype=np.int64))] == "empty"


def test_score_reports_throughput_both_ways_and_pass_error_percentiles():
    measured = np.array([1.0, 2.0, 4.0, 0.0, 1.0])  # a pass that ran nothing is not scored
    predicted = np.array([1.1, 2.0, 3.0, 0.5, 1.0])
    s = score(predicted, measured, output_tokens=80)
    assert s["measured_tok_s"] == 10.0 and s["predicted_tok_s"] == pytest.approx(80 / 7.6)
    assert s["throughput_error_pct"] == pytest.approx(100 * (8 / 7.6 - 1))
    assert s["passes_scored"] == 4
    errors = np.array([10.0, 0.0, 25.0, 0.0])
    assert s["p50_pass_error_pct"] == pytest.approx(np.percentile(errors, 50))
    assert s["p90_pass_error_pct"] == pytest.approx(np.percentile(errors, 90))
    assert s["median_signed_pass_error_pct"] == pytest.approx(np.median([10.0, 0.0, -25.0, 0.0]))


def test_pass_kinds_split_the_run_and_meet_the_roofline():
    passes = LivePasses(
        pass_kind=np.array([0, 0, 1, 2, 3], dtype=np.int8),
        gpu_ms=np.array([2.0, 2.0, 8.0, 10.0, 0.0]),
        wall_ms=np.array([3.0, 2.5, 9.0, 10.5, 0.1]),
        runner_wall_ms=np.array([2.5, 2.2, 8.5, 10.2, 0.0]),
        graph_pass=np.array([True, True, False, False, False]),
        predicted_ms=np.zeros(5),
        pass_bytes=np.array([2e9, 2e9, 2e9, 2e9, 0.0]),
        pass_flops=np.array([1e9, 1e9, 1e9, 8e12, 0.0]),
    )
    kinds = by_pass_kind(passes, bandwidth=1e12, flops=1e15)
    assert list(kinds) == ["decode", "mixed", "prefill"]  # the empty pass is left out
    assert kinds["decode"]["passes"] == 2 and kinds["decode"]["cuda_graph_passes"] == 2
    assert kinds["decode"]["pct_of_roofline"] == pytest.approx(100.0)  # 2 GB at 1 TB/s = 2 ms
    assert kinds["mixed"]["pct_of_roofline"] == pytest.approx(25.0)
    assert kinds["mixed"]["excess_s"] == pytest.approx(6e-3)
    assert kinds["prefill"]["roofline_s"] == pytest.approx(8e-3)  # compute-bound: 8 TFLOP at 1 PFLOP/s
    assert kinds["decode"]["host_ms_per_pass"] == pytest.approx(0.75)
    assert sum(k["pct_of_gpu_time"] for k in kinds.values()) == pytest.approx(100.0)
    assert roofline_seconds([1e12], [2e15], 1e12, 1e15)[0] == 2.0


def test_schedule_costs_price_the_passes_the_simulator_runs():
    cfg = tight_config()
    spec, gpu = MODELS["tiny"], GPUS["H100 SXM"]
    pass_bytes, pass_flops = schedule_costs(cfg, spec)
    from engine.scheduler import Scheduler

    scheduler, expected = Scheduler(cfg), []
    while not scheduler.finished:
        plan = scheduler.schedule()
        expected.append(pass_seconds(spec, gpu, plan.new_tokens, plan.computed_before))
        scheduler.complete(plan, expected[-1])
    assert np.allclose(cost_model.roofline_seconds(pass_bytes, pass_flops, gpu), expected, rtol=1e-12)


def test_a_live_run_records_both_clocks_and_every_pass_kind():
    from engine.live.calibrate import calibrate_from_trace
    from engine.live.executor import run_live

    trace = run_live(tight_config(), model_preset="tiny", device="cpu")
    stats, passes = trace.live, trace.live.passes
    n = trace.num_passes
    assert all(len(getattr(passes, k)) == n for k in ("gpu_ms", "wall_ms", "runner_wall_ms", "pass_kind", "graph_pass"))
    # Each pass's loop time holds its runner time, which on a CPU is its measured time.
    assert np.all(passes.wall_ms >= passes.runner_wall_ms) and np.all(passes.runner_wall_ms >= passes.gpu_ms)
    assert stats.wall_tok_s <= stats.measured_tok_s
    assert stats.host_ms_per_pass == pytest.approx((passes.wall_ms.sum() - passes.gpu_ms.sum()) / n)
    assert set(np.unique(passes.pass_kind)) >= {0, 1}
    wall = calibrate_from_trace(trace, clock="wall")
    assert wall.extra["clock"] == "wall" and wall.name.endswith("(measured, wall clock)")
