"""Fused Triton twins of kernels.fused_ops: one kernel each for add + RMSNorm, q/k norm + rotary + KV
store, and SwiGLU's silu * up.

Every grid depends only on tensor shapes and every input lives on the device, so a decode pass built from
them can be captured in a CUDA graph. Rounding follows the torch reference: fp32 inside, the model's dtype
wherever Hugging Face rounds (after the residual add, after normalising, after scaling, after silu).
Run on a CPU with TRITON_INTERPRET=1 (set before import), as the tests do.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


def _warps(width: int) -> int:
    """About 256 elements per warp, 1 to 16 warps."""
    return max(1, min(16, triton.next_power_of_2(width) // 256))


@triton.jit
def _add_rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, stride_x, stride_r, stride_o, stride_ro,
                         n_cols, eps, HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        # Round the sum to the model's dtype first, as a torch add in that dtype does.
        x = (x.to(tl.float32) + tl.load(res_ptr + row * stride_r + cols, mask=mask, other=0.0).to(tl.float32))
        x = x.to(out_ptr.dtype.element_ty)
        tl.store(res_out_ptr + row * stride_ro + cols, x, mask=mask)
    xf = x.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, axis=0) / n_cols + eps)
    normed = (xf * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)


def add_rms_norm_triton(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                        eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x, residual [T, H] (last dim contiguous). Returns (norm(x + residual), x + residual); with no
    residual, (norm(x), x)."""
    rows, cols = x.shape
    assert x.stride(-1) == 1 and (residual is None or residual.stride(-1) == 1)
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else x
    block = triton.next_power_of_2(cols)
    res = residual if residual is not None else x
    _add_rms_norm_kernel[(rows,)](x, res, weight, out, res_out, x.stride(0), res.stride(0), out.stride(0),
                                  res_out.stride(0), cols, eps, HAS_RESIDUAL=residual is not None, BLOCK=block,
                                  num_warps=_warps(cols))
    return out, res_out


@triton.jit
def _qk_norm_rope_store_kernel(qkv_ptr, pos_ptr, qw_ptr, kw_ptr, table_ptr, slots_ptr, q_out_ptr, k_cache_ptr,
                               v_cache_ptr, stride_qkv, stride_table, stride_qo_t, stride_qo_h, stride_c_slot,
                               stride_c_head, eps, NUM_Q: tl.constexpr, NUM_KV: tl.constexpr,
                               HEAD_DIM: tl.constexpr):
    tok = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)  # 0..NUM_Q-1 queries, then NUM_KV keys, then NUM_KV values
    HALF: tl.constexpr = HEAD_DIM // 2
    lo = tl.arange(0, HALF)
    src = qkv_ptr + tok * stride_qkv + head * HEAD_DIM
    x1 = tl.load(src + lo)
    x2 = tl.load(src + HALF + lo)
    slot = tl.load(slots_ptr + tok).to(tl.int64)
    if head >= NUM_Q + NUM_KV:  # a value head: straight into its slot
        dst = v_cache_ptr + slot * stride_c_slot + (head - NUM_Q - NUM_KV) * stride_c_head
        tl.store(dst + lo, x1)
        tl.store(dst + HALF + lo, x2)
    else:
        # Branches, not a pointer select: each loads or stores through one fixed pointer.
        if head < NUM_Q:
            w1 = tl.load(qw_ptr + lo).to(tl.float32)
            w2 = tl.load(qw_ptr + HALF + lo).to(tl.float32)
        else:
            w1 = tl.load(kw_ptr + lo).to(tl.float32)
            w2 = tl.load(kw_ptr + HALF + lo).to(tl.float32)
        f1, f2 = x1.to(tl.float32), x2.to(tl.float32)
        rstd = 1.0 / tl.sqrt((tl.sum(f1 * f1, axis=0) + tl.sum(f2 * f2, axis=0)) / HEAD_DIM + eps)
        dtype = x1.dtype
        n1 = ((f1 * rstd).to(dtype).to(tl.float32) * w1).to(dtype).to(tl.float32)
        n2 = ((f2 * rstd).to(dtype).to(tl.float32) * w2).to(dtype).to(tl.float32)
        pos = tl.load(pos_ptr + tok).to(tl.int64)
        cos = tl.load(table_ptr + pos * stride_table + lo)
        sin = tl.load(table_ptr + pos * stride_table + HALF + lo)
        r1 = (n1 * cos - n2 * sin).to(dtype)
        r2 = (n2 * cos + n1 * sin).to(dtype)
        if head < NUM_Q:
            tl.store(q_out_ptr + tok * stride_qo_t + head * stride_qo_h + lo, r1)
            tl.store(q_out_ptr + tok * stride_qo_t + head * stride_qo_h + HALF + lo, r2)
        else:
            dst = k_cache_ptr + slot * stride_c_slot + (head - NUM_Q) * stride_c_head
            tl.store(dst + lo, r1)
            tl.store(dst + HALF + lo, r2)


def qk_norm_rope_store_triton(qkv: torch.Tensor, positions: torch.Tensor, q_weight: torch.Tensor,
                              k_weight: torch.Tensor, table: torch.Tensor, eps: float, k_cache: torch.Tensor,
                              v_cache: torch.Tensor, slots: torch.Tensor, num_q_heads: int,
                              num_kv_heads: int) -> torch.Tensor:
    """One program per (token, head) of the fused projection; see fused_ops.qk_norm_rope_store."""
    t = qkv.shape[0]
    head_dim = k_cache.shape[-1]
    assert qkv.stride(-1) == 1 and table.stride(-1) == 1 and k_cache.stride() == v_cache.stride()
    assert k_cache.stride(-1) == 1 and k_cache.stride(0) == k_cache.shape[1] * k_cache.stride(1), "slot-major pages"
    q = torch.empty((t, num_q_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    if t == 0:
        return q
    _qk_norm_rope_store_kernel[(t, num_q_heads + 2 * num_kv_heads)](
        qkv, positions, q_weight, k_weight, table, slots, q, k_cache, v_cache,
        qkv.stride(0), table.stride(0), q.stride(0), q.stride(1), k_cache.stride(1), k_cache.stride(2), eps,
        NUM_Q=num_q_heads, NUM_KV=num_kv_heads, HEAD_DIM=head_dim, num_warps=1,
    )
    return q


@triton.jit
def _silu_and_mul_kernel(gu_ptr, out_ptr, stride_gu, stride_o, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0)
    up = tl.load(gu_ptr + row * stride_gu + n_cols + cols, mask=mask, other=0.0)
    g = gate.to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(gate.dtype)  # F.silu in fp32, rounded like torch
    tl.store(out_ptr + row * stride_o + cols, (act.to(tl.float32) * up.to(tl.float32)).to(gate.dtype), mask=mask)


def silu_and_mul_triton(gate_up: torch.Tensor) -> torch.Tensor:
    rows, width = gate_up.shape
    cols = width // 2
    assert gate_up.stride(-1) == 1
    out = torch.empty((rows, cols), dtype=gate_up.dtype, device=gate_up.device)
    block = min(1024, triton.next_power_of_2(cols))
    if rows:
        _silu_and_mul_kernel[(rows, triton.cdiv(cols, block))](gate_up, out, gate_up.stride(0), out.stride(0), cols,
                                                                BLOCK=block, num_warps=_warps(block))
    return out
