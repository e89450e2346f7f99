"""The Triton split-KV paged-decode kernel equals the gather + SDPA reference (Triton interpreter, fp32/fp16).

The Triton 3.6 interpreter gets bf16 tl.dot wrong, so bf16 is only compiled for sm_90 (test_fused_ops.py).
"""
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0); the CUDA kernels "
                    "are untested here")

from kernels.paged_attention import paged_decode_reference  # noqa: E402
from kernels.paged_decode_triton import default_num_splits, paged_decode  # noqa: E402

assert os.environ.get("TRITON_INTERPRET") == "1", "conftest.py sets TRITON_INTERPRET before kernels import"


def paged_case(seq_lens, num_q_heads=8, num_kv_heads=2, head_dim=16, block_size=16, num_blocks=48, seed=0):
    """Random pages, and each sequence's blocks drawn from a shuffled pool (never the null block 0)."""
    gen = torch.Generator().manual_seed(seed)
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, generator=gen)
    q = torch.randn(len(seq_lens), num_q_heads, head_dim, generator=gen)
    width = max(-(-n // block_size) for n in seq_lens) + 1  # a spare column: padding must be ignored
    tables = torch.zeros(len(seq_lens), width, dtype=torch.int32)
    pool = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()
    for row, n in enumerate(seq_lens):
        for col in range(-(-n // block_size)):
            tables[row, col] = pool.pop()
    return q, k_cache, v_cache, tables, torch.tensor(seq_lens, dtype=torch.int32)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_triton_decode_matches_reference_in_fp32(num_splits):
    q, k, v, tables, lens = paged_case([1, 15, 16, 17, 100])
    scale = q.shape[-1] ** -0.5
    expected = paged_decode_reference(q.double(), k.double(), v.double(), tables, lens, scale)
    out = paged_decode(q, k, v, tables, lens, scale, num_splits=num_splits)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("block_size", [4, 128])
def test_pages_smaller_and_larger_than_a_tile(block_size):
    pool = 140 if block_size == 4 else 10
    q, k, v, tables, lens = paged_case([1, 70, 130, 300], block_size=block_size, num_blocks=pool)
    scale = q.shape[-1] ** -0.5
    expected = paged_decode_reference(q.double(), k.double(), v.double(), tables, lens, scale)
    torch.testing.assert_close(paged_decode(q, k, v, tables, lens, scale, num_splits=2).double(), expected,
                               atol=1e-5, rtol=1e-5)


def test_more_splits_than_blocks_leaves_empty_splits_harmless():
    q, k, v, tables, lens = paged_case([3, 20], num_q_heads=4, num_kv_heads=4)  # GQA group 1 too
    scale = 0.25
    expected = paged_decode_reference(q.double(), k.double(), v.double(), tables, lens, scale)
    torch.testing.assert_close(paged_decode(q, k, v, tables, lens, scale, num_splits=4).double(), expected,
                               atol=1e-5, rtol=1e-5)


def test_triton_decode_matches_reference_in_fp16():
    q, k, v, tables, lens = paged_case([5, 40, 64], seed=1)
    scale = q.shape[-1] ** -0.5
    expected = paged_decode_reference(q.double(), k.double(), v.double(), tables, lens, scale)
    out = paged_decode(q.half(), k.half(), v.half(), tables, lens, scale, num_splits=2)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), expected, atol=3e-3, rtol=3e-3)


def test_split_rule_fills_the_gpu_for_small_batches_only():
    assert default_num_splits(1, 8, 132) == 33
    assert default_num_splits(32, 8, 132) == 2
    assert default_num_splits(64, 8, 132) == 1
    assert default_num_splits(256, 8, 132) == 1
