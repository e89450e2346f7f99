"""Roofline price of one forward pass: t = overhead + max(bytes / bandwidth, FLOPs / FLOP/s).

Bytes are the weights plus the KV of every context token the pass reads; FLOPs are 2 x params per new
token plus attention's query-key pairs. The formula is the numba core's (`roofline`, `pass_work`), so the
simulator, the live prediction and the calibration price a pass the same way; the constants come from
`engine.presets` and nowhere else.
"""
from __future__ import annotations

import numpy as np

from engine.presets import GPUSpec, ModelSpec
from kernels import scheduler_core as core


def cost_vector(model: ModelSpec, gpu: GPUSpec | None) -> np.ndarray:
    """The cost model's constants in the order the numba core reads them (gpu=None: the work alone)."""
    cost = np.zeros(core.NUM_COST_FIELDS, dtype=np.float64)
    cost[core.C_WEIGHT_BYTES] = model.weight_bytes
    cost[core.C_KV_BYTES] = model.kv_bytes_per_token
    cost[core.C_PARAMS] = model.num_params
    cost[core.C_ATTN] = model.attention_flops_per_pair
    if gpu is not None:
        cost[core.C_OVERHEAD] = gpu.pass_overhead_s
        cost[core.C_BANDWIDTH] = gpu.effective_bandwidth
        cost[core.C_FLOPS] = gpu.effective_flops
    return cost


def _work(new_tokens: np.ndarray, computed_before: np.ndarray) -> np.ndarray:
    """A pass laid out as the core's pass outputs: new tokens and computed-before per sequence."""
    out = np.zeros((core.NUM_OUT_ROWS, len(new_tokens)), dtype=np.int64)
    out[core.OUT_NEW], out[core.OUT_BEFORE] = new_tokens, computed_before
    return out


def plan_seconds(cost: np.ndarray, plan) -> float:
    """Predicted duration of a scheduled pass (a `StepPlan`), with a `cost_vector`."""
    return float(core.pass_seconds(cost, _work(plan.new_tokens, plan.computed_before), plan.num_seqs))


def pass_seconds(model: ModelSpec, gpu: GPUSpec, new_tokens: np.ndarray, computed_before: np.ndarray) -> float:
    """Predicted duration of a pass that runs `new_tokens[i]` tokens on top of `computed_before[i]` each."""
    return float(core.pass_seconds(cost_vector(model, gpu), _work(new_tokens, computed_before), len(new_tokens)))


def pass_bytes_and_flops(model: ModelSpec, new_tokens: np.ndarray, computed_before: np.ndarray) -> tuple[float, float]:
    """What a pass moves and computes; the live calibration fits the GPU constants against these."""
    bytes_moved, flops = core.pass_work(cost_vector(model, None), _work(new_tokens, computed_before), len(new_tokens))
    return float(bytes_moved), float(flops)


def roofline_seconds(pass_bytes, pass_flops, gpu: GPUSpec, overhead: bool = True) -> np.ndarray:
    """The cost model's pass times for given bytes and FLOPs (arrays); overhead=False gives the bare
    roofline (all bytes at the bandwidth, or all FLOPs at the FLOP rate)."""
    return roofline(np.asarray(pass_bytes, dtype=np.float64), np.asarray(pass_flops, dtype=np.float64),
                    gpu.pass_overhead_s if overhead else 0.0, gpu.effective_bandwidth, gpu.effective_flops)


def roofline(pass_bytes: np.ndarray, pass_flops: np.ndarray, overhead: float, bandwidth: float,
             flops: float) -> np.ndarray:
    """The formula itself, for constants that are not a preset's (a fit in progress, a datasheet)."""
    return core.roofline(float(overhead), float(bandwidth), float(flops), np.asarray(pass_bytes, dtype=np.float64),
                         np.asarray(pass_flops, dtype=np.float64))
