"""Setting a chart's data only when it changed.

Bokeh sends every assignment to a `ColumnDataSource.data` that belongs to a document, equal or not (its
descriptor skips its own equality check when it has a change event to send). The browser then decodes the
columns again, rebuilds the glyph's index and repaints its plot: a click on a --max-num-seqs stop resent
the --max-num-seqs curve, identical, and repainted that plot for nothing. Views set their data through
`set_data`, which compares first.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from bokeh.models import ColumnDataSource


def same_column(a: Any, b: Any) -> bool:
    """Whether two columns hold the same values (NaN equal to NaN), of one shape and kind."""
    if a is b:
        return True
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def set_data(source: ColumnDataSource, data: Mapping[str, Any]) -> bool:
    """Give `source` these columns unless it holds equal ones already; whether it was set."""
    old = source.data
    if old.keys() == data.keys() and all(same_column(old[k], data[k]) for k in data):
        return False
    source.data = dict(data)
    return True


__all__ = ["same_column", "set_data"]
