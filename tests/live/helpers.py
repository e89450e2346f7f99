"""Small workloads and a plain, cache-free Qwen3 forward pass the paged model is checked against."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from engine import RunConfig, Workload


def tight_config(**overrides) -> RunConfig:
    """12 requests, a 64-token budget and 14 blocks of 16: chunked prefill, preemption, head-of-line waits."""
    workload = Workload(np.array([20, 35, 7, 50, 18, 33, 41, 9, 27, 60, 12, 25]),
                        np.array([5, 12, 30, 8, 20, 3, 15, 9, 11, 6, 25, 14]))
    settings = dict(requests=12, workload=workload, num_gpu_blocks_override=14, max_num_batched_tokens=64,
                    max_num_seqs=8)
    settings.update(overrides)
    return RunConfig(**settings)


def contiguous_logits(model, tokens: list[int]) -> torch.Tensor:
    """Logits at every position of one sequence, from the weights alone: full causal attention over a
    contiguous K/V, written independently of engine.live.qwen3 (no pages, no cache, no shared helpers)."""
    spec = model.spec
    sd = {k: v.double() for k, v in model.hf_parameters().items()}
    hq, hkv, d = spec.num_q_heads, spec.num_kv_heads, spec.head_dim
    n = len(tokens)

    def rms(x, w):
        return w * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + spec.rms_norm_eps))

    inv = 1.0 / spec.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang, ang], -1).cos()[:, None], torch.cat([ang, ang], -1).sin()[:, None]

    def rope(x):
        return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin

    x = sd["model.embed_tokens.weight"][torch.tensor(tokens)]
    for i in range(spec.num_layers):
        p = f"model.layers.{i}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        q = rope(rms((h @ sd[p + "self_attn.q_proj.weight"].T).view(n, hq, d), sd[p + "self_attn.q_norm.weight"]))
        k = rope(rms((h @ sd[p + "self_attn.k_proj.weight"].T).view(n, hkv, d), sd[p + "self_attn.k_norm.weight"]))
        v = (h @ sd[p + "self_attn.v_proj.weight"].T).view(n, hkv, d)
        k, v = k.repeat_interleave(hq // hkv, dim=1), v.repeat_interleave(hq // hkv, dim=1)
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)
        x = x + attn.transpose(0, 1).reshape(n, hq * d) @ sd[p + "self_attn.o_proj.weight"].T
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        gate = h @ sd[p + "mlp.gate_proj.weight"].T
        x = x + (F.silu(gate) * (h @ sd[p + "mlp.up_proj.weight"].T)) @ sd[p + "mlp.down_proj.weight"].T
    head = sd["model.embed_tokens.weight"] if spec.tie_word_embeddings else sd["lm_head.weight"]
    return rms(x, sd["model.norm.weight"]) @ head.T
