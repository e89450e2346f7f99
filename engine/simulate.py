"""simulate(cfg): a whole run on the simulated clock, inside the numba core."""
from __future__ import annotations


from engine.config import ConfigError, RunConfig, check_servable
from engine.cost_model import cost_vector
from engine.scheduler import Scheduler, reserve_tokens, scheduler_params
from engine.trace import Trace, TraceBuilder
from kernels import scheduler_core as core

# Safety cap: progress is guaranteed (the oldest running request can always evict the rest), so this only
# stops a bug from hanging a server thread.
MAX_PASSES = 2_000_000


class SimulationError(RuntimeError):
    """The run did not finish within the pass cap."""


def simulate(cfg: RunConfig) -> Trace:
    """Serve the config's workload to exhaustion on the roofline clock; same config, same bits."""
    workload = cfg.build_workload()
    check_servable(cfg, workload)
    params = scheduler_params(cfg)
    passes, seconds, events, req, state = core.run_to_completion(
        params, cost_vector(cfg.model_spec, cfg.gpu_spec), workload.prompt_len, workload.output_len,
        reserve_tokens(cfg, workload), MAX_PASSES,
    )
    if int(state[core.NUM_FINISHED]) != workload.num_requests:
        raise SimulationError(f"run stopped after {MAX_PASSES:,} passes with requests unfinished")
    digest = f"{int(state[core.DIGEST]) & 0xFFFFFFFFFFFFFFFF:016x}"
    return Trace(cfg, workload, passes, seconds, events, req, digest)


def simulate_stepwise(cfg: RunConfig) -> Trace:
    """The same run driven one `Scheduler.schedule()` at a time, as the live executor drives it."""
    scheduler = Scheduler(cfg)
    cost = cost_vector(cfg.model_spec, cfg.gpu_spec)
    builder = TraceBuilder()
    while not scheduler.finished:
        if scheduler.num_passes >= MAX_PASSES:
            raise SimulationError(f"run stopped after {MAX_PASSES:,} passes with requests unfinished")
        plan = scheduler.schedule()
        seconds = float(core.pass_seconds(cost, plan.new_tokens, plan.computed_before, plan.num_seqs))
        outcome = scheduler.complete(plan)
        builder.add(plan, outcome, seconds)
    return builder.build(scheduler)


__all__ = ["simulate", "simulate_stepwise", "SimulationError", "ConfigError"]
