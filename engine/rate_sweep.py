"""Throughput and latency against request rate for one configuration: the knee curve.

Points run side by side in threads: the compiled run releases the GIL (numba `nogil`), so a sweep takes
about as long as its slowest points divided by the cores. The default rates span light traffic to well
past what the configuration can serve (its all-at-once request throughput), evenly on a log scale.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from engine.config import RunConfig
from engine.simulate import simulate

NUM_POINTS = 12
SPAN = (0.25, 2.5)  # lowest and highest rate, as multiples of the all-at-once request throughput


def capacity(cfg: RunConfig) -> float:
    """Requests per second the configuration serves when every request is already queued."""
    return simulate(cfg.replace(arrival="all-at-once", goodput=None)).summary()["request_throughput"]


def default_rates(cfg: RunConfig, points: int = NUM_POINTS) -> tuple[float, ...]:
    """`points` request rates from light traffic to overload, 3 significant digits each."""
    cap = capacity(cfg)
    raw = np.geomspace(SPAN[0] * cap, SPAN[1] * cap, points)
    return tuple(float(f"{r:.3g}") for r in raw)


def sweep_rates(cfg: RunConfig, rates: tuple[float, ...] | None = None, workers: int | None = None
                ) -> list[dict[str, Any]]:
    """The summary of `cfg` at each request rate (arrival="rate"), in the order of `rates`."""
    rates = default_rates(cfg) if rates is None else rates
    configs = [cfg.replace(arrival="rate", request_rate=r) for r in rates]
    workers = workers or min(len(configs), os.cpu_count() or 1)
    if workers <= 1:
        return [{"request_rate": c.request_rate, **simulate(c).summary()} for c in configs]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda c: {"request_rate": c.request_rate, **simulate(c).summary()}, configs))
