"""Paged prefill attention in Triton: every prefill chunk of a pass, causally, straight from the pages.

One launch per layer covers all chunks, where the reference (kernels.paged_attention) gathers each
chunk's keys into a contiguous copy and calls SDPA once per chunk per layer: a pass that admits ten
prompts made 36 x 10 x 5 small launches before, and now makes 36. Grid (query tiles, kv heads): a tile
is up to BLOCK_M consecutive queries of one chunk; the program stacks them with the query heads that
share its KV head (BLOCK_M x GROUP rows, so each K/V byte serves the whole group), walks the keys the
tile's last query can see in TILE_N-token steps gathered through the chunk's block table, and keeps an
online softmax. Keys past a query's own position are masked, so a chunk that continues a prompt
(computed_before > 0) attends to its cached prefix and causally within itself.

The host lays out the tiles (`prefill_tiles`); run on a CPU with TRITON_INTERPRET=1 set before import.
"""
from __future__ import annotations

import os

import numpy as np
import torch
import triton
import triton.language as tl

_ROWS = 64  # query rows per program (queries x group heads): tl.dot's M, and a 64 x TILE_N score tile
_TILE_N = 64  # keys per loop step: four 16-token pages
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"  # read once, as triton.jit does


@triton.jit
def _paged_prefill_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, tables_ptr, tiles_ptr, chunks_ptr,
    scale,
    stride_q_t, stride_q_h, stride_o_t, stride_o_h,
    stride_c_block, stride_c_tok, stride_c_head, stride_tab,
    GROUP: tl.constexpr, GROUP_P2: tl.constexpr, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr, DOT_PRECISION: tl.constexpr, STATIC_ITERS: tl.constexpr,
):
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    chunk = tl.load(tiles_ptr + 2 * tile)
    first_query = tl.load(tiles_ptr + 2 * tile + 1)  # index within the chunk
    first_row = tl.load(chunks_ptr + 3 * chunk)  # the chunk's first row in the pass's flat batch
    num_tokens = tl.load(chunks_ptr + 3 * chunk + 1)
    before = tl.load(chunks_ptr + 3 * chunk + 2)  # tokens of this sequence already in the pages

    r = tl.arange(0, BLOCK_M * GROUP_P2)
    query = first_query + r // GROUP_P2
    group_head = r % GROUP_P2
    row_ok = (query < num_tokens) & (group_head < GROUP)
    head = kv_head * GROUP + group_head
    rows = (first_row + query).to(tl.int64)
    position = before + query  # each query sees keys 0..position
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + rows[:, None] * stride_q_t + head[:, None] * stride_q_h + dims[None, :],
                mask=row_ok[:, None], other=0.0)

    kv_len = before + tl.minimum(first_query + BLOCK_M, num_tokens)  # what this tile's last query sees
    num_steps = tl.cdiv(kv_len, TILE_N)
    table = tables_ptr + chunk.to(tl.int64) * stride_tab
    running_max = tl.full([BLOCK_M * GROUP_P2], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_M * GROUP_P2], tl.float32)
    acc = tl.zeros([BLOCK_M * GROUP_P2, HEAD_DIM], tl.float32)
    # As in the decode kernel: a computed loop bound on a GPU, a static one (extra steps masked) when the
    # Triton 3.6 interpreter runs it.
    for step in range(0, STATIC_ITERS if STATIC_ITERS > 0 else num_steps):
        keys = step * TILE_N + tl.arange(0, TILE_N)
        valid = (keys < kv_len) & (step < num_steps)
        physical = tl.load(table + keys // BLOCK_SIZE, mask=valid, other=0)
        offs = (physical.to(tl.int64)[:, None] * stride_c_block + (keys % BLOCK_SIZE)[:, None] * stride_c_tok
                + kv_head * stride_c_head + dims[None, :])
        k = tl.load(k_cache_ptr + offs, mask=valid[:, None], other=0.0)
        v = tl.load(v_cache_ptr + offs, mask=valid[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale
        visible = valid[None, :] & (keys[None, :] <= position[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # rows with no key yet: exp -> 0, not NaN
        p = tl.exp(scores - shift[:, None])
        alpha = tl.exp(running_max - shift)
        running_sum = running_sum * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        running_max = new_max

    out = acc / tl.where(running_sum > 0, running_sum, 1.0)[:, None]
    tl.store(out_ptr + rows[:, None] * stride_o_t + head[:, None] * stride_o_h + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


def block_m(group: int) -> int:
    """Queries per tile: _ROWS rows of (query, group head) pairs."""
    return max(1, _ROWS // triton.next_power_of_2(group))


def prefill_tiles(chunks: list[tuple[int, int, int]], group: int) -> tuple[np.ndarray, np.ndarray]:
    """Host layout for one pass. chunks: (first row in the flat batch, tokens, computed_before) each.
    Returns tiles int32 [num_tiles, 2] (chunk, first query) and chunk info int32 [num_chunks, 3]."""
    m = block_m(group)
    info = np.asarray(chunks, dtype=np.int32).reshape(-1, 3)
    tiles = [(c, start) for c, (_, n, _) in enumerate(chunks) for start in range(0, n, m)]
    return np.asarray(tiles, dtype=np.int32).reshape(-1, 2), info


def paged_prefill(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, out: torch.Tensor,
                  tables: torch.Tensor, tiles: torch.Tensor, chunks: torch.Tensor, scale: float,
                  max_kv_len: int) -> None:
    """Write attention for every prefill row of the flat batch into `out` (decode rows untouched).

    q, out [T, Hq, D]; caches [num_blocks, block_size, Hkv, D]; tables int32 [num_chunks, width] (chunk
    order); tiles and chunks from `prefill_tiles`, on the device. max_kv_len (the longest chunk's
    computed_before + tokens) only bounds the interpreter's static loop.
    """
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    _, block_size, num_kv_heads, _ = k_cache.shape
    group = num_q_heads // num_kv_heads
    assert head_dim & (head_dim - 1) == 0 and block_size & (block_size - 1) == 0, "powers of two only"
    assert q.stride(-1) == 1 and out.stride(-1) == 1 and k_cache.stride(-1) == 1
    assert k_cache.stride() == v_cache.stride() and tables.stride(-1) == 1
    if tiles.shape[0] == 0:
        return
    tile_n = max(_TILE_N, block_size)
    static_iters = -(-max_kv_len // tile_n) if _INTERPRETED else 0
    _paged_prefill_kernel[(tiles.shape[0], num_kv_heads)](
        q, k_cache, v_cache, out, tables, tiles, chunks,
        scale,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), tables.stride(0),
        GROUP=group, GROUP_P2=triton.next_power_of_2(group), BLOCK_M=block_m(group), HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size, TILE_N=tile_n, DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        STATIC_ITERS=static_iters, num_warps=4,
    )
