"""The one place the explorable calls the engine: cached runs shared by every browser session.

A run is a pure function of its `RunConfig`, so sixty students on the same deep link simulate it once, and
the server snaps every slider to its step (explorable.server.guard), so the states a class can ask for are finite
and repeat. The caches are bounded by memory, not only by count: a thrashing trace holds tens of thousands
of passes (MBs), a throughput figure for the curves a float.

On a server, explorable.server.budget installs `meter` here (this module stays free of Panel): the CPU time of
the wall time of each simulation (a cache miss) is charged to the page that asked for it.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from engine import ConfigError, RunConfig, SimulationError, Trace, simulate
from engine.config import check_servable
from engine.rate_sweep import NUM_POINTS as RATE_CURVE_POINTS, default_rates, sweep_rates
from engine.workload import WorkloadError
from explorable.state.bounded_cache import BoundedCache

# What a run can raise for a setting the reader chose; anything else is a bug and should surface.
RUN_ERRORS = (ConfigError, SimulationError, WorkloadError)

# Traces kept for every session together. A default run's trace is ~0.2 MB, a thrashing one ~1-5 MB: 160 MB
# holds a class's worth of states (the 7 guided steps and their neighbours many times over).
TRACE_CACHE_BYTES = 160 * 2**20
TRACE_CACHE_ITEMS = 256
THROUGHPUT_CACHE_ITEMS = 16384  # one float and its RunConfig (~1 kB) each: ~16 MB at most
RATE_CURVE_CACHE_ITEMS = 128  # twelve rates' figures each (a few kB)

# Installed by explorable.server.budget on a server; None elsewhere (tests, notebooks). `background_meter` takes the
# simulations a worker thread ran for the page (`collecting`), reported from the page's thread.
meter: Callable[[float], None] | None = None
background_meter: Callable[[float], None] | None = None


def trace_bytes(trace: Trace) -> int:
    """Memory a cached trace holds (its arrays; the rest is small)."""
    return sum(v.nbytes for v in vars(trace).values() if isinstance(v, np.ndarray)) + 4096


_TRACES = BoundedCache(TRACE_CACHE_BYTES, TRACE_CACHE_ITEMS, trace_bytes)


_sim_seconds = [0.004, 1]  # mean wall time of a simulation here: sum, count (a prior of 4 ms, one run)
_sim_lock = threading.Lock()
_collect = threading.local()  # on a worker thread (explorable.state.background): simulation time to report later

T = TypeVar("T")


def _simulate_metered(cfg: RunConfig) -> Trace:
    started = time.perf_counter()  # wall time: how long the event loop, and every other page, waited
    try:
        return simulate(cfg)
    finally:
        spent = time.perf_counter() - started
        with _sim_lock:
            _sim_seconds[0] += spent
            _sim_seconds[1] += 1
        collected = getattr(_collect, "seconds", None)
        if collected is not None:
            _collect.seconds = collected + spent
        elif meter is not None:
            meter(spent)


def collecting(work: Callable[[], T]) -> tuple[T, float]:
    """`work()` and the wall time of the simulations it ran, not reported to `meter` (which belongs to the
    event loop's thread): a worker thread hands the figure to the page's thread, which reports it."""
    _collect.seconds = 0.0
    try:
        return work(), _collect.seconds
    finally:
        _collect.seconds = None


def mean_simulation_s() -> float:
    """Mean wall time of one simulation in this process so far (for estimating what a change will cost)."""
    return _sim_seconds[0] / _sim_seconds[1]


def run(cfg: RunConfig) -> Trace:
    """The trace of `cfg` on the simulated clock (raises `RUN_ERRORS` for a setting that cannot run)."""
    trace = run_if_cached(cfg)
    if trace is None:
        trace = _simulate_metered(cfg)
        _TRACES.put(cfg, trace)
    return trace


def run_if_cached(cfg: RunConfig) -> Trace | None:
    """The kept trace of `cfg`, or None (no simulation)."""
    return _TRACES.get(cfg)[1]


run.cache_clear = _TRACES.clear  # type: ignore[attr-defined]  (functools.lru_cache's names, kept for callers)
run.cache_info = _TRACES.info  # type: ignore[attr-defined]


def is_cached(cfg: RunConfig) -> bool:
    """Is the trace of `cfg` kept (showing it costs no simulation)?"""
    return cfg in _TRACES


# Curve points: throughput by config. Bounded by count alone (a float and its RunConfig, ~1 kB each).
_POINTS = BoundedCache(max_bytes=1 << 62, max_items=THROUGHPUT_CACHE_ITEMS, size_of=lambda _figure: 0)


def throughput(cfg: RunConfig) -> float:
    """Output tokens/s of `cfg`, or NaN when the setting cannot run (a gap in a curve, not an error)."""
    found, value = _POINTS.get(cfg)
    if found:
        return value
    try:
        trace = run_if_cached(cfg) or _simulate_metered(cfg)  # a curve point's trace is not kept: only its figure
        # The throughput alone: the whole summary's latency percentiles (milliseconds of Python holding the
        # GIL) would slow the event loop while the curves' points run on the worker thread.
        value = float(trace.throughput_tok_s)
    except RUN_ERRORS:
        value = math.nan
    _POINTS.put(cfg, value)
    return value


def has_throughput(cfg: RunConfig) -> bool:
    """Is the throughput of `cfg` known (a curve point that costs no simulation)?"""
    return cfg in _POINTS or cfg in _TRACES


throughput.cache_clear = _POINTS.clear  # type: ignore[attr-defined]


# The request-rate curve (the knee): twelve rates' figures by the config they sweep around.
_RATE_CURVES = BoundedCache(max_bytes=1 << 62, max_items=RATE_CURVE_CACHE_ITEMS, size_of=lambda _curve: 0)


def rate_curve_key(cfg: RunConfig) -> RunConfig:
    """The curve does not depend on the rate it marks, nor on how the run on screen arrives."""
    return cfg.replace(arrival="rate", request_rate=RunConfig().request_rate, goodput=None)


def rate_curve(cfg: RunConfig) -> dict[str, np.ndarray]:
    """rate, req/s served, output tok/s, p99 TTFT and p99 TPOT (ms) at twelve rates around `cfg`'s knee
    (engine.rate_sweep); kept for every session."""
    key = rate_curve_key(cfg)
    found, data = _RATE_CURVES.get(key)
    if found:
        return data
    rows = sweep_rates(key, default_rates(key))
    data = {name: np.array([r[col] for r in rows], dtype=np.float64) for name, col in (
        ("rate", "request_rate"), ("served", "request_throughput"), ("tok_s", "throughput_tok_s"),
        ("ttft", "ttft_ms_p99"), ("tpot", "tpot_ms_p99"))}
    _RATE_CURVES.put(key, data)
    return data


def has_rate_curve(cfg: RunConfig) -> bool:
    """Is the request-rate curve around `cfg` known (drawing it costs no simulation)?"""
    return rate_curve_key(cfg) in _RATE_CURVES


rate_curve.cache_clear = _RATE_CURVES.clear  # type: ignore[attr-defined]


def config_problem(cfg_fields: dict) -> str | None:
    """Why these settings cannot run, in the engine's words, or None if they can. Cheap: no simulation."""
    try:
        cfg = RunConfig(**cfg_fields)
        check_servable(cfg, cfg.build_workload())
    except RUN_ERRORS as exc:
        return str(exc)
    return None


def warm() -> None:
    """Load numba's compiled code (about a second in a fresh process) before a reader is waiting: the scheduler
    core, and the request timings the default page's lanes read."""
    run(RunConfig()).timing()


def where_measured(trace: Trace) -> str:
    """Where a measured trace ran, for captions: 'NVIDIA H100 80GB HBM3 (Qwen3-8B shapes, bf16)'."""
    live = trace.live
    device = live.device if live else "a GPU"
    details = f"{live.model_preset} shapes, {live.dtype}" if live else ""
    return f"{device} ({details})" if details else device
