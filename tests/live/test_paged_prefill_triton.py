"""The one-launch Triton paged prefill kernel equals the gather + SDPA reference, chunk by chunk
(Triton interpreter, fp32/fp16; bf16 is compiled for sm_90 in test_fused_ops.py)."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0); the CUDA kernels "
                    "are untested here")

from kernels.paged_attention import paged_prefill_reference  # noqa: E402
from kernels.paged_prefill_triton import block_m, paged_prefill, prefill_tiles  # noqa: E402

assert os.environ.get("TRITON_INTERPRET") == "1", "conftest.py sets TRITON_INTERPRET before kernels import"

DECODE_ROWS = 3  # rows before the chunks, as in a mixed pass: the kernel must leave them alone


def run_case(chunk_specs, num_q_heads, num_kv_heads, head_dim=16, block_size=16, dtype=torch.float32, seed=0):
    """chunk_specs: (tokens, computed_before) per chunk. Returns (kernel out, [(rows, reference)])."""
    gen = torch.Generator().manual_seed(seed)
    num_blocks = 2 + sum(-(-(n + b) // block_size) for n, b in chunk_specs)
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    total = DECODE_ROWS + sum(n for n, _ in chunk_specs)
    q = torch.randn(total, num_q_heads, head_dim, generator=gen)
    pool = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()  # scattered pages, never block 0
    chunks, tables, row = [], [], DECODE_ROWS
    for n, before in chunk_specs:
        tables.append([pool.pop() for _ in range(-(-(n + before) // block_size))])
        chunks.append((row, n, before))
        row += n
    table = torch.zeros(len(tables), max(map(len, tables)) + 1, dtype=torch.int32)  # a spare padding column
    for i, t in enumerate(tables):
        table[i, :len(t)] = torch.tensor(t)
    tiles, info = prefill_tiles(chunks, num_q_heads // num_kv_heads)
    out = torch.full(q.shape, 7.0, dtype=dtype)
    scale = head_dim ** -0.5
    paged_prefill(q.to(dtype), k_cache.to(dtype), v_cache.to(dtype), out, table, torch.from_numpy(tiles),
                  torch.from_numpy(info), scale, max(n + b for n, b in chunk_specs))
    expected = [(slice(r, r + n), paged_prefill_reference(q[r:r + n].double(), k_cache.double(), v_cache.double(),
                                                          torch.tensor(t), b, scale))
                for (r, n, b), t in zip(chunks, tables)]
    return out, expected


# Whole prompts, a continuation chunk with a cached prefix, a 2-token chunk, a chunk of exactly one page.
CHUNKS = [(5, 0), (37, 20), (2, 70), (16, 0)]


@pytest.mark.parametrize("heads", [(8, 2), (4, 4), (6, 2), (16, 1)], ids=["gqa4", "mha", "group3", "group16"])
def test_every_chunk_matches_the_reference_in_fp32(heads):
    out, expected = run_case(CHUNKS, *heads)
    for rows, ref in expected:
        torch.testing.assert_close(out[rows].double(), ref, atol=1e-5, rtol=1e-5)
    assert (out[:DECODE_ROWS] == 7).all()


@pytest.mark.parametrize("block_size", [4, 128])
def test_pages_smaller_and_larger_than_a_key_tile(block_size):
    out, expected = run_case([(70, 0), (9, 130)], 4, 2, block_size=block_size, seed=1)
    for rows, ref in expected:
        torch.testing.assert_close(out[rows].double(), ref, atol=1e-5, rtol=1e-5)


def test_fp16_matches_within_half_precision():
    out, expected = run_case(CHUNKS, 8, 2, dtype=torch.float16, seed=2)
    assert out.dtype == torch.float16
    for rows, ref in expected:
        torch.testing.assert_close(out[rows].double(), ref, atol=3e-3, rtol=3e-3)


def test_tiles_cover_each_chunk_once_in_blocks_of_queries():
    tiles, info = prefill_tiles([(0, 40, 0), (40, 3, 9)], group=4)
    m = block_m(4)
    assert m == 16
    assert tiles.tolist() == [[0, 0], [0, 16], [0, 32], [1, 0]]
    assert info.tolist() == [[0, 40, 0], [40, 3, 9]]
    assert block_m(1) * 1 == block_m(16) * 16 == 64  # every tile stacks 64 (query, head) rows
    assert np.asarray(prefill_tiles([], 4)[0]).shape == (0, 2)
