"""A Qwen3-architecture decoder in plain torch, reading and writing a paged KV cache.

q/k/v and gate/up are fused into one projection each, as vLLM does; `hf_parameters()` names every
weight as Hugging Face does (`model.layers.{i}.self_attn.q_proj.weight`, ...), so a real checkpoint
loads by name. The forward pass takes a flat batch of tokens from many sequences (prefill chunks and
decodes mixed) plus an `AttentionMetadata` saying where each token's keys and values live in the pages;
it returns hidden states, and `compute_logits` finishes the rows that sample. Only shapes matter for
throughput, so random weights are the default.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from engine.presets import ModelSpec
from engine.live.backend import TORCH, Kernels
from kernels.fused_ops import rope_table
from kernels.paged_attention import paged_prefill_reference

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
    prefills: list[PrefillChunk] = field(default_factory=list)  # torch path: one entry per chunk
    decode_num_splits: int = 1
    kernels: Kernels = TORCH
    # Triton path: every chunk in one launch (kernels.paged_prefill_triton); None when there are none.
    prefill_tables: torch.Tensor | None = None  # int32 [num_chunks, width]
    prefill_tiles: torch.Tensor | None = None  # int32 [num_tiles, 2]
    prefill_chunks: torch.Tensor | None = None  # int32 [num_chunks, 3]
    prefill_max_kv_len: int = 0


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, **factory) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, **factory))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None,
                kernels: Kernels = TORCH) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual)."""
        return kernels.add_rms_norm(x, residual, self.weight, self.eps)


class Qwen3Attention(nn.Module):
    """q, k and v come from one fused projection (one GEMM; Hugging Face's three weights are its row blocks)."""

    def __init__(self, spec: ModelSpec, **factory) -> None:
        super().__init__()
        h, d = spec.hidden_size, spec.head_dim
        self.num_q_heads, self.num_kv_heads, self.head_dim = spec.num_q_heads, spec.num_kv_heads, d
        self.scale = d ** -0.5
        self.qkv_proj = nn.Linear(h, (spec.num_q_heads + 2 * spec.num_kv_heads) * d, bias=False, **factory)
        self.o_proj = nn.Linear(spec.num_q_heads * d, h, bias=False, **factory)
        self.q_norm = RMSNorm(d, spec.rms_norm_eps, **factory)
        self.k_norm = RMSNorm(d, spec.rms_norm_eps, **factory)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, rope: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        t = x.shape[0]
        # Store first: every query then reads its own key from the pages like any other.
        q = meta.kernels.qk_norm_rope_store(self.qkv_proj(x), positions, self.q_norm.weight, self.k_norm.weight,
                                            rope, self.q_norm.eps, k_cache, v_cache, meta.slot_mapping,
                                            self.num_q_heads, self.num_kv_heads)
        out = torch.empty_like(q)
        nd = meta.num_decodes
        if nd:
            meta.kernels.decode_attention(q[:nd], k_cache, v_cache, meta, self.scale, out[:nd])
        if meta.prefill_tiles is not None:
            from kernels.paged_prefill_triton import paged_prefill

            paged_prefill(q, k_cache, v_cache, out, meta.prefill_tables, meta.prefill_tiles, meta.prefill_chunks,
                          self.scale, meta.prefill_max_kv_len)
        for chunk in meta.prefills:
            rows = slice(chunk.start, chunk.start + chunk.num_tokens)
            out[rows] = paged_prefill_reference(q[rows], k_cache, v_cache, chunk.block_ids, chunk.computed_before,
                                                self.scale)
        return self.o_proj(out.view(t, self.num_q_heads * self.head_dim))


class Qwen3MLP(nn.Module):
    """SwiGLU with gate and up fused into one projection [2 I, H] (Hugging Face's two weights, stacked)."""

    def __init__(self, spec: ModelSpec, **factory) -> None:
        super().__init__()
        h, i = spec.hidden_size, spec.intermediate_size
        self.gate_up_proj = nn.Linear(h, 2 * i, bias=False, **factory)
        self.down_proj = nn.Linear(i, h, bias=False, **factory)

    def forward(self, x: torch.Tensor, kernels: Kernels = TORCH) -> torch.Tensor:
        return self.down_proj(kernels.silu_and_mul(self.gate_up_proj(x)))


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, **factory) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, **factory)
        self.self_attn = Qwen3Attention(spec, **factory)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, **factory)
        self.mlp = Qwen3MLP(spec, **factory)

    def forward(self, x, residual, positions, rope, k_cache, v_cache, meta):
        """vLLM's residual convention: the add that closes a sublayer is fused into the next norm, so a
        layer returns its MLP output and the residual stream separately."""
        x, residual = self.input_layernorm(x, residual, meta.kernels)
        x = self.self_attn(x, positions, rope, k_cache, v_cache, meta)
        x, residual = self.post_attention_layernorm(x, residual, meta.kernels)
        return self.mlp(x, meta.kernels), residual


class Qwen3Model(nn.Module):
    def __init__(self, spec: ModelSpec, **factory) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size, **factory)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(spec, **factory) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps, **factory)


# Hugging Face names of the row blocks of each fused weight, in order.
PACKED = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
          "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj")}


class Qwen3ForCausalLM(nn.Module):
    """Qwen3ForCausalLM's layout: `model.*` plus `lm_head` (shared with the embedding when tied), with q/k/v
    and gate/up fused; `hf_parameters()` gives every weight under its Hugging Face name."""

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
        self.rope: torch.Tensor | None = None  # cos/sin table, built for the positions a runner will use
        if self.model.embed_tokens.weight.device.type != "meta":
            self.prepare_rope(spec.max_model_len)

    def prepare_rope(self, max_positions: int) -> None:
        """(Re)build the rotary table if it covers fewer than max_positions positions or sits elsewhere."""
        device = self.model.embed_tokens.weight.device
        if self.rope is None or self.rope.shape[0] < max_positions or self.rope.device != device:
            size = max(max_positions, 0 if self.rope is None else self.rope.shape[0])
            self.rope = rope_table(self.spec.head_dim, self.spec.rope_theta, size, device)

    def hf_parameters(self) -> dict[str, torch.Tensor]:
        """Every weight under its Hugging Face checkpoint name; fused weights give views of their blocks."""
        spec = self.spec
        sizes = {"self_attn.qkv_proj": [spec.num_q_heads * spec.head_dim] + [spec.num_kv_heads * spec.head_dim] * 2,
                 "mlp.gate_up_proj": [spec.intermediate_size] * 2}
        params = {}
        for name, param in self.named_parameters():
            module = name.removesuffix(".weight")
            packed = next((key for key in PACKED if module.endswith("." + key)), None)
            if packed is None:
                params[name] = param
                continue
            prefix = module[: -len(packed)]
            for part, view in zip(PACKED[packed], param.split(sizes[packed], dim=0)):
                params[f"{prefix}{part}.weight"] = view
        return params

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                kv_layers: list[tuple[torch.Tensor, torch.Tensor]], meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states [T, hidden] before the final norm; the KV of every token lands in its slot."""
        if self.rope is None:
            self.prepare_rope(self.spec.max_model_len)
        x, residual = self.model.embed_tokens(input_ids), None
        for layer, (k_cache, v_cache) in zip(self.model.layers, kv_layers):
            x, residual = layer(x, residual, positions, self.rope, k_cache, v_cache, meta)
        return x + residual

    def compute_logits(self, hidden: torch.Tensor, kernels: Kernels = TORCH) -> torch.Tensor:
        """Final norm and output layer, for just the rows that sample."""
        weight = self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(self.model.norm(hidden, None, kernels)[0], weight)


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
