"""The paged KV pool: one tensor [2, layers, num_blocks, block_size, kv_heads, head_dim].

The block count is the run config's (`cfg.num_gpu_blocks`, null block 0 included), so the real pool
hits the memory wall the simulator shows; the per-block shape comes from the live model. Each attention
layer writes its keys and values by flat slot (slot = block * block_size + offset; see
kernels.fused_ops.qk_norm_rope_store).
"""
from __future__ import annotations

import numpy as np
import torch

from engine.presets import ModelSpec


def kv_pool_bytes(spec: ModelSpec, num_blocks: int, block_size: int, dtype_bytes: int) -> int:
    return 2 * spec.num_layers * num_blocks * block_size * spec.num_kv_heads * spec.head_dim * dtype_bytes


class PagedKVCache:
    def __init__(self, spec: ModelSpec, num_blocks: int, block_size: int, device: torch.device | str,
                 dtype: torch.dtype) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        shape = (2, spec.num_layers, num_blocks, block_size, spec.num_kv_heads, spec.head_dim)
        # Zeros, not empty: padded graph rows read the null block, which must hold finite numbers.
        self.kv = torch.zeros(shape, device=device, dtype=dtype)

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys, values), each [num_blocks, block_size, kv_heads, head_dim]; views, not copies."""
        return [(self.kv[0, i], self.kv[1, i]) for i in range(self.kv.shape[1])]


def slot_mapping(block_ids: list[int], start: int, count: int, block_size: int) -> np.ndarray:
    """Flat slots of positions start..start+count-1 of a sequence whose pages are `block_ids`."""
    pos = np.arange(start, start + count)
    return np.asarray(block_ids, dtype=np.int64)[pos // block_size] * block_size + pos % block_size
