"""The live model's Triton kernels against their torch references, on one device and dtype.

The schedule digest cannot notice a kernel that computes the wrong numbers at the right speed, so a GPU
check runs this first: paged decode and prefill attention over scattered pages, and the fused norm,
rotary + KV store and SwiGLU kernels, each reported as max |Triton - reference| / max |reference|.
"""
from __future__ import annotations

import torch

from engine.presets import ModelSpec
from engine.config import cdiv


def tolerance(dtype: torch.dtype) -> float:
    """bf16 keeps 8 bits of mantissa: a few parts in a thousand of the output's scale is rounding; a wrong
    kernel is off by order one."""
    return 3e-2 if dtype == torch.bfloat16 else 2e-3


def kernel_errors(spec: ModelSpec, device: torch.device, dtype: torch.dtype,
                  short: bool = False) -> dict[str, float | str]:
    """Max |Triton - reference| / max |reference| per kernel; a kernel that raises gives its error's line.

    Sequences of 1, 17, 300 and 1,000 tokens (prefill: a whole 300-token prompt and a 60-token chunk at
    940); short=True divides the long ones by 10, for Triton's CPU interpreter, where they cost seconds.
    """
    from kernels import fused_ops
    from kernels.fused_ops_triton import add_rms_norm_triton, qk_norm_rope_store_triton, silu_and_mul_triton
    from kernels.paged_attention import paged_decode_reference, paged_prefill_reference
    from kernels.paged_decode_triton import default_num_splits, paged_decode
    from kernels.paged_prefill_triton import paged_prefill, prefill_tiles

    gen = torch.Generator(device=device).manual_seed(0)
    hq, hkv, d, block = spec.num_q_heads, spec.num_kv_heads, spec.head_dim, 16

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)

    def rel_err(got, want):
        return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6))

    seq_lens = [1, 17, 30, 100] if short else [1, 17, 300, 1000]
    prompt, chunk, chunk_start = (30, 6, 94) if short else (300, 60, 940)
    tables = _scattered_tables(gen, device, seq_lens, block)
    k_cache, v_cache = (randn(int(tables.max()) + 1, block, hkv, d) for _ in range(2))
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8

    def decode():
        q = randn(len(seq_lens), hq, d)
        got = paged_decode(q, k_cache, v_cache, tables, lens, d ** -0.5, default_num_splits(len(seq_lens), hkv, sms))
        return rel_err(got, paged_decode_reference(q.float(), k_cache.float(), v_cache.float(), tables, lens,
                                                   d ** -0.5))

    def prefill():  # a whole prompt (row 2's pages) and a chunk finishing row 3
        chunks = [(0, prompt, 0), (prompt, chunk, chunk_start)]
        qp = randn(prompt + chunk, hq, d)
        out = torch.zeros_like(qp)
        tiles, info = prefill_tiles(chunks, hq // hkv)
        paged_prefill(qp, k_cache, v_cache, out, tables[2:4].contiguous(), torch.from_numpy(tiles).to(device),
                      torch.from_numpy(info).to(device), d ** -0.5, seq_lens[-1])
        want = torch.cat([paged_prefill_reference(qp[r:r + n].float(), k_cache.float(), v_cache.float(),
                                                  tables[2 + i].long(), b, d ** -0.5)
                          for i, (r, n, b) in enumerate(chunks)])
        return rel_err(out, want)

    x, res, w = randn(5, spec.hidden_size), randn(5, spec.hidden_size), 1 + 0.1 * randn(spec.hidden_size)

    def add_norm():
        return max(rel_err(a, b) for a, b in zip(add_rms_norm_triton(x, res, w, 1e-6),
                                                 fused_ops.add_rms_norm(x, res, w, 1e-6)))

    def rope_store():
        qkv = randn(5, (hq + 2 * hkv) * d)
        positions = torch.tensor([0, 1, 700, 5000, 30000], device=device)
        table = fused_ops.rope_table(d, spec.rope_theta, 30001, device)
        slots = torch.tensor([16, 17, 40, 41, 60], device=device)
        results = []
        for fn in (qk_norm_rope_store_triton, fused_ops.qk_norm_rope_store):
            kc, vc = torch.zeros_like(k_cache), torch.zeros_like(v_cache)
            results.append((fn(qkv, positions, w[:d], w[d:2 * d], table, 1e-6, kc, vc, slots, hq, hkv), kc, vc))
        return max(rel_err(a, b) for a, b in zip(*results))

    def silu():
        gate_up = randn(5, 2 * spec.intermediate_size)
        return rel_err(silu_and_mul_triton(gate_up), fused_ops.silu_and_mul(gate_up))

    errors: dict[str, float | str] = {}
    for name, check in (("paged decode", decode), ("paged prefill", prefill), ("add + RMSNorm", add_norm),
                        ("q/k norm + rotary + store", rope_store), ("SiLU x up", silu)):
        try:
            errors[name] = check()
        except Exception as exc:  # noqa: BLE001  (one kernel's compile error must not hide the others)
            lines = str(exc).strip().splitlines()
            errors[name] = f"error: {type(exc).__name__}: {lines[0][:300] if lines else ''}"
    return errors


def _scattered_tables(gen: torch.Generator, device: torch.device, seq_lens: list[int], block: int) -> torch.Tensor:
    """One block table per sequence over randomly permuted pages (never the null block 0), padded with 0
    to a stride the live runner also uses (a multiple of 16)."""
    per_seq = [cdiv(n, block) for n in seq_lens]
    pages = (torch.randperm(sum(per_seq), generator=gen, device=device) + 1).int()
    tables = torch.zeros(len(seq_lens), cdiv(max(per_seq), 16) * 16, dtype=torch.int32, device=device)
    start = 0
    for row, n in enumerate(per_seq):
        tables[row, :n] = pages[start:start + n]
        start += n
    return tables
