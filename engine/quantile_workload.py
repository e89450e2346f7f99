"""The two-number workload: requests whose lengths follow a log-normal through a p50 and a p99 someone measured.

The course's first measurement is p50 and p99 of completion_tokens over a day of responses; their ratio says
whether iteration-level scheduling matters for that traffic. A log-normal is fixed by two quantiles: its median
is p50 and its sigma is ln(p99 / p50) / z(0.99), z being the standard normal's quantile (2.326). The n lengths
are that distribution's quantiles at i / (n - 1), the positions numpy's percentile reads a sorted sample at (the
two ends pulled in by half a step, where the quantile is infinite), rounded to whole tokens and dealt out in an
order the seed shuffles (as the calibration workload deals its own, engine/workload.py). So the same numbers
and seed give the same requests, and the sample's own p50 and p99 are the numbers typed, not a random draw's.
"""
from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from engine.workload import MAX_REQUEST_TOKENS, Workload, WorkloadError, generate_workload

Z99 = NormalDist().inv_cdf(0.99)  # 2.3263...: how many sigmas p99 lies above the median


def lognormal_sigma(p50: float, p99: float) -> float:
    """The sigma of the log-normal whose median is p50 and 99th percentile p99."""
    return math.log(p99 / p50) / Z99


def lognormal_lengths(n: int, p50: int, p99: int) -> np.ndarray:
    """n token counts at the log-normal's stratified quantiles, shortest first (each in 1..MAX_REQUEST_TOKENS)."""
    if not 1 <= p50 <= p99:
        raise WorkloadError(f"p99 must be at least p50 (both at least 1 token); got p50 {p50:,} and p99 {p99:,}")
    inv = NormalDist().inv_cdf
    sigma = lognormal_sigma(p50, p99)
    half_step = 0.5 / n
    z = np.array([inv(min(max(i / (n - 1) if n > 1 else 0.5, half_step), 1 - half_step)) for i in range(n)])
    return np.clip(np.rint(p50 * np.exp(sigma * z)), 1, MAX_REQUEST_TOKENS).astype(np.int64)


def two_number_workload(requests: int, seed: int, output_p50: int, output_p99: int, prompt_p50: int | None = None,
                        prompt_p99: int | None = None) -> Workload:
    """`requests` requests, all queued at once, whose output lengths follow the log-normal through
    (output_p50, output_p99) and prompt lengths through (prompt_p50, prompt_p99), or, without those, the
    calibration workload's prompts for the same seed."""
    rng = np.random.default_rng([seed, 2])  # (not the calibration's stream: its prompts stay its own)
    output = lognormal_lengths(requests, output_p50, output_p99)[rng.permutation(requests)]
    if prompt_p50 is None:
        prompt = generate_workload(requests, 16.0, seed).prompt_len.copy()
    else:
        prompt = lognormal_lengths(requests, prompt_p50, prompt_p99)[rng.permutation(requests)]
    return Workload(prompt, output)


def p99_over_p50(lengths: np.ndarray) -> tuple[float, float, float]:
    """(p50, p99, p99 / p50) of a sample, as numpy's default percentile interpolates them."""
    p50, p99 = (float(v) for v in np.percentile(lengths, [50, 99]))
    return p50, p99, p99 / p50 if p50 > 0 else math.inf
