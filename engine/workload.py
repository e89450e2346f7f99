"""The queue of requests a run serves: generated from a seed, or read from a CSV/JSON file.

The generated workload follows the course's calibration: prompts spread mildly around a fixed mean,
output lengths log-uniform over [a, spread x a], both rescaled to exact totals, so changing the spread
moves tokens between requests without changing how much work there is.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import numpy as np

# The article's scenario: 256 requests whose prompts total 350,309 tokens and outputs 65,536.
PROMPT_TOKENS_PER_REQUEST = 350_309 / 256
OUTPUT_TOKENS_PER_REQUEST = 256
PROMPT_CV = 0.3  # "a mild spread around the mean": normal with a 0.3 coefficient of variation

MAX_WORKLOAD_REQUESTS = 4096  # bound on the work one run may ask for (files included)
MAX_REQUEST_TOKENS = 1_000_000
# A file of MAX_WORKLOAD_REQUESTS rows of two 7-digit numbers is ~66 kB; 1 MiB leaves room for spacing and
# comments-free JSON, and bounds what a mistaken path (a log, a dataset) costs to refuse.
MAX_WORKLOAD_BYTES = 1 << 20
MAX_JSON_DEPTH = 16  # the format's depth is 2 ({"prompt_len": [...]}): anything deeper is not a workload
MAX_NUMBER_DIGITS = 20  # int() of a 5,000-digit JSON number would raise or take long; tokens fit in 7


class WorkloadError(ValueError):
    """A workload file or array that cannot be served; the message says what is wrong."""


@dataclass(frozen=True)
class Workload:
    """Requests in arrival (= id) order: all queued at t = 0, or at the times a file gave (`arrival_s`)."""

    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    arrival_s: np.ndarray | None = None  # float64 seconds, nondecreasing; None: all at once

    def __post_init__(self) -> None:
        prompt = np.ascontiguousarray(self.prompt_len, dtype=np.int64)
        output = np.ascontiguousarray(self.output_len, dtype=np.int64)
        prompt.setflags(write=False)
        output.setflags(write=False)
        object.__setattr__(self, "prompt_len", prompt)
        object.__setattr__(self, "output_len", output)
        if self.arrival_s is not None:
            arrival = np.ascontiguousarray(self.arrival_s, dtype=np.float64)
            if arrival.shape != prompt.shape or not np.isfinite(arrival).all() or (arrival < 0).any() \
                    or (np.diff(arrival) < 0).any():
                raise WorkloadError("arrival_s must be one finite time >= 0 per request, in nondecreasing order")
            arrival.setflags(write=False)
            object.__setattr__(self, "arrival_s", arrival)

    @property
    def num_requests(self) -> int:
        return int(self.prompt_len.shape[0])

    @property
    def total_prompt_tokens(self) -> int:
        return int(self.prompt_len.sum())

    @property
    def total_output_tokens(self) -> int:
        return int(self.output_len.sum())


def _round_to_total(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to `weights`, each >= 1, summing exactly to `total` (largest remainder)."""
    raw = weights / weights.sum() * total
    base = np.maximum(np.floor(raw).astype(np.int64), 1)
    short = total - int(base.sum())
    if short > 0:
        # Stable sort on the fractional part: ties go to the lower index, so the result is reproducible.
        order = np.argsort(-(raw - np.floor(raw)), kind="stable")
        base[order[:short]] += 1
    elif short < 0:
        order = np.argsort(raw - np.floor(raw), kind="stable")
        for i in order:
            if short == 0:
                break
            if base[i] > 1:
                base[i] -= 1
                short += 1
    return base


def _normal_quantiles(q: np.ndarray) -> np.ndarray:
    inv = NormalDist().inv_cdf
    return np.array([inv(float(x)) for x in q])


@lru_cache(maxsize=64)
def generate_workload(num_requests: int = 256, spread: float = 16.0, seed: int = 0) -> Workload:
    """The calibration workload: same (num_requests, spread, seed) gives the same bits.

    Lengths are stratified quantiles of the two distributions (so every workload has exactly the described
    shape: shortest output ~a, longest ~spread x a), dealt out in an order the seed shuffles. Sampling them
    instead would add a second source of noise that moves headline figures by several percent per seed.
    """
    rng = np.random.default_rng(seed)
    q = (np.arange(num_requests) + 0.5) / num_requests
    prompt_weights = np.clip(1.0 + PROMPT_CV * _normal_quantiles(q), 0.05, None)[rng.permutation(num_requests)]
    # Log-uniform over [1, spread]; the shuffle is drawn before the spread is applied, so dragging the
    # spread reshapes the same queue rather than dealing a new one.
    output_weights = np.power(float(spread), q)[rng.permutation(num_requests)]
    prompt = _round_to_total(prompt_weights, round(PROMPT_TOKENS_PER_REQUEST * num_requests))
    output = _round_to_total(output_weights, OUTPUT_TOKENS_PER_REQUEST * num_requests)
    return Workload(prompt, output)


def _validate_lengths(prompt: list, output: list, source: str, arrival: list | None = None) -> Workload:
    if len(prompt) != len(output):
        raise WorkloadError(f"{source}: prompt_len has {len(prompt)} entries but output_len has {len(output)}")
    if not prompt:
        raise WorkloadError(f"{source}: no requests")
    if len(prompt) > MAX_WORKLOAD_REQUESTS:
        raise WorkloadError(f"{source}: {len(prompt)} requests; at most {MAX_WORKLOAD_REQUESTS} are allowed")
    for name, values in (("prompt_len", prompt), ("output_len", output)):
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (
                isinstance(v, float) and v.is_integer()
            ):
                raise WorkloadError(f"{source}: {name}[{i}] = {_short(v)} is not an integer")
            if not 1 <= int(v) <= MAX_REQUEST_TOKENS:
                raise WorkloadError(f"{source}: {name}[{i}] = {v} is outside 1..{MAX_REQUEST_TOKENS:,}")
    prompt_arr, output_arr = np.array([int(v) for v in prompt]), np.array([int(v) for v in output])
    if arrival is None:
        return Workload(prompt_arr, output_arr)
    return _timed_workload(prompt_arr, output_arr, arrival, source)


def _timed_workload(prompt: np.ndarray, output: np.ndarray, arrival: list, source: str) -> Workload:
    """Requests renumbered in arrival order (ties keep file order), times relative to the first arrival."""
    if len(arrival) != len(prompt):
        raise WorkloadError(f"{source}: arrival_s has {len(arrival)} entries but prompt_len has {len(prompt)}")
    for i, v in enumerate(arrival):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise WorkloadError(f"{source}: arrival_s[{i}] = {_short(v)} is not a time in seconds >= 0")
    times = np.asarray(arrival, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    times = times[order] - times[order[0]]
    return Workload(prompt[order], output[order], times)


def _short(value: object, limit: int = 40) -> str:
    """A value as it may appear in an error line: never the whole of a huge input."""
    text = value if isinstance(value, str) else type(value).__name__ if isinstance(value, (list, dict)) else repr(value)
    return repr(text[:limit] + ("..." if len(text) > limit else ""))


def _json_number(text: str) -> int | float:
    if len(text.lstrip("-").split(".")[0].split("e")[0].split("E")[0]) > MAX_NUMBER_DIGITS:
        raise WorkloadError(f"a number has more than {MAX_NUMBER_DIGITS} digits")
    return float(text) if any(c in text for c in ".eE") else int(text)


def _json_depth(text: str) -> int:
    """Deepest nesting of [ and { (brackets inside strings count too: a workload has none)."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def _bad_constant(name: str):
    raise WorkloadError(f"{name} is not a token count")


def parse_workload(text: str, source: str = "workload") -> Workload:
    """Parse a CSV with header `prompt_len,output_len` (optionally `,arrival_s`) or the trace layout
    `TIMESTAMP,ContextTokens,GeneratedTokens`, or a JSON object {"prompt_len": [...], "output_len": [...]}
    (optionally "arrival_s": [...]). Timed requests are numbered in arrival order, the first at 0 s."""
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark (Excel's "CSV UTF-8")
    stripped = text.lstrip()
    if stripped.startswith("{"):
        if _json_depth(stripped) > MAX_JSON_DEPTH:
            raise WorkloadError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels; a workload is an "
                                'object of two lists, {"prompt_len": [...], "output_len": [...]}')
        try:
            obj = json.loads(text, parse_int=_json_number, parse_float=_json_number, parse_constant=_bad_constant)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        except WorkloadError as exc:
            raise WorkloadError(f"{source}: {exc}") from None
        if not isinstance(obj, dict) or "prompt_len" not in obj or "output_len" not in obj:
            raise WorkloadError(f'{source}: expected a JSON object with "prompt_len" and "output_len" lists')
        prompt, output, arrival = obj["prompt_len"], obj["output_len"], obj.get("arrival_s")
        if not isinstance(prompt, list) or not isinstance(output, list):
            raise WorkloadError(f'{source}: "prompt_len" and "output_len" must be lists of integers')
        if arrival is not None and not isinstance(arrival, list):
            raise WorkloadError(f'{source}: "arrival_s" must be a list of times in seconds')
        return _validate_lengths(prompt, output, source, arrival)
    try:
        return _parse_csv(text, source)
    except csv.Error as exc:  # a NUL byte, a field past csv's size limit
        raise WorkloadError(f"{source}: not a readable CSV ({str(exc)[:60]})") from None


EPOCH = datetime(1970, 1, 1)
# Accepted CSV layouts: header -> (prompt column, output column, arrival column or None).
CSV_LAYOUTS = {
    ("prompt_len", "output_len"): ("prompt_len", "output_len", None),
    ("prompt_len", "output_len", "arrival_s"): ("prompt_len", "output_len", "arrival_s"),
    # The public LLM-inference trace layout (Azure's): wall-clock timestamps, made relative to the first.
    ("TIMESTAMP", "ContextTokens", "GeneratedTokens"): ("ContextTokens", "GeneratedTokens", "TIMESTAMP"),
}


def _csv_layout(header: list[str], source: str) -> tuple[list[int], int | None]:
    """Column indices of (prompt, output) and of the arrival time (None when the file has none)."""
    for names, (prompt, output, arrival) in CSV_LAYOUTS.items():
        if sorted(header) == sorted(names):
            return [header.index(prompt), header.index(output)], None if arrival is None else header.index(arrival)
    raise WorkloadError(f"{source}: CSV header must be 'prompt_len,output_len' (optionally with 'arrival_s') or "
                        f"'TIMESTAMP,ContextTokens,GeneratedTokens'; got {_short(','.join(header))}")


def _time_cell(cell: str, timestamp: bool) -> float:
    """Seconds from a cell: a number, or (for TIMESTAMP) an ISO date and time; ValueError otherwise."""
    if timestamp and not cell.replace(".", "", 1).isdigit():
        return (datetime.fromisoformat(cell).replace(tzinfo=None) - EPOCH).total_seconds()  # no local zone
    value = float(cell)
    if not math.isfinite(value) or value < 0 or len(cell) > 40:
        raise ValueError(cell)
    return value


def _parse_csv(text: str, source: str) -> Workload:
    header: list[str] | None = None
    prompt, output, times = [], [], []
    cols: list[int] = []
    at: int | None = None
    for line_no, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [c.strip() for c in row]
            cols, at = _csv_layout(header, source)
            continue
        if len(prompt) >= MAX_WORKLOAD_REQUESTS:  # checked while reading: never builds a huge list
            raise WorkloadError(f"{source}: more than {MAX_WORKLOAD_REQUESTS} requests; "
                                f"at most {MAX_WORKLOAD_REQUESTS} are allowed")
        if len(row) != len(header):
            raise WorkloadError(f"{source}: line {line_no} has {len(row)} fields, expected {len(header)}")
        cells = [row[i].strip() for i in cols]
        if not all(c.isascii() and c.isdigit() and len(c) <= MAX_NUMBER_DIGITS for c in cells):
            raise WorkloadError(f"{source}: line {line_no} is not two integers (token counts): "
                                f"{_short(','.join(row))}")
        prompt.append(int(cells[0]))
        output.append(int(cells[1]))
        if at is not None:
            try:
                times.append(_time_cell(row[at].strip(), header[at] == "TIMESTAMP"))
            except ValueError:
                raise WorkloadError(f"{source}: line {line_no}: {header[at]} {_short(row[at].strip())} is not a "
                                    "time (seconds >= 0, or a date and time)") from None
    if header is None:
        raise WorkloadError(f"{source}: empty file")
    return _validate_lengths(prompt, output, source, times if at is not None else None)


def load_workload(path: str | Path) -> Workload:
    """Read a workload file (CSV or JSON, by content): a regular file of at most MAX_WORKLOAD_BYTES.

    Devices (/dev/zero), pipes and FIFOs are refused before they are opened for reading (a FIFO would
    block, a device never ends); the size is checked again while reading, in case the file grows.
    """
    p = Path(path)
    name = _short(str(p), 80)
    try:
        info = os.stat(p)
        if not stat.S_ISREG(info.st_mode):
            raise WorkloadError(f"workload: {name} is not a regular file")
        if info.st_size > MAX_WORKLOAD_BYTES:
            raise WorkloadError(f"workload: {name} is larger than {MAX_WORKLOAD_BYTES / 2**20:g} MiB, the limit")
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):  # replaced since the stat above
                raise WorkloadError(f"workload: {name} is not a regular file")
            data = fh.read(MAX_WORKLOAD_BYTES + 1)
    except OSError as exc:
        raise WorkloadError(f"workload: cannot read {name} ({exc.strerror})") from None
    if len(data) > MAX_WORKLOAD_BYTES:
        raise WorkloadError(f"workload: {name} is larger than {MAX_WORKLOAD_BYTES / 2**20:g} MiB, the limit")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise WorkloadError(f"workload: {name} is not a UTF-8 text file") from None
    return parse_workload(text, source=str(p)[:80])
