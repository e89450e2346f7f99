"""simulate()'s compiled fast path is the one loop (serve with the roofline clock), pass for pass and event
for event, on every pinned run: the article's scenarios, the vLLM fixtures and the seeded random configs."""
import json

import numpy as np
import pytest

from engine import RooflineClock, Scheduler, serve, simulate, simulate_stepwise
from tests.engine.golden_runs import TABLE, build

RUNNABLE = [row["config"] for row in json.loads(TABLE.read_text()) if "error" not in row["summary"]]


@pytest.mark.parametrize("spec", RUNNABLE, ids=[f"run{i}" for i in range(len(RUNNABLE))])
def test_compiled_fast_path_equals_the_loop(spec):
    cfg = build(spec)
    whole, stepwise = simulate(cfg), simulate_stepwise(cfg)
    assert stepwise.summary() == whole.summary()
    np.testing.assert_array_equal(stepwise.passes, whole.passes)
    np.testing.assert_array_equal(stepwise.events, whole.events)
    np.testing.assert_array_equal(stepwise.requests, whole.requests)
    np.testing.assert_array_equal(stepwise.pass_duration, whole.pass_duration)


def test_the_loop_hands_the_executor_each_pass_with_its_page_tables():
    cfg = build(RUNNABLE[0]).replace(pool_gib=2.0, requests=64)  # preempts: freed pages are reused
    seen = []

    class Recorder(RooflineClock):
        def execute(self, plan):
            rows = [set(row[:n].tolist()) for row, n in zip(plan.block_tables, plan.num_blocks)]
            assert all(len(r) == n for r, n in zip(rows, plan.num_blocks))
            assert len(set().union(*rows)) == sum(map(len, rows)), "a page belongs to one request"
            assert 0 not in set().union(*rows), "block 0 is the null block"
            np.testing.assert_array_equal(plan.num_blocks, cfg.blocks_for(plan.computed_before + plan.new_tokens))
            seen.append(plan.index)
            return super().execute(plan)

    trace = serve(Scheduler(cfg), Recorder(cfg)).trace()
    assert seen == list(range(trace.num_passes)) and trace.summary()["preemptions"] > 0
    assert trace.digest == simulate(cfg).digest


# The same pinned runs with traffic arriving over time (a rate near each run's own capacity, so queues form
# and drain and the clock jumps over idle gaps): arrivals are added once, in the one loop and its twin alike.
ARRIVING = RUNNABLE[::4]


@pytest.mark.parametrize("spec", ARRIVING, ids=[f"run{4 * i}" for i in range(len(ARRIVING))])
def test_compiled_fast_path_equals_the_loop_with_arrivals(spec):
    base = build(spec)
    capacity = simulate(base).summary()["request_throughput"]
    for rate, burstiness in ((0.3 * capacity, 1.0), (1.5 * capacity, 0.25)):
        cfg = base.replace(arrival="rate", request_rate=float(f"{rate:.3g}"), burstiness=burstiness)
        whole, stepwise = simulate(cfg), simulate_stepwise(cfg)
        assert stepwise.summary() == whole.summary()
        np.testing.assert_array_equal(stepwise.passes, whole.passes)
        np.testing.assert_array_equal(stepwise.events, whole.events)
        np.testing.assert_array_equal(stepwise.pass_start, whole.pass_start)
        np.testing.assert_array_equal(stepwise.pass_duration, whole.pass_duration)
        np.testing.assert_array_equal(stepwise.samples, whole.samples)
        assert (whole.pass_start[1:] >= whole.pass_end[:-1]).all()
