"""Paged attention in plain torch: gather a sequence's pages into contiguous K/V, then SDPA.

This is the reference every other attention path is checked against, the CPU path, and the prefill path
on a GPU. It reads each page through the block table, so it is correct for any physical placement.
Caches are one layer's view: [num_blocks, block_size, num_kv_heads, head_dim].
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.scheduler_core import cdiv

# Bound on the fp32 score matrix the masked (non-flash) prefill path materialises per piece of queries.
_MAX_SCORE_BYTES = 256 << 20


def gather_kv(cache: torch.Tensor, block_ids: torch.Tensor, length: int) -> torch.Tensor:
    """The first `length` tokens of one sequence, in order: [length, num_kv_heads, head_dim]."""
    block_size = cache.shape[1]
    num_blocks = cdiv(length, block_size)
    pages = cache.index_select(0, block_ids[:num_blocks].long())
    return pages.reshape(num_blocks * block_size, *cache.shape[2:])[:length]


def paged_decode_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query token per sequence against its whole paged context.

    q: [B, Hq, D]; block_tables: [B, max_blocks] (rows padded with any valid id); seq_lens: [B], keys
    per sequence including the token being decoded. Returns [B, Hq, D].
    """
    batch, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    width = block_tables.shape[1] * block_size
    # [B, max_blocks, bs, Hkv, D] -> [B, Hkv, L, D]; padding keys are masked out below.
    k = k_cache[block_tables.long()].reshape(batch, width, num_kv_heads, head_dim).transpose(1, 2)
    v = v_cache[block_tables.long()].reshape(batch, width, num_kv_heads, head_dim).transpose(1, 2)
    # Fold the query heads that share a KV head into the query axis, so K/V are never repeated.
    qg = q.reshape(batch, num_kv_heads, group, head_dim)
    mask = torch.arange(width, device=q.device)[None, :] < seq_lens.to(q.device).long()[:, None]
    out = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask[:, None, None, :], scale=scale)
    return out.reshape(batch, num_q_heads, head_dim)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Queries that are the last q_len of kv_len keys, causally masked (bottom-right aligned).

    q: [n, Hq, D]; k, v: [L, Hkv, D] with L >= n. Returns [n, Hq, D].
    """
    n, length = q.shape[0], k.shape[0]
    qt, kt, vt = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    if n == length:
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, scale=scale, enable_gqa=True)
    elif q.is_cuda:
        # Lets torch pick flash/efficient kernels with lower-right causal alignment instead of a dense mask;
        # a torch without that dispatch (for this dtype or GQA) falls back to the bounded explicit mask.
        from torch.nn.attention.bias import causal_lower_right

        try:
            bias = causal_lower_right(n, length)
            out = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=bias, scale=scale, enable_gqa=True)
        except (RuntimeError, TypeError, ValueError):
            out = _masked_causal(qt, kt, vt, length - n, scale)
    else:
        out = _masked_causal(qt, kt, vt, length - n, scale)
    return out[0].transpose(0, 1)


def _masked_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: int, scale: float) -> torch.Tensor:
    """Explicit-mask causal attention, in pieces of queries so the score matrix stays bounded."""
    _, heads, n, _ = q.shape
    length = k.shape[2]
    piece = max(1, _MAX_SCORE_BYTES // max(1, heads * length * 4))
    keys = torch.arange(length, device=q.device)
    outs = []
    for start in range(0, n, piece):
        rows = torch.arange(start, min(n, start + piece), device=q.device) + offset
        mask = keys[None, :] <= rows[:, None]
        outs.append(F.scaled_dot_product_attention(
            q[:, :, start:start + piece], k, v, attn_mask=mask, scale=scale, enable_gqa=True
        ))
    return torch.cat(outs, dim=2)


def paged_prefill_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_ids: torch.Tensor,
    computed_before: int,
    scale: float,
) -> torch.Tensor:
    """A chunk of n query tokens at positions computed_before.. of one sequence, whose keys (the cached
    prefix and the chunk itself) are already in the pages. q: [n, Hq, D]; returns [n, Hq, D]."""
    length = computed_before + q.shape[0]
    k = gather_kv(k_cache, block_ids, length)
    v = gather_kv(v_cache, block_ids, length)
    return causal_attention(q, k, v, scale)
