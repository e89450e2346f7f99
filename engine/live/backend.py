"""The live model's kernels, chosen once per run: fused Triton kernels on a CUDA device that has Triton,
else plain torch ops. Both compute the same numbers (kernels/fused_ops.py is the reference); the model
and the runner call whichever set they were handed and never ask which it is.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from kernels import fused_ops
from kernels.paged_attention import paged_decode_reference


@dataclass(frozen=True)
class Kernels:
    triton: bool  # also selects the runner's Triton-only paths: one-launch prefill, CUDA graphs, split-KV
    attention: str  # what the live summary says about attention
    layer_ops: str  # and about the other per-layer operations
    add_rms_norm: Callable
    qk_norm_rope_store: Callable
    silu_and_mul: Callable
    decode_attention: Callable  # (q, k_cache, v_cache, meta, scale, out) -> None


def _torch_decode(q, k_cache, v_cache, meta, scale, out) -> None:
    out.copy_(paged_decode_reference(q, k_cache, v_cache, meta.decode_block_tables, meta.decode_seq_lens, scale))


TORCH = Kernels(False, "gather + SDPA", "torch ops", fused_ops.add_rms_norm, fused_ops.qk_norm_rope_store,
                fused_ops.silu_and_mul, _torch_decode)


def triton_importable() -> bool:
    try:
        import kernels.fused_ops_triton  # noqa: F401  (triton present and the kernel modules load)
        import kernels.paged_decode_triton  # noqa: F401
    except ImportError:
        return False
    return True


def triton_kernels() -> Kernels:
    from kernels.fused_ops_triton import add_rms_norm_triton, qk_norm_rope_store_triton, silu_and_mul_triton
    from kernels.paged_decode_triton import paged_decode

    def decode(q, k_cache, v_cache, meta, scale, out) -> None:
        paged_decode(q, k_cache, v_cache, meta.decode_block_tables, meta.decode_seq_lens, scale,
                     meta.decode_num_splits, out=out)

    return Kernels(True, "triton split-KV paged decode, one-launch paged prefill",
                   "fused Triton norms, rotary, SwiGLU", add_rms_norm_triton, qk_norm_rope_store_triton,
                   silu_and_mul_triton, decode)


def choose_kernels(device: torch.device) -> Kernels:
    """Triton's kernels on a CUDA device where Triton loads, else torch ops."""
    return triton_kernels() if device.type == "cuda" and triton_importable() else TORCH
