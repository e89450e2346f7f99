"""Roofline price of one forward pass: t = overhead + max(bytes / bandwidth, FLOPs / FLOP/s).

Bytes are the weights plus the KV of every context token the pass reads; FLOPs are 2 x params per new
token plus attention's query-key pairs. The constants come from `engine.presets` and nowhere else.
"""
from __future__ import annotations

import numpy as np

from engine.presets import GPUSpec, ModelSpec
from kernels import scheduler_core as core


def cost_vector(model: ModelSpec, gpu: GPUSpec) -> np.ndarray:
    """The cost model's constants in the order the numba core reads them."""
    cost = np.zeros(7, dtype=np.float64)
    cost[core.C_OVERHEAD] = gpu.pass_overhead_s
    cost[core.C_WEIGHT_BYTES] = model.weight_bytes
    cost[core.C_KV_BYTES] = model.kv_bytes_per_token
    cost[core.C_BANDWIDTH] = gpu.effective_bandwidth
    cost[core.C_FLOPS] = gpu.effective_flops
    cost[core.C_PARAMS] = model.num_params
    cost[core.C_ATTN] = model.attention_flops_per_pair
    return cost


def pass_seconds(model: ModelSpec, gpu: GPUSpec, new_tokens: np.ndarray, computed_before: np.ndarray) -> float:
    """Predicted duration of a pass that runs `new_tokens[i]` tokens on top of `computed_before[i]` each."""
    new = np.ascontiguousarray(new_tokens, dtype=np.int64)
    before = np.ascontiguousarray(computed_before, dtype=np.int64)
    return float(core.pass_seconds(cost_vector(model, gpu), new, before, new.shape[0]))


def pass_bytes_and_flops(model: ModelSpec, new_tokens: np.ndarray, computed_before: np.ndarray) -> tuple[float, float]:
    """What a pass moves and computes; the live calibration fits the GPU constants against these."""
    n = np.asarray(new_tokens, dtype=np.float64)
    c = np.asarray(computed_before, dtype=np.float64)
    bytes_moved = model.weight_bytes + model.kv_bytes_per_token * float((c + n).sum())
    flops = 2.0 * model.num_params * float(n.sum()) + model.attention_flops_per_pair * float((n * c + n * (n + 1) / 2).sum())
    return bytes_moved, flops
