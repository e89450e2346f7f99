"""The paged KV pool: one tensor [2, layers, num_blocks, block_size, kv_heads, head_dim].

The block count is the run config's (`cfg.num_gpu_blocks`, null block 0 included), so the real pool
hits the memory wall the simulator shows; the per-block shape comes from the live model. Keys and
values are written by the model itself (`index_copy_` on a flat slot view, slot = block * size + offset).
"""
from __future__ import annotations

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

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()

    def layers(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys, values), each [num_blocks, block_size, kv_heads, head_dim]; views, not copies."""
        return [(self.kv[0, i], self.kv[1, i]) for i in range(self.kv.shape[1])]

    def slots(self, block_ids: list[int], positions: range) -> list[int]:
        """Flat slot of each position of a sequence whose pages are `block_ids`."""
        bs = self.block_size
        return [block_ids[p // bs] * bs + p % bs for p in positions]
