"""How vLLM (v0.11) turns --gpu-memory-utilization into a number of KV cache blocks, term by term.

vLLM measures each term on the GPU at start-up; here each is estimated from the model and GPU presets
(engine/presets.py), unless a live calibration measured them on a real GPU (`GPUSpec.extra["memory"]`,
written by `python -m engine live --calibrate-out`), whose figures then replace the estimates:

    requested  = total GPU memory x gpu_memory_utilization      Worker.init_device (vllm/v1/worker/gpu_worker.py)
    available  = requested - weights - activation peak - non-torch memory
                                                                 Worker.determine_available_memory, same file,
                                                                 with memory_profiling (vllm/utils, MemorySnapshot)
    num_blocks = available // page_size // num_layers           get_num_blocks (vllm/v1/core/kv_cache_utils.py)
    page_size  = 2 x block_size x kv_heads per GPU x head_size x dtype size
                                                                 FullAttentionSpec.page_size_bytes
                                                                 (vllm/v1/kv_cache_interface.py)

With tensor parallelism every GPU runs the same sum over its own shard (kv heads per GPU = max(1, kv heads // TP),
ModelConfig.get_num_kv_heads in vllm/config) and the engine keeps the smallest count (all equal here). v0.11
captures CUDA graphs after the cache is sized, so their memory is reported but not subtracted; later versions
estimate and subtract it (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS): `cuda_graphs_in_budget=True`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.presets import (CUDA_CONTEXT_BYTES, CUDA_GRAPH_BYTES, GIB_BYTES, GPU_MEMORY_UTILIZATION, NCCL_BYTES,
                            NON_TORCH_BYTES, GPUSpec, ModelSpec)

if TYPE_CHECKING:
    from engine.config import RunConfig

CUDA_GRAPHS_IN_KV_BUDGET = False  # v0.11: graphs are captured after the KV cache is allocated
FP32_BYTES = 4
# The dummy sampler run of vLLM's profile_run holds, per row, the logits in the model's dtype, their fp32 copy,
# the fp32 probabilities and the fp32 exponential noise random sampling divides them by (vllm/v1/sample).
SAMPLER_FP32_COPIES = 3


@dataclass(frozen=True)
class MemoryProfile:
    """One GPU's memory at vLLM's start-up, in bytes, and the KV blocks it yields."""

    total_memory: int
    gpu_memory_utilization: float
    requested_memory: float
    weights_memory: float
    activation_peak: int
    non_torch_memory: int
    cuda_graph_memory: int
    cuda_graphs_in_budget: bool
    available_kv_cache_memory: int
    page_size_bytes: int  # one block of one layer
    num_layers: int
    num_gpu_blocks: int
    source: str  # "estimated" or where the measured figures came from

    @property
    def block_bytes(self) -> int:
        return self.page_size_bytes * self.num_layers

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def kv_heads_per_gpu(model: ModelSpec, tensor_parallel_size: int) -> int:
    """vLLM's ModelConfig.get_num_kv_heads: each GPU keeps its share of the KV heads (at least one)."""
    return max(1, model.num_kv_heads // tensor_parallel_size)


def page_size_bytes(model: ModelSpec, block_size: int, kv_dtype_bytes: int, tensor_parallel_size: int) -> int:
    """FullAttentionSpec.page_size_bytes: keys and values of one block in one layer, on one GPU."""
    return 2 * block_size * kv_heads_per_gpu(model, tensor_parallel_size) * model.head_dim * kv_dtype_bytes


def activation_peak_estimate(model: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int,
                             tensor_parallel_size: int) -> int:
    """The torch allocation peak of vLLM's profile_run on one GPU (what it adds over the weights).

    profile_run runs one forward pass of max_num_batched_tokens tokens, then the sampler on one row per
    request (min(max_num_seqs, tokens) rows). The forward pass peaks inside an MLP: the residual and the
    normed hidden state (hidden_size each, replicated on every GPU) live beside the gate/up projection's output
    (2 x intermediate / TP) and its activation (intermediate / TP). The sampler holds the logits of every row
    (the whole vocabulary, gathered) in the model's dtype and in three fp32 tensors, beside the hidden states.
    The larger of the two is the peak; all in the model's dtype unless said.
    """
    tokens, dtype = max_num_batched_tokens, model.dtype_bytes
    intermediate = model.intermediate_size // tensor_parallel_size
    forward = tokens * (2 * model.hidden_size + 3 * intermediate) * dtype
    rows = min(max_num_seqs, tokens)
    sampler = rows * model.vocab_size * (dtype + SAMPLER_FP32_COPIES * FP32_BYTES) + tokens * model.hidden_size * dtype
    return max(forward, sampler)


def _measured(gpu: GPUSpec, model: ModelSpec, tensor_parallel_size: int) -> dict | None:
    """A live calibration's memory figures for this model on this GPU (one GPU only), or None."""
    measured = (gpu.extra or {}).get("memory")
    if not isinstance(measured, dict) or measured.get("model") != model.name or tensor_parallel_size != 1:
        return None
    return measured


def profile_memory(model: ModelSpec, gpu: GPUSpec, *, gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                   block_size: int = 16, kv_dtype_bytes: int | None = None, tensor_parallel_size: int = 1,
                   max_num_batched_tokens: int = 8192, max_num_seqs: int = 256,
                   cuda_graphs_in_budget: bool = CUDA_GRAPHS_IN_KV_BUDGET) -> MemoryProfile:
    """vLLM's KV cache sizing for one GPU of a tensor-parallel group (see the module docstring)."""
    tp = tensor_parallel_size
    kv_dtype_bytes = kv_dtype_bytes or model.dtype_bytes
    total = gpu.total_memory_bytes
    weights = model.weight_bytes / tp  # norms are replicated, 0.004% of an 8B model: below one block
    activation = activation_peak_estimate(model, max_num_batched_tokens, max_num_seqs, tp)
    non_torch = NON_TORCH_BYTES + (NCCL_BYTES if tp > 1 else 0)
    graphs, source = CUDA_GRAPH_BYTES, "estimated"
    measured = _measured(gpu, model, tp)
    if measured is not None:
        total, weights, non_torch = int(measured["total_memory"]), float(measured["weights_memory"]), int(
            measured["non_torch_memory"])
        graphs = int(measured.get("cuda_graph_memory", graphs))
        # The activation peak grows with the tokens of the profiling pass: scale the measured one to ours.
        activation = int(round(measured["activation_peak"] * max_num_batched_tokens
                               / measured["max_num_batched_tokens"]))
        source = f"measured on {measured.get('device', gpu.name)}"
    requested = total * gpu_memory_utilization
    available = int(requested - weights - activation - non_torch - (graphs if cuda_graphs_in_budget else 0))
    page = page_size_bytes(model, block_size, kv_dtype_bytes, tp)
    blocks = max(int(available // page // model.num_layers), 0)
    return MemoryProfile(total, gpu_memory_utilization, requested, weights, activation, non_torch, graphs,
                         cuda_graphs_in_budget, available, page, model.num_layers, blocks, source)


def profile_for(cfg: "RunConfig", gpu_memory_utilization: float | None = None) -> MemoryProfile:
    """The profile of a run's settings (at its --gpu-memory-utilization, or the one given, or vLLM's default)."""
    util = gpu_memory_utilization or cfg.gpu_memory_utilization or GPU_MEMORY_UTILIZATION
    return profile_memory(cfg.model_spec, cfg.gpu_spec, gpu_memory_utilization=util, block_size=cfg.block_size,
                          kv_dtype_bytes=cfg.kv_dtype_bytes, tensor_parallel_size=cfg.tensor_parallel_size,
                          max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs)


def startup_memory_error(profile: MemoryProfile) -> str | None:
    """vLLM's refusal to start for this profile, or None: utilization beyond the free memory (Worker.init_device)
    or nothing left for the cache (get_kv_cache_config's "No available memory for the cache blocks")."""
    free = profile.total_memory - CUDA_CONTEXT_BYTES
    if free < profile.requested_memory:
        return (f"Free memory on device ({free / GIB_BYTES:.2f}/{profile.total_memory / GIB_BYTES:.2f} GiB) on startup "
                f"is less than desired GPU memory utilization ({profile.gpu_memory_utilization:g}, "
                f"{profile.requested_memory / GIB_BYTES:.2f} GiB). Decrease GPU memory utilization or reduce GPU "
                "memory used by other processes.")
    if profile.available_kv_cache_memory <= 0:
        return ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine.")
    return None


def default_kv_cache_gib(model: ModelSpec, gpu: GPUSpec) -> float:
    """The KV cache memory vLLM's defaults leave on one GPU (GiB, 0 when none): utilization 0.9, 8,192 batched
    tokens, 256 sequences, the model's dtype."""
    return max(profile_memory(model, gpu).available_kv_cache_memory, 0) / GIB_BYTES
