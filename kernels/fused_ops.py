"""The small per-layer operations of a Qwen3 layer, in plain torch: the reference and the CPU path.

Each one has a fused Triton twin in kernels.fused_ops_triton (one kernel instead of 5 to 30). At batch 1
a Qwen3-8B decode layer reads ~450 MB of weights in four GEMMs; unfused, the norms, rotary embedding and
SwiGLU add about 60 small kernels per layer, ~2,500 per pass, whose fixed cost (a few microseconds each,
even in a CUDA graph) is as long as reading the weights (`python benchmarks/decode_kernels.py` counts).
engine/live/backend.py picks one set per run; both compute the same numbers in the same dtypes (Hugging Face's: norms and rotation in fp32, results rounded to the
model's dtype at the same points).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rope_table(head_dim: int, theta: float, max_positions: int, device: torch.device | str) -> torch.Tensor:
    """cos and sin of every (position, frequency) pair, fp32 [max_positions, head_dim]: cos in the first
    half, sin in the second. Built once per model, so a pass only indexes it."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    freqs = torch.arange(max_positions, device=device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Hugging Face's Qwen3RMSNorm: normalise in fp32, round to x's dtype, then scale."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(norm(x + residual), x + residual): the residual add that ends one sublayer and the norm that
    starts the next. residual=None (the first layer) normalises x and returns it as the residual."""
    if residual is not None:
        x = x + residual
    return rms_norm(x, weight, eps), x


def apply_rope(x: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """Neox-style rotation of whole heads in fp32. x [T, H, D]; cos_sin [T, D] rows of `rope_table`."""
    half = x.shape[-1] // 2
    cos, sin = cos_sin[:, None, :half], cos_sin[:, None, half:]
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def qk_norm_rope_store(qkv: torch.Tensor, positions: torch.Tensor, q_weight: torch.Tensor,
                       k_weight: torch.Tensor, table: torch.Tensor, eps: float, k_cache: torch.Tensor,
                       v_cache: torch.Tensor, slots: torch.Tensor, num_q_heads: int, num_kv_heads: int) -> torch.Tensor:
    """Split the fused projection [T, (Hq + 2 Hkv) D] into heads; per-head RMSNorm and rotary embedding
    of queries and keys; keys and values written to their cache slots. Returns the queries [T, Hq, D]."""
    t, d = qkv.shape[0], k_cache.shape[-1]
    q, k, v = qkv.split([num_q_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    cos_sin = table[positions]
    q = apply_rope(rms_norm(q.reshape(t, num_q_heads, d), q_weight, eps), cos_sin)
    k = apply_rope(rms_norm(k.reshape(t, num_kv_heads, d), k_weight, eps), cos_sin)
    store_kv(k_cache, v_cache, slots, k, v.reshape(t, num_kv_heads, d))
    return q


def store_kv(k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor, k: torch.Tensor,
             v: torch.Tensor) -> None:
    """Write one layer's new keys/values [T, kv_heads, head_dim] into their slots (graph-safe)."""
    flat = (-1, k.shape[1], k.shape[2])
    k_cache.view(flat).index_copy_(0, slots, k)
    v_cache.view(flat).index_copy_(0, slots, v)


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's middle: silu(gate) * up, from the fused projection [T, 2 I]."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up
