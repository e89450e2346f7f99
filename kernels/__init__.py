"""Hot loops: the numba scheduler core, and (for live mode) paged-attention kernels."""
