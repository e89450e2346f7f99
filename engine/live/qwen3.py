"""A Qwen3-architecture decoder in plain torch, reading and writing a paged KV cache.

Parameter names are Hugging Face's (`model.layers.{i}.self_attn.q_proj.weight`, ...), so a real
checkpoint loads with `load_state_dict`. The forward pass takes a flat batch of tokens from many
sequences (prefill chunks and decodes mixed) plus an `AttentionMetadata` saying where each token's
keys and values live in the pages; it returns hidden states, and `compute_logits` finishes the rows
that sample. Only shapes matter for throughput, so random weights are the default.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from engine.live.kv_cache import store_kv
from engine.presets import ModelSpec
from kernels.paged_attention import paged_decode_reference, paged_prefill_reference

# Shapes the live executor can build without a checkpoint.
LIVE_PRESETS = ("Qwen3-8B", "Qwen3-0.6B", "tiny")
INIT_STD = 0.02  # the usual initializer range of Qwen3's config.json


@dataclass
class PrefillChunk:
    """One sequence's n >= 2 query tokens at rows start..start+n of the flat batch."""

    start: int
    num_tokens: int
    computed_before: int
    block_ids: torch.Tensor  # int64, on the model's device


@dataclass
class AttentionMetadata:
    """Where the pass's tokens sit in the paged cache. Decodes (1 query token) come first in the batch."""

    slot_mapping: torch.Tensor  # int64 [T]: block_id * block_size + offset for every new token
    num_decodes: int
    decode_block_tables: torch.Tensor | None = None  # int32 [num_decodes, max_blocks]
    decode_seq_lens: torch.Tensor | None = None  # int32 [num_decodes], keys incl. the new token
    prefills: list[PrefillChunk] = field(default_factory=list)
    decode_num_splits: int = 1
    use_triton: bool = False


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, **factory) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # As Hugging Face: normalise in fp32, cast back, then scale.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding over the whole head, computed in fp32. x: [T, H, D]."""
    head_dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32) / head_dim))
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)[:, None, :]
    cos, sin = angles.cos(), angles.sin()
    xf = x.float()
    half = head_dim // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


class Qwen3Attention(nn.Module):
    def __init__(self, spec: ModelSpec, **factory) -> None:
        super().__init__()
        h, d = spec.hidden_size, spec.head_dim
        self.num_q_heads, self.num_kv_heads, self.head_dim = spec.num_q_heads, spec.num_kv_heads, d
        self.rope_theta = spec.rope_theta
        self.scale = d ** -0.5
        self.q_proj = nn.Linear(h, spec.num_q_heads * d, bias=False, **factory)
        self.k_proj = nn.Linear(h, spec.num_kv_heads * d, bias=False, **factory)
        self.v_proj = nn.Linear(h, spec.num_kv_heads * d, bias=False, **factory)
        self.o_proj = nn.Linear(spec.num_q_heads * d, h, bias=False, **factory)
        self.q_norm = RMSNorm(d, spec.rms_norm_eps, **factory)
        self.k_norm = RMSNorm(d, spec.rms_norm_eps, **factory)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_norm(self.q_proj(x).view(t, self.num_q_heads, self.head_dim))
        k = self.k_norm(self.k_proj(x).view(t, self.num_kv_heads, self.head_dim))
        v = self.v_proj(x).view(t, self.num_kv_heads, self.head_dim)
        q = apply_rope(q, positions, self.rope_theta)
        k = apply_rope(k, positions, self.rope_theta)
        # Store first: every query then reads its own key from the pages like any other.
        store_kv(k_cache, v_cache, meta.slot_mapping, k, v)
        out = torch.empty_like(q)
        nd = meta.num_decodes
        if nd:
            out[:nd] = _decode_attention(q[:nd], k_cache, v_cache, meta, self.scale)
        for chunk in meta.prefills:
            rows = slice(chunk.start, chunk.start + chunk.num_tokens)
            out[rows] = paged_prefill_reference(q[rows], k_cache, v_cache, chunk.block_ids, chunk.computed_before,
                                                self.scale)
        return self.o_proj(out.view(t, self.num_q_heads * self.head_dim))


def _decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                      scale: float) -> torch.Tensor:
    if meta.use_triton:
        from kernels.paged_decode_triton import paged_decode

        return paged_decode(q, k_cache, v_cache, meta.decode_block_tables, meta.decode_seq_lens, scale,
                            meta.decode_num_splits)
    return paged_decode_reference(q, k_cache, v_cache, meta.decode_block_tables, meta.decode_seq_lens, scale)


class Qwen3MLP(nn.Module):
    def __init__(self, spec: ModelSpec, **factory) -> None:
        super().__init__()
        h, i = spec.hidden_size, spec.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False, **factory)
        self.up_proj = nn.Linear(h, i, bias=False, **factory)
        self.down_proj = nn.Linear(i, h, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, **factory) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, **factory)
        self.self_attn = Qwen3Attention(spec, **factory)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, **factory)
        self.mlp = Qwen3MLP(spec, **factory)

    def forward(self, x, positions, k_cache, v_cache, meta):
        x = x + self.self_attn(self.input_layernorm(x), positions, k_cache, v_cache, meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nn.Module):
    def __init__(self, spec: ModelSpec, **factory) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size, **factory)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(spec, **factory) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, **factory)


class Qwen3ForCausalLM(nn.Module):
    """Qwen3ForCausalLM's layout: `model.*` plus `lm_head` (shared with the embedding when tied)."""

    def __init__(self, spec: ModelSpec, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.spec = spec
        self.model = Qwen3Model(spec, **factory)
        if spec.tie_word_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False, **factory)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_layers: list[tuple[torch.Tensor, torch.Tensor]], meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states [T, hidden] before the final norm; the KV of every token lands in its slot."""
        x = self.model.embed_tokens(input_ids)
        for layer, (k_cache, v_cache) in zip(self.model.layers, kv_layers):
            x = layer(x, positions, k_cache, v_cache, meta)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm and output layer, for just the rows that sample."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(self.model.norm(hidden), weight)


@torch.no_grad()
def init_random_(model: Qwen3ForCausalLM, seed: int) -> None:
    """N(0, 0.02) matrices, unit norm weights: finite logits at full width (safe for throughput runs)."""
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.fill_(1.0)
        else:
            param.normal_(0.0, INIT_STD, generator=gen)


def build_model(spec: ModelSpec, device: torch.device | str, dtype: torch.dtype, seed: int = 0) -> Qwen3ForCausalLM:
    """A random-weight model allocated straight on `device` (no CPU copy of 16 GB first)."""
    with torch.device("meta"):
        model = Qwen3ForCausalLM(spec, dtype=dtype)
    model = model.to_empty(device=device)
    init_random_(model, seed)
    return model.eval().requires_grad_(False)
