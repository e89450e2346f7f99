"""Roofline price of one forward pass: t = overhead + max(bytes / bandwidth, FLOPs / FLOP/s) [+ all-reduces].

Bytes are the weights plus the KV of every context token the pass reads; FLOPs are 2 x params per new
token plus attention's query-key pairs. The formula is the numba core's (`roofline`, `pass_work`), so the
simulator, the live prediction and the calibration price a pass the same way; the constants come from
`engine.presets` and nowhere else.

With tensor parallelism every GPU runs the formula on its shard at once (weights, FLOPs and KV heads divided
by the GPU count), then the pass waits for the all-reduces that join the shards: two per layer (after the
attention's output projection and after the MLP's down projection, as vLLM's RowParallelLinear does), each of
new tokens x hidden size activations. A ring all-reduce sends 2 (n - 1) / n of the data from every GPU
(NCCL's bus bandwidth, nccl-tests' PERFORMANCE.md) at the preset's NVLink bandwidth. The vocabulary-parallel
embedding's all-reduce and the logits' gather (one more exchange each per pass, 1/73 of the traffic of an 8B
model) are left out. An fp8 KV cache halves the KV bytes per token a pass reads.
"""
from __future__ import annotations

import numpy as np

from engine.presets import GPUSpec, ModelSpec
from kernels import scheduler_core as core


ALL_REDUCES_PER_LAYER = 2
# The host's share of the per-pass overhead (scheduling, preparing inputs, processing sampled tokens), which
# async scheduling overlaps with the GPU's work on the previous pass. An assumption, not a measurement: the live
# fit measures only the sum, so the split is a stated guess of half host, half GPU (kernel launches, sampling).
# With async scheduling off it changes nothing.
HOST_SHARE_OF_OVERHEAD = 0.5


def cost_vector(model: ModelSpec, gpu: GPUSpec | None, kv_bytes_per_token: int | None = None,
                tensor_parallel_size: int = 1) -> np.ndarray:
    """The cost model's constants in the order the numba core reads them, per GPU (gpu=None: the work alone).

    `kv_bytes_per_token` is one GPU's (its KV heads, at the cache's dtype); unset, the model's own.
    """
    tp = tensor_parallel_size
    cost = np.zeros(core.NUM_COST_FIELDS, dtype=np.float64)
    cost[core.C_WEIGHT_BYTES] = model.weight_bytes / tp
    cost[core.C_KV_BYTES] = model.kv_bytes_per_token if kv_bytes_per_token is None else kv_bytes_per_token
    cost[core.C_PARAMS] = model.num_params / tp
    cost[core.C_ATTN] = model.attention_flops_per_pair / tp  # each GPU has num_q_heads / tp query heads
    if gpu is not None:
        cost[core.C_OVERHEAD] = gpu.pass_overhead_s
        cost[core.C_HOST] = HOST_SHARE_OF_OVERHEAD * gpu.pass_overhead_s
        cost[core.C_BANDWIDTH] = gpu.effective_bandwidth
        cost[core.C_FLOPS] = gpu.effective_flops
        if tp > 1:
            cost[core.C_ALLREDUCE_BYTES] = all_reduce_bytes_per_token(model, tp)
            cost[core.C_LINK_BANDWIDTH] = gpu.link_bandwidth(tp)
    return cost


def all_reduce_bytes_per_token(model: ModelSpec, tensor_parallel_size: int) -> float:
    """Bytes each GPU sends per new token of a pass: two all-reduces per layer of hidden_size activations,
    2 (n - 1) / n of each on a ring of n GPUs (0 on one GPU)."""
    n = tensor_parallel_size
    return ALL_REDUCES_PER_LAYER * model.num_layers * model.hidden_size * model.dtype_bytes * 2 * (n - 1) / n


def run_cost_vector(cfg) -> np.ndarray:
    """The cost vector of a RunConfig: its model and GPU, at its KV cache dtype and tensor-parallel size."""
    return cost_vector(cfg.model_spec, cfg.gpu_spec, cfg.kv_bytes_per_token, cfg.tensor_parallel_size)


def _work(new_tokens: np.ndarray, computed_before: np.ndarray) -> np.ndarray:
    """A pass laid out as the core's pass outputs: new tokens and computed-before per sequence."""
    out = np.zeros((core.NUM_OUT_ROWS, len(new_tokens)), dtype=np.int64)
    out[core.OUT_NEW], out[core.OUT_BEFORE] = new_tokens, computed_before
    return out


def plan_seconds(cost: np.ndarray, plan, overlapped: bool = False) -> float:
    """Predicted duration of a scheduled pass (a `StepPlan`), with a `cost_vector`; overlapped: with async
    scheduling, whose host share runs beside the previous pass (core.overlapped_seconds)."""
    seconds = core.pass_seconds(cost, _work(plan.new_tokens, plan.computed_before), plan.num_seqs)
    return float(core.overlapped_seconds(cost, seconds) if overlapped else seconds)


def pass_seconds(model: ModelSpec, gpu: GPUSpec, new_tokens: np.ndarray, computed_before: np.ndarray) -> float:
    """Predicted duration of a pass that runs `new_tokens[i]` tokens on top of `computed_before[i]` each."""
    return float(core.pass_seconds(cost_vector(model, gpu), _work(new_tokens, computed_before), len(new_tokens)))


def run_pass_price(cfg, new_tokens: np.ndarray, computed_before: np.ndarray) -> tuple[float, float, float]:
    """(bytes one GPU moves, FLOPs it does, seconds) of a pass under a RunConfig's model, GPU, KV cache dtype and
    tensor-parallel size: what the simulator charges that pass."""
    cost, work = run_cost_vector(cfg), _work(new_tokens, computed_before)
    bytes_moved, flops = core.pass_work(cost, work, len(new_tokens))
    return float(bytes_moved), float(flops), float(core.pass_seconds(cost, work, len(new_tokens)))


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
