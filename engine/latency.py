"""Per-request latency as `vllm bench serve` defines it, read off a run's record (nothing here schedules).

A token's time is the end of the pass that sampled it. TTFT: arrival to the first token. E2EL: arrival to
the last. TPOT: (E2EL - TTFT) / (output tokens - 1), for requests with more than one token. ITL: every gap
between a request's consecutive tokens, so a preempted request's stall (evicted, queued, recomputed) is one
long ITL. Summary statistics pool like vLLM's: TTFT/TPOT/E2EL one value per request, ITL every gap.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from kernels import CACHE_COMPILED

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")


@dataclass(frozen=True)
class RequestTiming:
    """Seconds, one entry per request unless noted (NaN where a request has no such value)."""

    arrival: np.ndarray
    first_token: np.ndarray
    last_token: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray  # NaN for a one-token request (vLLM leaves it out of the TPOT figures)
    e2el: np.ndarray
    worst_itl: np.ndarray  # the longest gap between two of its tokens (NaN for one token)
    itl: np.ndarray  # every gap of every request, in the order the later token was produced
    itl_owner: np.ndarray  # the request each `itl` gap belongs to


@njit(cache=CACHE_COMPILED, nogil=True)
def walk_tokens(pass_end, per_pass, sampled, num_requests):
    """One pass over the tokens in the order produced (pass p sampled the next per_pass[p] of `sampled`): each
    request's first and last token time, token count, longest gap, and every gap (with its request)."""
    first = np.full(num_requests, np.nan)
    last = np.full(num_requests, np.nan)
    worst = np.full(num_requests, np.nan)
    count = np.zeros(num_requests, dtype=np.int64)
    n = sampled.shape[0]
    itl = np.empty(max(n - num_requests, 0) + num_requests, dtype=np.float64)
    owner = np.empty(itl.shape[0], dtype=np.int64)
    k = 0
    i = 0
    for p in range(per_pass.shape[0]):
        t = pass_end[p]
        for r in sampled[i:i + per_pass[p]]:
            if count[r] == 0:
                first[r] = t
            else:
                gap = t - last[r]
                itl[k] = gap
                owner[k] = r
                k += 1
                if not gap <= worst[r]:  # NaN (no gap yet) or a longer one
                    worst[r] = gap
            last[r] = t
            count[r] += 1
        i += per_pass[p]
    return first, last, worst, count, itl[:k], owner[:k]


def request_timing(arrival: np.ndarray, pass_end: np.ndarray, per_pass: np.ndarray, sampled: np.ndarray,
                   num_requests: int) -> RequestTiming:
    """Timing of every request from its arrival, the passes' end times, each pass's output token count and the
    request of each output token in the order produced."""
    first, last, worst, counts, itl, owner = walk_tokens(
        np.ascontiguousarray(pass_end, dtype=np.float64), np.ascontiguousarray(per_pass, dtype=np.int64),
        np.ascontiguousarray(sampled, dtype=np.int32), num_requests)
    ttft = first - arrival
    e2el = last - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(counts > 1, (e2el - ttft) / (counts - 1), np.nan)
    return RequestTiming(arrival, first, last, ttft, tpot, e2el, worst, itl, owner)


def _stats(values_s: np.ndarray) -> dict[str, float]:
    """mean and percentiles in ms (vLLM: np.mean / np.percentile, and 0 for an empty list)."""
    ms = values_s[~np.isnan(values_s)] * 1000.0 if values_s.size else values_s
    if ms.size == 0:
        ms = np.zeros(1)
    out = {"mean": float(np.mean(ms))}
    for p, v in zip(PERCENTILES, np.percentile(ms, PERCENTILES)):
        out[f"p{p}"] = float(v)
    return out


def good_requests(timing: RequestTiming, targets_ms: dict[str, float]) -> np.ndarray:
    """Which requests meet every given target (vLLM: value <= target; a one-token request's TPOT is 0)."""
    good = np.isfinite(timing.e2el)
    values = {"ttft": timing.ttft, "tpot": np.nan_to_num(timing.tpot, nan=0.0), "e2el": timing.e2el}
    for name, target in targets_ms.items():
        good &= values[name] * 1000.0 <= target
    return good


def latency_summary(timing: RequestTiming, duration_s: float, targets_ms: dict[str, float]) -> dict[str, Any]:
    """request_throughput, {ttft,tpot,itl,e2el}_ms_{mean,p50,p90,p99} and goodput_req_s (None without
    targets), over a run that lasted `duration_s` (vLLM's benchmark duration: from 0 s to the last token)."""
    done = int(np.isfinite(timing.e2el).sum())
    out: dict[str, Any] = {"request_throughput": done / duration_s if duration_s > 0 else 0.0}
    for name, values in (("ttft", timing.ttft), ("tpot", timing.tpot), ("itl", timing.itl), ("e2el", timing.e2el)):
        for stat, v in _stats(values).items():
            out[f"{name}_ms_{stat}"] = v
    good = int(good_requests(timing, targets_ms).sum()) if targets_ms else None
    out["goodput_req_s"] = None if good is None else (good / duration_s if duration_s > 0 else 0.0)
    return out


LATENCY_KEYS = ("request_throughput", *(f"{m}_ms_{s}" for m in METRICS for s in ("mean", "p50", "p90", "p99")),
                "goodput_req_s")
