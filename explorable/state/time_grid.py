"""The grids the charts' numbers are snapped to: finer than a pixel, coarse enough to store in few bytes.

Times are kept to a power of two near 1/65,536 of the run (the lanes' box zoom would need to magnify a
1,000-px chart about 60 times before one step of it covered a pixel), so that every value is an exact
float32 and a whole column is a list of small integers times one constant: the served app's patches and the
static build's files (`static_data.grid_planes`) carry the same numbers in far fewer bytes.
"""
from __future__ import annotations

import numpy as np

TIME_STEPS = 2**16  # a run's length in at least this many time quanta


def time_quantum(end: float) -> float:
    """The largest power of two that divides a run of length `end` into at least `TIME_STEPS` steps."""
    if not end > 0:
        return 1.0
    return float(2.0 ** np.floor(np.log2(end / TIME_STEPS)))


def snap(values: np.ndarray, quantum: float) -> np.ndarray:
    """Each value at the nearest multiple of `quantum` (float64; exact in float32 for a power-of-two quantum)."""
    return np.round(np.asarray(values, dtype=np.float64) / quantum) * quantum
