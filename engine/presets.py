"""Model and GPU presets: the shapes and hardware constants every run is priced with.

Every number here carries its source. The cost model reads GPU constants only from this file, so a
calibration (``python -m engine live --calibrate``) lands as one more `GPUSpec`, nothing else changes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shapes, enough to price its KV cache and its forward pass."""

    name: str
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int  # max_position_embeddings in the model's config.json
    # Total parameters, embedding and untied lm_head included: 0 means count_params() of these shapes.
    num_params: float = 0.0
    dtype_bytes: int = 2  # bf16
    tie_word_embeddings: bool = False
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        if not self.num_params:
            object.__setattr__(self, "num_params", float(count_params(self)))

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values, every layer: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.num_params * self.dtype_bytes

    @property
    def attention_flops_per_pair(self) -> float:
        """FLOPs per query-key pair over all layers: QK^T and PV, 2 FLOPs per MAC each."""
        return 4.0 * self.num_layers * self.num_q_heads * self.head_dim


def count_params(spec: ModelSpec) -> int:
    """Exact parameter count of the Qwen3 layout for these shapes (embedding and untied lm_head included)."""
    h, i, d = spec.hidden_size, spec.intermediate_size, spec.head_dim
    attention = h * d * (2 * spec.num_q_heads + 2 * spec.num_kv_heads) + 2 * d
    per_layer = attention + 3 * h * i + 2 * h
    head = 0 if spec.tie_word_embeddings else spec.vocab_size * h
    return spec.num_layers * per_layer + spec.vocab_size * h + head + h


@dataclass(frozen=True)
class GPUSpec:
    """Roofline constants for one GPU. Effective figures are what a serving engine reaches, not the datasheet."""

    name: str
    memory_gib: float
    datasheet_bandwidth: float  # bytes/s
    datasheet_flops: float  # dense bf16 FLOP/s
    effective_bandwidth: float  # bytes/s a decode pass actually streams at
    effective_flops: float  # FLOP/s a prefill-heavy pass actually reaches
    pass_overhead_s: float  # fixed cost per forward pass: launches, scheduling, sampling
    provenance: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    # What cudaMemGetInfo reports as the board's total (vLLM's MemorySnapshot.total_memory), in GiB; 0 means
    # not known: memory_gib less the share an H100 80GB reports missing (see total_memory_bytes).
    total_memory_gib: float = 0.0
    # GPU-to-GPU link for tensor parallelism: bytes/s one way per GPU, and how many GPUs one such link
    # domain joins (beyond it, traffic crosses PCIe). Node size bounds --tensor-parallel-size.
    nvlink_bandwidth: float = 0.0
    nvlink_gpus: int = 8
    gpus_per_node: int = 8

    @property
    def total_memory_bytes(self) -> int:
        gib = self.total_memory_gib or self.memory_gib * _REPORTED_SHARE
        return int(round(gib * 2**30))

    def link_bandwidth(self, tensor_parallel_size: int) -> float:
        """One-way bytes/s each GPU of a tensor-parallel group of this size sends at (NVLink or PCIe)."""
        if tensor_parallel_size <= self.nvlink_gpus and self.nvlink_bandwidth > 0:
            return self.nvlink_bandwidth
        return PCIE_GEN5_X16_BANDWIDTH


# Hugging Face config.json of each model. The article's models carry their published parameter count
# (count_params of their shapes, rounded to three figures: the cost model was fitted with these);
# the others count their own.
MODELS: dict[str, ModelSpec] = {
    "Qwen3-8B": ModelSpec(
        name="Qwen3-8B", num_layers=36, num_q_heads=32, num_kv_heads=8, head_dim=128, hidden_size=4096,
        intermediate_size=12288, vocab_size=151_936, max_model_len=40_960, num_params=8.19e9,
    ),
    "Llama-3.1-8B": ModelSpec(
        name="Llama-3.1-8B", num_layers=32, num_q_heads=32, num_kv_heads=8, head_dim=128, hidden_size=4096,
        intermediate_size=14336, vocab_size=128_256, max_model_len=131_072, num_params=8.03e9,
        rope_theta=500_000.0, rms_norm_eps=1e-5,
    ),
    "Qwen3-0.6B": ModelSpec(
        name="Qwen3-0.6B", num_layers=28, num_q_heads=16, num_kv_heads=8, head_dim=128, hidden_size=1024,
        intermediate_size=3072, vocab_size=151_936, max_model_len=40_960, num_params=0.596e9,
        tie_word_embeddings=True,
    ),
    # Small enough to run forward passes on a CPU in tests; the shapes are arbitrary but Qwen3-like (GQA 4:1).
    "tiny": ModelSpec(
        name="tiny", num_layers=2, num_q_heads=4, num_kv_heads=2, head_dim=16, hidden_size=64,
        intermediate_size=128, vocab_size=256, max_model_len=4096,
    ),
}

# PyTorch's out-of-memory message quotes cudaMemGetInfo's total: "GPU 0 has a total capacity of 79.11 GiB" on
# an H100 80GB HBM3 (vllm-project/vllm issue #27508), "139.80 GiB" on an H200. Boards without such a figure
# are assumed to report the H100's share of their nominal size.
_H100_REPORTED_GIB = 79.11
_H200_REPORTED_GIB = 139.80
_REPORTED_SHARE = _H100_REPORTED_GIB / 80
# One-way bandwidths (the datasheets quote both directions together): NVLink 4 on HGX H100/H200 boards,
# 900 GB/s; the NVLink bridge of PCIe/NVL cards, 600 GB/s (H100) or 900 GB/s (H200 NVL); NVLink 3 on A100
# SXM, 600 GB/s; PCIe Gen5 x16, 128 GB/s.
_NVLINK4 = 450e9
PCIE_GEN5_X16_BANDWIDTH = 64e9

# H100 SXM's effective constants are fitted to the article's throughput table (tests/engine/test_calibration.py):
# only the batch-1 pass floor (~6.2 ms = overhead + 15.26 GiB / bandwidth) is tightly determined.
_H100_BW_EFFICIENCY = 3.2e12 / 3.35e12
_H100_FLOP_EFFICIENCY = 650e12 / 989e12
_OVERHEAD_S = 1.1e-3


def _assumed(name: str, memory_gib: float, bandwidth: float, flops: float, source: str, **links) -> GPUSpec:
    """A GPU priced with the fitted H100 SXM's efficiencies until a live calibration replaces them."""
    return GPUSpec(
        name=name, memory_gib=memory_gib, datasheet_bandwidth=bandwidth, datasheet_flops=flops,
        effective_bandwidth=bandwidth * _H100_BW_EFFICIENCY, effective_flops=flops * _H100_FLOP_EFFICIENCY,
        pass_overhead_s=_OVERHEAD_S,
        provenance=f"{source}; efficiencies assumed equal to the fitted H100 SXM's",
        **links,
    )


# Dense bf16 figures are the datasheets' "with sparsity" Tensor Core numbers halved.
GPUS: dict[str, GPUSpec] = {
    "H100 SXM": GPUSpec(
        name="H100 SXM", memory_gib=80, datasheet_bandwidth=3.35e12, datasheet_flops=989e12,
        effective_bandwidth=3.2e12, effective_flops=650e12, pass_overhead_s=_OVERHEAD_S,
        provenance="NVIDIA H100 SXM datasheet (3.35 TB/s HBM3, 989 TFLOP/s dense bf16, NVLink 900 GB/s); "
        "effective figures fitted to the course article's measured table",
        total_memory_gib=_H100_REPORTED_GIB, nvlink_bandwidth=_NVLINK4,
    ),
    # NVIDIA H100 Tensor Core GPU datasheet (per-GPU columns): PCIe 80 GB HBM2e at 2 TB/s, 1,513 bf16 TFLOP/s
    # with sparsity (350 W).
    "H100 PCIe": _assumed("H100 PCIe", 80, 2.0e12, 756e12,
                          "NVIDIA H100 PCIe datasheet (2.0 TB/s HBM2e, 756 TFLOP/s dense bf16, NVLink bridge 600 GB/s "
                          "joining pairs)", nvlink_bandwidth=300e9, nvlink_gpus=2),
    # Same datasheet: NVL 94 GB HBM3 at 3.9 TB/s, 1,671 bf16 TFLOP/s with sparsity (400 W; the first edition
    # quoted a bridged pair, 188 GB and 7.8 TB/s).
    "H100 NVL": _assumed("H100 NVL", 94, 3.9e12, 835e12,
                         "NVIDIA H100 NVL datasheet (3.9 TB/s HBM3, 835 TFLOP/s dense bf16, NVLink bridge 600 GB/s "
                         "joining pairs)", nvlink_bandwidth=300e9, nvlink_gpus=2),
    # NVIDIA H200 datasheet: SXM 141 GB HBM3e at 4.8 TB/s, 1,979 bf16 TFLOP/s with sparsity (H100 SXM's compute).
    "H200": _assumed("H200", 141, 4.8e12, 989e12,
                     "NVIDIA H200 SXM datasheet (4.8 TB/s HBM3e, same SM90 compute as H100 SXM, NVLink 900 GB/s)",
                     total_memory_gib=_H200_REPORTED_GIB, nvlink_bandwidth=_NVLINK4),
    # Same datasheet: H200 NVL 141 GB at 4.8 TB/s, 1,671 bf16 TFLOP/s with sparsity (a lower power limit).
    "H200 NVL": _assumed("H200 NVL", 141, 4.8e12, 835e12,
                         "NVIDIA H200 NVL datasheet (4.8 TB/s HBM3e, 835 TFLOP/s dense bf16, 2- or 4-way NVLink "
                         "bridge 900 GB/s)", total_memory_gib=_H200_REPORTED_GIB, nvlink_bandwidth=_NVLINK4,
                         nvlink_gpus=4),
    "A100 80GB": _assumed("A100 80GB", 80, 2.039e12, 312e12,
                          "NVIDIA A100 80GB SXM datasheet (2,039 GB/s HBM2e, 312 TFLOP/s dense bf16, NVLink 600 GB/s)",
                          nvlink_bandwidth=300e9),
}

# What torch.cuda.get_device_name() reports, most specific first, to the preset with that datasheet
# (e.g. "NVIDIA H100 80GB HBM3" is the SXM board; "NVIDIA GH200 480GB" is none of these).
_DEVICE_NAMES: tuple[tuple[str, str], ...] = (
    (r"\bH100\b.*\bNVL\b", "H100 NVL"),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe"),
    (r"\bH100\b", "H100 SXM"),
    (r"\bH200\b.*\bNVL\b", "H200 NVL"),
    (r"\bH200\b", "H200"),
    (r"\bA100\b(?!.*PCIe).*\b80GB\b", "A100 80GB"),
)


def gpu_preset_for_device(device_name: str) -> GPUSpec | None:
    """The preset whose datasheet matches a CUDA device name, or None for a GPU without one."""
    for pattern, preset in _DEVICE_NAMES:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            return GPUS[preset]
    return None


DEFAULT_MODEL = "Qwen3-8B"
DEFAULT_GPU = "H100 SXM"

# How vLLM sizes its KV cache from --gpu-memory-utilization is engine/memory.py; these are the estimates it
# uses for the terms vLLM measures at start-up where a live calibration has not measured them.
GPU_MEMORY_UTILIZATION = 0.9  # v0.11's CacheConfig default (v0.33 uses 0.92)
GIB_BYTES = 1 << 30
# Memory outside PyTorch's allocator that vLLM's profiling pass finds grown (cuBLAS/attention workspaces):
# vLLM's start-up log shows tens of MiB for an 8B model on one GPU. With tensor parallelism NCCL's and the
# custom all-reduce's buffers come on top (v0.11 creates them after its first memory snapshot). Assumed.
NON_TORCH_BYTES = GIB_BYTES // 10
NCCL_BYTES = GIB_BYTES // 4
# CUDA graphs: v0.11 logs "Graph capturing finished in N secs, took 0.4-0.6 GiB" for 8B models. It captures
# them after the cache is sized, so they live in the (1 - utilization) headroom. Assumed 0.5 GiB.
CUDA_GRAPH_BYTES = GIB_BYTES // 2
# The CUDA context and PyTorch's loaded kernels, present before vLLM's first snapshot: it is why a
# utilization near 1 fails ("Free memory on device ... is less than desired GPU memory utilization"). Assumed.
CUDA_CONTEXT_BYTES = GIB_BYTES // 2


def largest_vllm_pool_gib(model: ModelSpec, gpu: GPUSpec) -> float:
    """The largest KV cache pool vLLM would give itself for `model` on `gpu` by default (0 if nothing is left):
    engine/memory.py's profile at the default utilization and batched tokens, one GPU, the model's dtype."""
    from engine.memory import default_kv_cache_gib  # (memory.py reads this module's presets)

    return default_kv_cache_gib(model, gpu)


def register_gpu(spec: GPUSpec) -> None:
    """Add a GPU preset at run time (a live calibration does this)."""
    GPUS[spec.name] = spec
