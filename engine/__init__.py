"""The continuous-batching engine: vLLM V1's scheduler on a simulated (or live GPU) clock.

    from engine import RunConfig, simulate
    simulate(RunConfig(max_num_seqs=64)).summary()
"""
from engine.config import ConfigError, RunConfig
from engine.presets import GPUS, MODELS, GPUSpec, ModelSpec
from engine.scheduler import Scheduler, SimulationError, StepOutcome, StepPlan
from engine.simulate import RooflineClock, serve, simulate, simulate_stepwise
from engine.trace import SUMMARY_KEYS, Event, Trace
from engine.workload import Workload, WorkloadError, generate_workload, load_workload, parse_workload

__all__ = [
    "RunConfig", "ConfigError", "simulate", "simulate_stepwise", "serve", "RooflineClock", "SimulationError",
    "Trace", "Event", "SUMMARY_KEYS", "Scheduler", "StepPlan", "StepOutcome", "Workload", "WorkloadError",
    "generate_workload", "load_workload", "parse_workload", "MODELS", "GPUS", "ModelSpec", "GPUSpec",
]
