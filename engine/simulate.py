"""The one loop, schedule -> execute -> complete, with the clock plugged in; and simulate(), its compiled twin.

`serve(scheduler, executor)` runs every pass of a run: the roofline clock (`RooflineClock`) makes it a
simulation, the live executor (engine.live) makes it a measured run on a GPU. `simulate(cfg)` is the same
loop with the roofline clock, compiled whole inside the numba core for speed (and counting blocks without
naming them, as nobody reads page tables there); tests/engine/test_one_loop.py proves the two equal.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from engine.config import ConfigError, RunConfig, check_servable, served_requests
from engine.cost_model import plan_seconds, run_cost_vector
from engine.scheduler import MAX_PASSES, Scheduler, SimulationError, StepOutcome, StepPlan, reserve_tokens, \
    scheduler_params, trace_from_tables
from engine.prefix_tree import content_chains
from engine.trace import Trace
from engine.workload import Workload
from kernels import scheduler_core as core


class Executor(Protocol):
    def execute(self, plan: StepPlan) -> float:
        """Run the pass; return how long it took (on whatever clock this executor keeps)."""

    def completed(self, plan: StepPlan, outcome: StepOutcome) -> None:
        """The scheduler has sampled, finished and freed after the pass (raise here to stop the run)."""

    # Optional: `wait(seconds)`, called when the server idles until the next arrival (a real clock sleeps;
    # an executor without it is a simulated clock, which just jumps).


class RooflineClock:
    """The simulated executor: a pass takes what the cost model says and computes nothing."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cost = run_cost_vector(cfg)
        self.overlapped = cfg.async_scheduling  # the host's share of each pass hidden behind the last one

    def execute(self, plan: StepPlan) -> float:
        return plan_seconds(self.cost, plan, self.overlapped)

    def completed(self, plan: StepPlan, outcome: StepOutcome) -> None:
        pass


def serve(scheduler: Scheduler, executor: Executor) -> Scheduler:
    """Run passes until every request has finished: let in arrivals, schedule, execute on the executor's
    clock, complete. The clock is the sum of the passes' durations plus the idle gaps waited out.

    With async scheduling the order is EngineCore.step_with_batch_queue's with a queue of two: schedule pass p,
    run it, then process pass p - 1's output; a schedule that finds nothing to run while a pass is in flight
    is no pass: it only lets that pass's output be processed (as core.run_to_completion does)."""
    wait = getattr(executor, "wait", None)
    overlap = scheduler.config.async_scheduling
    in_flight: StepPlan | None = None
    while not scheduler.finished:
        if scheduler.num_scheduled >= MAX_PASSES:
            raise SimulationError(f"run stopped after {MAX_PASSES:,} passes with requests unfinished")
        now = scheduler.now
        start = scheduler.add_arrivals(now)
        if start > now and wait is not None:
            wait(start - now)
        plan = scheduler.schedule()
        if not overlap:
            executor.completed(plan, scheduler.complete(plan, executor.execute(plan)))
            continue
        empty = in_flight is not None and plan.num_seqs == 0 and not len(plan.preempted)
        if empty:
            scheduler.discard(plan)
        else:
            scheduler.ran(plan, executor.execute(plan))
        if in_flight is not None:
            executor.completed(in_flight, scheduler.complete(in_flight, None))
        in_flight = None if empty else plan
    return scheduler


def simulate(cfg: RunConfig) -> Trace:
    """Serve the config's workload to exhaustion on the roofline clock; same config, same bits."""
    workload, arrivals, arguments, refused = core_arguments(cfg)
    passes, seconds, events, tables, starts, sampled = core.run_to_completion(*arguments)
    return trace_from_tables(cfg, workload, passes, seconds, events, tables, starts, sampled, arrivals,
                             refused_requests=refused)


def core_arguments(cfg: RunConfig) -> tuple[Workload, np.ndarray, tuple, int]:
    """The workload the scheduler serves (refused requests left out), its arrival times, the arguments
    simulate() gives the compiled core (`core.run_to_completion`), and how many requests vLLM refused; raises
    ConfigError for a config that cannot be served."""
    requested = cfg.build_workload()
    check_servable(cfg, requested)
    workload, arrivals, refused = served_requests(cfg, requested)
    return workload, arrivals, (
        scheduler_params(cfg, block_ids=False), run_cost_vector(cfg), workload.prompt_len,
        workload.output_len, reserve_tokens(cfg, workload), MAX_PASSES, arrivals,
        *content_chains(workload, cfg.block_size),
    ), refused


def simulate_stepwise(cfg: RunConfig) -> Trace:
    """The same run through `serve`, one pass at a time, as the live executor drives it."""
    return serve(Scheduler(cfg), RooflineClock(cfg)).trace()


__all__ = ["simulate", "simulate_stepwise", "serve", "RooflineClock", "SimulationError", "ConfigError"]
