"""Fit the cost model's GPU constants to measured pass times, and save them as a GPU preset.

The model is the simulator's: t = overhead + max(bytes / bandwidth, FLOPs / FLOP/s). With the ridge
point I = FLOP/s / bandwidth fixed, t = overhead + max(bytes, FLOPs / I) / bandwidth is linear in
(overhead, 1 / bandwidth), so we scan I on a log grid (then a finer one around the best), solve a
weighted least squares with overhead >= 0 at each point, and keep the best. Residuals are relative
(weights 1/t^2), so 1 ms decode passes count as much as 100 ms prefill passes. When no pass is
compute-bound (or none memory-bound) the data cannot pin the ridge: the fit then keeps the prior
GPU's ridge, which changes nothing that was measured.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.cost_model import roofline
from engine.live.errors import LiveError
from engine.outputs import write_text_atomic
from engine.presets import GPUSpec, gpu_preset_for_device, register_gpu

_RIDGE_RANGE = (1e-1, 1e6)  # FLOP per byte; every real GPU sits well inside
_FLAT = 1e-9  # relative loss difference treated as a tie


@dataclass(frozen=True)
class Fit:
    overhead_s: float
    bandwidth: float
    flops: float
    rms_rel_error: float
    num_passes: int
    memory_bound_passes: int


def _solve(x: np.ndarray, t: np.ndarray, w: np.ndarray) -> tuple[float, float, float]:
    """Weighted least squares t ~ o + a x with o >= 0; returns (loss, o, a)."""
    sw, swx, swt = w.sum(), (w * x).sum(), (w * t).sum()
    swxx, swxt = (w * x * x).sum(), (w * x * t).sum()
    det = sw * swxx - swx * swx
    o = (swxx * swt - swx * swxt) / det if det > 0 else -1.0
    a = (sw * swxt - swx * swt) / det if det > 0 else 0.0
    if o < 0 or a <= 0:
        o, a = 0.0, swxt / swxx
    r = o + a * x - t
    return float((w * r * r).sum()), float(o), float(a)


def fit_pass_times(pass_bytes, pass_flops, seconds, prior: GPUSpec) -> Fit:
    """Least-squares (overhead, bandwidth, FLOP/s) for measured passes; `prior` breaks ties on the ridge."""
    b = np.asarray(pass_bytes, dtype=np.float64)
    f = np.asarray(pass_flops, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    keep = (t > 0) & (b > 0)
    b, f, t = b[keep], f[keep], t[keep]
    if t.size < 3:
        raise LiveError(f"calibration needs at least 3 timed passes, got {t.size}")
    w = 1.0 / (t * t)
    prior_ridge = prior.effective_flops / prior.effective_bandwidth

    def loss_at(ridge: float) -> tuple[float, float, float]:
        return _solve(np.maximum(b, f / ridge), t, w)

    grid = np.unique(np.append(np.geomspace(*_RIDGE_RANGE, 481), prior_ridge))
    losses = np.array([loss_at(r)[0] for r in grid])
    best = int(np.argmin(losses))
    # Refine between the best point's neighbours.
    lo, hi = grid[max(0, best - 1)], grid[min(len(grid) - 1, best + 1)]
    fine = np.geomspace(lo, hi, 201)
    fine_losses = np.array([loss_at(r)[0] for r in fine])
    grid = np.concatenate([grid, fine])
    losses = np.concatenate([losses, fine_losses])
    floor = losses.min()
    ties = grid[losses <= floor * (1 + _FLAT) + 1e-300]
    ridge = float(ties[np.argmin(np.abs(np.log(ties / prior_ridge)))])
    _, overhead, inv_bw = loss_at(ridge)
    bandwidth = 1.0 / inv_bw
    flops = ridge * bandwidth
    pred = roofline(b, f, overhead, bandwidth, flops)
    rel = (pred - t) / t
    return Fit(overhead, bandwidth, flops, float(np.sqrt(np.mean(rel * rel))), int(t.size),
               int((b / bandwidth >= f / flops).sum()))


# Which per-pass times a fit reads: GPU time (CUDA events) or the serve loop's wall time per pass
# (fields of LivePasses).
CLOCKS = {"gpu": "gpu_ms", "wall": "wall_ms"}


def calibrate_from_trace(trace, name: str | None = None, clock: str = "gpu") -> GPUSpec:
    """A GPU preset fitted to a live run's passes (trace.live carries per-pass bytes, FLOPs and times).

    clock="wall" fits the whole host loop per pass (scheduling, staging, sync included): the preset then
    predicts what a user waits, not just what the GPU spends.
    """
    if clock not in CLOCKS:
        raise LiveError(f"clock must be one of {', '.join(CLOCKS)}; got {clock!r}")
    live = trace.live
    if live is None:
        raise LiveError("the trace has no live measurements: calibrate needs a live run's trace")
    device = live.device
    base = gpu_preset_for_device(device) or trace.config.gpu_spec  # the device's datasheet preset
    seconds = np.asarray(getattr(live.passes, CLOCKS[clock])) / 1e3
    fit = fit_pass_times(live.passes.pass_bytes, live.passes.pass_flops, seconds, base)
    label = name or f"{device.removeprefix('NVIDIA ').strip()} (measured{', wall clock' if clock == 'wall' else ''})"
    spec = live.live_spec
    return GPUSpec(
        name=label,
        memory_gib=base.memory_gib,
        datasheet_bandwidth=base.datasheet_bandwidth,
        datasheet_flops=base.datasheet_flops,
        effective_bandwidth=fit.bandwidth,
        effective_flops=fit.flops,
        pass_overhead_s=fit.overhead_s,
        provenance=(f"fitted to {fit.num_passes} live passes ({fit.memory_bound_passes} memory-bound, {clock} "
                    f"clock) of {spec.name} {live.dtype} on {device}; rms relative "
                    f"error {100 * fit.rms_rel_error:.1f}%; datasheet figures from the {base.name} preset"),
        extra={"rms_rel_error": fit.rms_rel_error, "passes": fit.num_passes,
               "memory_bound_passes": fit.memory_bound_passes, "clock": clock,
               # the measured start-up memory terms (engine/memory.py reads them in place of its estimates)
               **({"memory": live.memory} if live.memory else {})},
        total_memory_gib=live.memory["total_memory"] / 2**30 if live.memory else base.total_memory_gib,
        nvlink_bandwidth=base.nvlink_bandwidth, nvlink_gpus=base.nvlink_gpus, gpus_per_node=base.gpus_per_node,
    )


def save_gpu_spec(spec: GPUSpec, path: str | Path) -> None:
    write_text_atomic(path, json.dumps(asdict(spec), indent=2) + "\n")


_MEMORY_TERMS = ("total_memory", "weights_memory", "activation_peak", "non_torch_memory", "max_num_batched_tokens")


def _memory_terms_ok(memory: Any) -> bool:
    """A measured memory profile engine/memory.py can read: a model name and finite byte counts >= 0."""
    def count(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v < 2**50
    return (isinstance(memory, dict) and isinstance(memory.get("model"), str)
            and all(count(memory.get(k)) for k in _MEMORY_TERMS) and memory["max_num_batched_tokens"] > 0
            and count(memory.get("cuda_graph_memory", 0)))


def _links(data: dict, path: str | Path) -> dict[str, Any]:
    """The optional fields a newer preset carries (reported total memory, NVLink), checked; absent: defaults."""
    out: dict[str, Any] = {}
    for name, kind in (("total_memory_gib", float), ("nvlink_bandwidth", float), ("nvlink_gpus", int),
                       ("gpus_per_node", int)):
        if name not in data:
            continue
        v = data[name]
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 and (
            kind is float or (float(v).is_integer() and 1 <= v <= 1024))
        if not ok:
            raise LiveError(f"GPU preset {path}: {name} must be a {'count' if kind is int else 'number'} >= 0")
        out[name] = kind(v)
    return out


def load_gpu_spec(path: str | Path, register: bool = True) -> GPUSpec:
    """Read a saved calibration; by default also register it so `RunConfig(gpu=spec.name)` works."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise LiveError(f"cannot read GPU preset {path} ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise LiveError(f"GPU preset {path} is not valid JSON ({exc.msg})") from None
    numbers = ("memory_gib", "datasheet_bandwidth", "datasheet_flops", "effective_bandwidth", "effective_flops",
               "pass_overhead_s")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not all(
        isinstance(data.get(k), (int, float)) and math.isfinite(data[k]) and data[k] >= 0 for k in numbers
    ) or data["effective_bandwidth"] <= 0 or data["effective_flops"] <= 0:
        raise LiveError(f"GPU preset {path} needs a name and non-negative numbers {', '.join(numbers)}")
    extra = data.get("extra") or {}
    if not isinstance(extra, dict) or ("memory" in extra and not _memory_terms_ok(extra["memory"])):
        raise LiveError(f"GPU preset {path}: extra.memory needs a model name and byte counts "
                        f"{', '.join(_MEMORY_TERMS)} (max_num_batched_tokens above 0)")
    spec = GPUSpec(name=data["name"], provenance=str(data.get("provenance", "")), extra=dict(extra),
                   **{k: float(data[k]) for k in numbers}, **_links(data, path))
    if register:
        register_gpu(spec)
    return spec
