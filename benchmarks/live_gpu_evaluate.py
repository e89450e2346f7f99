"""How well the cost model predicts a live run, and what each kind of pass costs against the roofline.

`score` puts predicted pass times beside measured ones (throughput both ways, and percentiles of the
per-pass relative error); `by_pass_kind` splits a run into decode-only, mixed and prefill-only passes and
sets each group's measured time against the bandwidth/compute roofline. No torch import: the inputs are
the per-pass record a live Trace carries (`trace.live.passes`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from engine.cost_model import roofline
from engine.live.stats import PASS_KINDS, LivePasses

PERCENTILES = (50, 90, 99)


def score(predicted_s: np.ndarray, measured_s: np.ndarray, output_tokens: int) -> dict[str, Any]:
    """Predicted against measured: throughput (output tokens over summed pass times) and the distribution of
    |predicted - measured| / measured over the passes that ran something."""
    pred = np.asarray(predicted_s, dtype=np.float64)
    meas = np.asarray(measured_s, dtype=np.float64)
    ran = meas > 0
    rel = (pred[ran] - meas[ran]) / meas[ran]
    predicted_tok_s = output_tokens / pred.sum() if pred.sum() > 0 else 0.0
    measured_tok_s = output_tokens / meas.sum() if meas.sum() > 0 else 0.0
    out: dict[str, Any] = {
        "predicted_tok_s": predicted_tok_s,
        "measured_tok_s": measured_tok_s,
        "throughput_error_pct": 100 * (predicted_tok_s / measured_tok_s - 1) if measured_tok_s else None,
        "passes_scored": int(ran.sum()),
        "median_signed_pass_error_pct": 100 * float(np.median(rel)) if rel.size else None,
    }
    for q in PERCENTILES:
        out[f"p{q}_pass_error_pct"] = 100 * float(np.percentile(np.abs(rel), q)) if rel.size else None
    return out


def roofline_seconds(pass_bytes: np.ndarray, pass_flops: np.ndarray, bandwidth: float, flops: float) -> np.ndarray:
    """The least time each pass can take: all its bytes at `bandwidth`, or all its FLOPs at `flops`."""
    return roofline(pass_bytes, pass_flops, 0.0, bandwidth, flops)


def by_pass_kind(passes: LivePasses, bandwidth: float, flops: float) -> dict[str, dict[str, Any]]:
    """Per kind of pass: count, CUDA-graph count, GPU and wall seconds, roofline seconds, the share of the
    roofline reached (roofline / GPU time) and the share of the run's GPU time the kind takes."""
    kind = np.asarray(passes.pass_kind)
    gpu = np.asarray(passes.gpu_ms, dtype=np.float64) / 1e3
    wall = np.asarray(passes.wall_ms, dtype=np.float64) / 1e3
    graph = np.asarray(passes.graph_pass, dtype=bool)
    roof = roofline_seconds(passes.pass_bytes, passes.pass_flops, bandwidth, flops)
    total_gpu = gpu.sum()
    out = {}
    for code, name in enumerate(PASS_KINDS):
        mask = kind == code
        if not mask.any() or name == "empty":
            continue
        g, r = float(gpu[mask].sum()), float(roof[mask].sum())
        out[name] = {
            "passes": int(mask.sum()),
            "cuda_graph_passes": int(graph[mask].sum()),
            "gpu_s": g,
            "wall_s": float(wall[mask].sum()),
            "roofline_s": r,
            "pct_of_roofline": 100 * r / g if g > 0 else None,
            "excess_s": g - r,
            "pct_of_gpu_time": 100 * g / total_gpu if total_gpu > 0 else None,
            "host_ms_per_pass": 1e3 * float((wall[mask] - gpu[mask]).mean()),
        }
    return out


def schedule_costs(cfg, spec) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and FLOPs of every pass the scheduler will run for `cfg`, priced with the live model's shapes:
    what `run_live` will record, known before it starts (a benchmark sizes a run against its time budget)."""
    from engine.cost_model import pass_bytes_and_flops
    from engine.scheduler import Scheduler
    from engine.simulate import serve

    costs = []

    class Pricer:  # an executor that only writes down what each pass would move and compute
        def execute(self, plan) -> float:
            costs.append(pass_bytes_and_flops(spec, plan.new_tokens, plan.computed_before))
            return 0.0

        def completed(self, plan, outcome) -> None:
            pass

    serve(Scheduler(cfg), Pricer())
    table = np.asarray(costs, dtype=np.float64).reshape(-1, 2)
    return table[:, 0], table[:, 1]
