"""Traffic as `vllm bench serve` makes it: request arrival times at a rate, and the SLO targets of --goodput.

Arrivals: each request's gap before it is gamma-distributed with shape = burstiness and scale =
1 / (rate x burstiness) (mean 1 / rate; burstiness 1 is a Poisson process, lower is burstier). The gaps are
summed and, as vLLM does, scaled so the last request arrives at exactly requests / rate, which keeps the
offered load the same across seeds.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from engine.settings import ConfigError

SLO_METRICS = ("ttft", "tpot", "e2el")  # vLLM's --goodput keys, in ms
ARRIVAL_STREAM = 0x7A11C  # a second seed word: arrival draws never disturb the workload's own stream


@lru_cache(maxsize=256)
def _gamma_arrivals(num_requests: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, ARRIVAL_STREAM])
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=num_requests)
    times = np.cumsum(gaps)
    if times[-1] > 0:
        times = times * ((num_requests / rate) / times[-1])
    times.setflags(write=False)
    return times


def gamma_arrivals(num_requests: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """Arrival times (s, nondecreasing) of `num_requests` requests; same arguments, same bits."""
    return _gamma_arrivals(int(num_requests), float(rate), float(burstiness), int(seed))


def parse_goodput(text: str) -> dict[str, float]:
    """'ttft:500 tpot:50' (vLLM's --goodput; commas also separate) -> {'ttft': 500.0, 'tpot': 50.0}."""
    targets: dict[str, float] = {}
    for item in text.replace(",", " ").split():
        name, sep, value = item.partition(":")
        name = name.strip().lower()
        if not sep or name not in SLO_METRICS:
            raise ConfigError(f"goodput: {item[:40]!r} is not NAME:MS with NAME one of {', '.join(SLO_METRICS)}")
        try:
            ms = float(value)
        except ValueError:
            ms = float("nan")
        if not np.isfinite(ms) or ms < 0:
            raise ConfigError(f"goodput: {item[:40]!r}: the target must be a number of milliseconds >= 0")
        if name in targets:
            raise ConfigError(f"goodput: {name} is given twice")
        targets[name] = ms
    if not targets:
        raise ConfigError("goodput: give at least one target, e.g. ttft:500 tpot:50")
    return targets


def format_goodput(targets: dict[str, float]) -> str | None:
    """The canonical --goodput text of `targets` (None when there are none)."""
    return " ".join(f"{k}:{targets[k]:g}" for k in SLO_METRICS if k in targets) or None
