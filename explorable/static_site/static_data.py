"""How the static build stores a state's data compactly and exactly: each array once, in byte planes (of the
items, of their differences, or of indices into their few distinct values), gzipped; arrays that many files
hold, and properties every state sets alike, left to the page. `cb-static.js` undoes it in the browser and
hands Bokeh the same bytes the served app would have sent.
"""
from __future__ import annotations

import base64
import gzip
import json
from typing import Any

import numpy as np


def byte_planes(raw: bytes, width: int, delta: bool) -> dict[str, Any]:
    """`raw` (little-endian items of `width` bytes) as gzipped byte planes; with `delta`, each item's bits first
    replaced by their difference from the item before, as integers of that width (exact, wrapping): times that
    only grow then differ by small numbers whose high bytes are all zero."""
    items = np.frombuffer(raw, dtype=np.dtype(f"<i{width}") if delta else np.uint8)
    if delta:
        items = np.diff(items, prepend=items.dtype.type(0)).astype(items.dtype)  # wraps like the page's typed arrays
    planes = np.frombuffer(items.tobytes(), dtype=np.uint8).reshape(-1, width).T.tobytes()
    return {"delta": delta, "data": base64.b64encode(gzip.compress(planes, 9, mtime=0)).decode()}


def grid_exponent(values: np.ndarray) -> int | None:
    """The largest e for which every value is an integer multiple of 2**e, those integers within int32; None
    when there is none (a value that is not finite, or one with more significant bits than that allows)."""
    if not len(values) or not np.all(np.isfinite(values)):
        return None
    nonzero = values[values != 0]
    if not len(nonzero):
        return 0
    mantissa, exponent = np.frexp(nonzero)  # value = mantissa * 2**exponent, 0.5 <= |mantissa| < 1
    digits = np.abs(mantissa * 2.0**53).astype(np.int64)  # the 53 bits of each value as an integer
    lowest = np.log2(digits & -digits).astype(np.int64)  # its lowest set bit
    e = int((exponent - 53 + lowest).min())
    return e if np.abs(values).max() / 2.0**e < 2**31 else None


def grid_planes(values: np.ndarray, e: int) -> dict[str, Any]:
    """Floats that all lie on the grid of 2**e (the strips' times and cache usage, which the views snap to
    one) as the differences of their integer multiples, in the fewest bytes that hold them, in planes.
    Exact: the page multiplies back by 2**e, which loses no bit."""
    k = np.round(values / 2.0**e).astype(np.int64)
    d = np.diff(k, prepend=0)
    width = next(w for w in (1, 2, 4) if -(2 ** (8 * w - 1)) <= d.min() and d.max() < 2 ** (8 * w - 1))
    entry = byte_planes(d.astype(f"<i{width}").tobytes(), width, False)
    entry.update(grid=e, steps=width)
    return entry


def encodings(raw: bytes, width: int, dtype: str = ""):
    """The ways to store one array, exactly; the smallest is kept: byte planes, of the items or of their
    differences, or, for an array of few distinct items (the cache usage at each pass), the distinct items
    once and each item's index among them, in planes, or, for floats on a power-of-two grid, the differences
    of their multiples."""
    yield byte_planes(raw, width, False)
    if dtype in ("float32", "float64"):
        values = np.frombuffer(raw, dtype=f"<f{width}").astype(np.float64)
        e = grid_exponent(values)
        if e is not None:
            yield grid_planes(values, e)
    if width <= 4:
        yield byte_planes(raw, width, True)
    items = np.frombuffer(raw, dtype=f"<u{width}")  # the items' bits: distinct means bit for bit
    distinct, index = np.unique(items, return_inverse=True)
    if len(distinct) <= 65536 and len(distinct) < len(items) // 2:
        index_width = 1 if len(distinct) <= 256 else 2
        entry = byte_planes(index.astype(f"<u{index_width}").tobytes(), index_width, False)
        entry.update(values=base64.b64encode(gzip.compress(distinct.tobytes(), 9, mtime=0)).decode(),
                     index=index_width)
        yield entry


def pack(patch: dict[str, dict]) -> tuple[dict[str, dict], list[dict]]:
    """The patch with each array moved into a table, stored once however often it appears (the two strips share
    their time axis), its bytes shuffled into planes (every first byte, then every second, ...) before gzip:
    float32 times compress to about 70% of Bokeh's plain gzip. The page restores Bokeh's own encoding."""
    table: list[dict] = []
    index: dict[str, int] = {}

    def walk(value):
        if isinstance(value, dict) and value.get("type") == "ndarray" and isinstance(value.get("array"), dict):
            raw = gzip.decompress(base64.b64decode(value["array"]["data"]))
            width = np.dtype(value["dtype"]).itemsize
            entry = {"dtype": value["dtype"], "shape": value["shape"], "order": value["order"], "width": width}
            entry.update(min(encodings(raw, width, value["dtype"]),
                             key=lambda e: len(e["data"]) + len(e.get("values", ""))))
            key = json.dumps(entry, sort_keys=True)
            if key not in index:
                index[key] = len(table)
                table.append(entry)
            return {"type": "cb-array", "i": index[key]}
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        return value

    return walk(patch), table


def constant_props(results: dict[str, dict]) -> set[tuple[str, str]]:
    """(model, property) pairs every state sets to one same value (the lanes' 256 rows, the error pane of a
    grid where everything runs): the page already has that value, as the shell is one of the states."""
    seen: dict[tuple[str, str], set[str]] = {}
    for r in results.values():
        for name, props in r["patch"].items():
            for attr, value in props.items():
                seen.setdefault((name, attr), set()).add(json.dumps(value, sort_keys=True))
    count = {pair: sum(pair[1] in r["patch"].get(pair[0], {}) for r in results.values()) for pair in seen}
    return {pair for pair, values in seen.items() if len(values) == 1 and count[pair] == len(results)}


SHARED_SHARE = 0.1  # an array in more than this share of the files (the workload's lengths) goes in the page


def share(packs: dict[str, tuple[dict, list[dict]]]) -> tuple[dict[str, tuple[dict, list[dict]]], list[dict]]:
    """Arrays that many files hold move into one table the page carries; files refer to them by position."""
    count: dict[str, int] = {}
    for _, arrays in packs.values():
        for a in arrays:
            k = json.dumps(a, sort_keys=True)
            count[k] = count.get(k, 0) + 1
    shared_keys = sorted(k for k, n in count.items() if n > max(1, SHARED_SHARE * len(packs)))
    shared = {k: i for i, k in enumerate(shared_keys)}
    out = {}
    for key, (patch, arrays) in packs.items():
        kept, refs = [], []
        for a in arrays:
            k = json.dumps(a, sort_keys=True)
            if k in shared:
                refs.append({"type": "cb-array", "s": shared[k]})
            else:
                refs.append({"type": "cb-array", "i": len(kept)})
                kept.append(a)

        def walk(value, refs=refs):
            if isinstance(value, dict) and value.get("type") == "cb-array":
                return refs[value["i"]]
            if isinstance(value, dict):
                return {k: walk(v) for k, v in value.items()}
            if isinstance(value, list):
                return [walk(v) for v in value]
            return value

        out[key] = (walk(patch), kept)
    return out, [json.loads(k) for k in shared_keys]
