"""The one place the explorable calls the engine: cached runs shared by every browser session.

A run is a pure function of its `RunConfig`, so sixty students on the same deep link simulate it once.
Traces are kept few (a thrashing trace holds tens of thousands of passes); throughput figures for the
curves are tiny and kept many.
"""
from __future__ import annotations

import math
from functools import lru_cache

from engine import ConfigError, RunConfig, SimulationError, Trace, simulate
from engine.config import check_servable
from engine.workload import WorkloadError

# What a run can raise for a setting the reader chose; anything else is a bug and should surface.
RUN_ERRORS = (ConfigError, SimulationError, WorkloadError)


@lru_cache(maxsize=48)
def run(cfg: RunConfig) -> Trace:
    """The trace of `cfg` on the simulated clock (raises `RUN_ERRORS` for a setting that cannot run)."""
    return simulate(cfg)


@lru_cache(maxsize=8192)
def throughput(cfg: RunConfig) -> float:
    """Output tokens/s of `cfg`, or NaN when the setting cannot run (a gap in a curve, not an error)."""
    try:
        return float(run(cfg).summary()["throughput_tok_s"])
    except RUN_ERRORS:
        return math.nan


def config_problem(cfg_fields: dict) -> str | None:
    """Why these settings cannot run, in the engine's words, or None if they can. Cheap: no simulation."""
    try:
        cfg = RunConfig(**cfg_fields)
        check_servable(cfg, cfg.build_workload())
    except RUN_ERRORS as exc:
        return str(exc)
    return None


def warm() -> None:
    """Load numba's compiled scheduler (about a second in a fresh process) before a reader is waiting."""
    run(RunConfig())


def where_measured(trace: Trace) -> str:
    """Where a measured trace ran, for captions: 'NVIDIA H100 80GB HBM3 (Qwen3-8B shapes, bf16)'."""
    live = trace.live
    device = live.device if live else "a GPU"
    details = f"{live.model_preset} shapes, {live.dtype}" if live else ""
    return f"{device} ({details})" if details else device
