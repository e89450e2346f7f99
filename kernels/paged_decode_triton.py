"""Split-KV paged decode attention in Triton: one query token per sequence against its paged KV.

Grid (batch, kv_heads, splits). A program loads the query heads that share one KV head (padded to 16
rows for tl.dot), walks its share of the sequence's keys in tiles of several pages, gathered through the
block table, with an online softmax, and writes a partial output plus its log-sum-exp; a second small kernel
merges the splits. Each K/V byte is read once for the whole GQA group. Everything the kernel reads is on
the device, and the grid depends only on (batch, splits), so it can be captured in a CUDA graph.

Triton is optional: importing this module without it raises ImportError, and callers fall back to
kernels.paged_attention. Set TRITON_INTERPRET=1 before importing to run it on a CPU (fp32/fp16 only:
the Triton 3.6 interpreter gets bf16 tl.dot wrong).
"""
from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

_MIN_DOT_ROWS = 16  # tl.dot needs M, N, K >= 16
_MAX_SPLITS = 64
# Keys per loop iteration: four 16-token pages, so each tl.dot is 16 x 64 and loads stay wide. A first
# guess (no GPU was at hand): tune it with num_warps/num_stages on the GPU check.
_TILE_TOKENS = 64
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"  # read once, as triton.jit does


@triton.jit
def _paged_decode_split_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, block_tables_ptr, seq_lens_ptr, part_out_ptr, part_lse_ptr,
    scale,
    stride_q_b, stride_q_h,
    stride_c_block, stride_c_tok, stride_c_head,
    stride_bt_b,
    stride_o_b, stride_o_h, stride_o_s,
    stride_l_b, stride_l_h,
    GROUP: tl.constexpr, GROUP_ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr, NUM_SPLITS: tl.constexpr, DOT_PRECISION: tl.constexpr, STATIC_ITERS: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    # The sequence's keys in tiles of TILE tokens (several pages each); this split takes a run of tiles.
    seq_len = tl.load(seq_lens_ptr + seq)
    num_tiles = tl.cdiv(seq_len, TILE)
    tiles_per_split = tl.cdiv(num_tiles, NUM_SPLITS)
    first_tile = split * tiles_per_split
    my_tiles = tl.minimum(tiles_per_split, num_tiles - first_tile)

    rows = tl.arange(0, GROUP_ROWS)
    dims = tl.arange(0, HEAD_DIM)
    heads = kv_head * GROUP + rows
    q = tl.load(q_ptr + seq * stride_q_b + heads[:, None] * stride_q_h + dims[None, :],
                mask=rows[:, None] < GROUP, other=0.0)

    running_max = tl.full([GROUP_ROWS], float("-inf"), tl.float32)
    running_sum = tl.zeros([GROUP_ROWS], tl.float32)
    acc = tl.zeros([GROUP_ROWS, HEAD_DIM], tl.float32)
    # On a GPU the loop runs exactly this split's tiles. The Triton 3.6 interpreter cannot loop to a
    # computed bound (its scalars are 1-element arrays, which numpy 2 refuses to turn into ints), so there
    # the host passes a static bound and the extra iterations are masked off; the body is the same.
    for i in range(0, STATIC_ITERS if STATIC_ITERS > 0 else my_tiles):
        toks = (first_tile + i) * TILE + tl.arange(0, TILE)
        valid = (toks < seq_len) & (i < my_tiles)
        # Gather: each token's page through the block table, then its row inside the page.
        physical = tl.load(block_tables_ptr + seq * stride_bt_b + toks // BLOCK_SIZE, mask=valid, other=0)
        offs = (physical.to(tl.int64)[:, None] * stride_c_block + (toks % BLOCK_SIZE)[:, None] * stride_c_tok
                + kv_head * stride_c_head + dims[None, :])
        k = tl.load(k_cache_ptr + offs, mask=valid[:, None], other=0.0)
        v = tl.load(v_cache_ptr + offs, mask=valid[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # [GROUP_ROWS, TILE]
        scores = tl.where(valid[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        # Rows that have seen no key yet keep max -inf; subtract 0 there so exp gives 0, not NaN.
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        p = tl.exp(scores - shift[:, None])
        alpha = tl.exp(running_max - shift)
        running_sum = running_sum * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        running_max = new_max

    # An empty split (short sequence) leaves sum 0: output 0 with lse -inf, which the merge weights 0.
    has_keys = running_sum > 0
    out = acc / tl.where(has_keys, running_sum, 1.0)[:, None]
    lse = tl.where(has_keys, running_max + tl.log(tl.where(has_keys, running_sum, 1.0)), float("-inf"))
    out_ptrs = part_out_ptr + seq * stride_o_b + heads[:, None] * stride_o_h + split * stride_o_s + dims[None, :]
    tl.store(out_ptrs, out, mask=rows[:, None] < GROUP)
    tl.store(part_lse_ptr + seq * stride_l_b + heads * stride_l_h + split, lse, mask=rows < GROUP)


def default_num_splits(batch: int, num_kv_heads: int, num_sms: int) -> int:
    """Enough programs to fill the GPU twice over: small batches split each sequence's pages."""
    programs = max(1, batch * num_kv_heads)
    return max(1, min(_MAX_SPLITS, math.ceil(2 * num_sms / programs)))


def paged_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    num_splits: int = 1,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [B, Hq, D]; caches [num_blocks, block_size, Hkv, D]; block_tables int32 [B, max_blocks];
    seq_lens int32 [B] (>= 1 each). Returns [B, Hq, D] in q's dtype, written into `out` when given."""
    batch, num_q_heads, head_dim = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    assert head_dim & (head_dim - 1) == 0 and block_size & (block_size - 1) == 0, "powers of two only"
    assert k_cache.stride(-1) == 1 and q.stride(-1) == 1 and k_cache.stride() == v_cache.stride()
    part_out = torch.empty((batch, num_q_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
    part_lse = torch.empty((batch, num_q_heads, num_splits), dtype=torch.float32, device=q.device)
    group_rows = max(_MIN_DOT_ROWS, triton.next_power_of_2(group))
    # fp32 caches get exact fp32 dots (no TF32) so they can serve as a check; half types use tensor cores.
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    tile = max(_TILE_TOKENS, block_size)
    max_tiles = -(-block_tables.shape[1] * block_size // tile)
    static_iters = -(-max_tiles // num_splits) if _INTERPRETED else 0
    _paged_decode_split_kernel[(batch, num_kv_heads, num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens, part_out, part_lse,
        scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0),
        part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1),
        GROUP=group, GROUP_ROWS=group_rows, HEAD_DIM=head_dim, BLOCK_SIZE=block_size, TILE=tile,
        NUM_SPLITS=num_splits, DOT_PRECISION=precision, STATIC_ITERS=static_iters,
    )
    if out is None:
        out = torch.empty_like(q)
    assert out.shape == q.shape and out.stride(-1) == 1
    _merge_splits_kernel[(batch, num_q_heads)](
        part_out, part_lse, out, part_out.stride(0), part_out.stride(1), part_out.stride(2),
        part_lse.stride(0), part_lse.stride(1), out.stride(0), out.stride(1),
        NUM_SPLITS=num_splits, SPLITS_P2=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim, num_warps=1,
    )
    return out


@triton.jit
def _merge_splits_kernel(part_out_ptr, part_lse_ptr, out_ptr, stride_o_b, stride_o_h, stride_o_s, stride_l_b,
                         stride_l_h, stride_out_b, stride_out_h, NUM_SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
                         HEAD_DIM: tl.constexpr):
    """Weight each split's output by its share of the softmax mass (exp of its log-sum-exp), in one kernel."""
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, SPLITS_P2)
    dims = tl.arange(0, HEAD_DIM)
    real = splits < NUM_SPLITS
    lse = tl.load(part_lse_ptr + seq * stride_l_b + head * stride_l_h + splits, mask=real, other=float("-inf"))
    top = tl.max(lse, axis=0)  # finite: split 0 always holds the sequence's first key
    weight = tl.where(lse == float("-inf"), 0.0, tl.exp(lse - top))
    parts = tl.load(part_out_ptr + seq * stride_o_b + head * stride_o_h + splits[:, None] * stride_o_s + dims[None, :],
                    mask=real[:, None], other=0.0)
    merged = tl.sum(parts * weight[:, None], axis=0) / tl.sum(weight, axis=0)
    tl.store(out_ptr + seq * stride_out_b + head * stride_out_h + dims, merged.to(out_ptr.dtype.element_ty))
