"""The queue of requests a run serves: generated from a seed, or read from a CSV/JSON file.

The generated workload follows the course's calibration: prompts spread mildly around a fixed mean,
output lengths log-uniform over [a, spread x a], both rescaled to exact totals, so changing the spread
moves tokens between requests without changing how much work there is.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import stat
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property, lru_cache
from pathlib import Path
from statistics import NormalDist

import numpy as np

# The article's scenario: 256 requests whose prompts total 350,309 tokens and outputs 65,536.
PROMPT_TOKENS_PER_REQUEST = 350_309 / 256
OUTPUT_TOKENS_PER_REQUEST = 256
PROMPT_CV = 0.3  # "a mild spread around the mean": normal with a 0.3 coefficient of variation

MAX_WORKLOAD_REQUESTS = 4096  # bound on the work one run may ask for (a file with more rows is sampled down)
MAX_REQUEST_TOKENS = 1_000_000
# A file may hold a day of traffic: up to MAX_FILE_ROWS rows are read, and a run serves a seeded window of them
# (engine/workload_formats.py): DEFAULT_SAMPLE_REQUESTS of a file longer than MAX_WORKLOAD_REQUESTS rows, unless
# the run asks for another count.
MAX_FILE_ROWS = 100_000
DEFAULT_SAMPLE_REQUESTS = 1024
# MAX_FILE_ROWS rows of Mooncake's JSONL (about 250 bytes a row with its block hashes) are ~25 MB; 32 MiB bounds
# what a mistaken path (a log, a dataset) costs to refuse. The served page takes far less (explorable.state).
MAX_WORKLOAD_BYTES = 32 << 20
MAX_JSON_DEPTH = 16  # the format's depth is 2 ({"prompt_len": [...]}): anything deeper is not a workload
MAX_NUMBER_DIGITS = 20  # int() of a 5,000-digit JSON number would raise or take long; tokens fit in 7


def read_only(a: np.ndarray) -> np.ndarray:
    """`a`, no longer writable. Every array the compiled core is handed from a workload is read-only: being
    read-only is part of an array's type to numba, so one writable array would compile the core again."""
    a.setflags(write=False)
    return a


class WorkloadError(ValueError):
    """A workload file or array that cannot be served; the message says what is wrong."""


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests in arrival (= id) order: all queued at t = 0, or at the times a file gave (`arrival_s`).

    Shared prompt prefixes (what prefix caching can reuse): two requests in the same `prefix_group` (>= 0)
    share exactly their first min(prefix_len_i, prefix_len_j) prompt tokens; group -1 shares nothing, and
    generated tokens are never shared. Omitted, no request shares anything.

    Groups may form a tree (`group_parent`, `group_start`, indexed by group id 0..G-1): a group is a line of
    prompt tokens that starts as its parent's line and leaves it at token `group_start[g]`. A request of group
    g holds the line of every group from the root down to g, up to its `prefix_len`, so two requests share
    their prompts up to where their paths part: in one group, min(prefix_len_i, prefix_len_j); else, where
    each leaves the deepest group both pass through (min of the two branch tokens). A request's prompt is then
    a chain of blocks, not one prefix (Mooncake's hash_ids, engine/workload_formats.py). Without a tree every
    group is a root at token 0: the prefix groups above.

    Equal (and hashed) by content, so a run of an in-memory workload can be cached like one of a file.
    """

    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    arrival_s: np.ndarray | None = None  # float64 seconds, nondecreasing; None: all at once
    prefix_group: np.ndarray | None = None  # int64, -1 for none
    prefix_len: np.ndarray | None = None  # int64, 0 where the group is -1
    group_parent: np.ndarray | None = None  # int64 per group: its parent group, -1 for a root (parent < group)
    group_start: np.ndarray | None = None  # int64 per group: the prompt token where it leaves its parent's line

    def __post_init__(self) -> None:
        prompt = np.ascontiguousarray(self.prompt_len, dtype=np.int64)
        output = np.ascontiguousarray(self.output_len, dtype=np.int64)
        # The core sizes its per-token log from the outputs and writes it without bounds checks: refuse here
        # what the file loaders refuse (every request has a prompt and produces at least one token).
        if prompt.ndim != 1 or output.shape != prompt.shape or (prompt < 1).any() or (output < 1).any():
            raise WorkloadError("a workload needs one prompt length and one output length (each at least 1) per "
                                "request")
        if self.arrival_s is not None:
            arrival = np.ascontiguousarray(self.arrival_s, dtype=np.float64)
            if arrival.shape != prompt.shape or not np.isfinite(arrival).all() or (arrival < 0).any() \
                    or (np.diff(arrival) < 0).any():
                raise WorkloadError("arrival_s must be one finite time >= 0 per request, in nondecreasing order")
            arrival.setflags(write=False)
            object.__setattr__(self, "arrival_s", arrival)
        group = np.full(prompt.shape, -1, dtype=np.int64) if self.prefix_group is None else (
            np.ascontiguousarray(self.prefix_group, dtype=np.int64))
        shared = np.zeros(prompt.shape, dtype=np.int64) if self.prefix_len is None else (
            np.ascontiguousarray(self.prefix_len, dtype=np.int64))
        if group.shape != prompt.shape or shared.shape != prompt.shape:
            raise WorkloadError("prefix_group and prefix_len need one entry per request")
        shared = np.where(group >= 0, shared, 0)
        for name, a in (("prompt", prompt), ("output", output), ("group", group), ("shared", shared)):
            a.setflags(write=False)
            object.__setattr__(self, {"prompt": "prompt_len", "output": "output_len", "group": "prefix_group",
                                      "shared": "prefix_len"}[name], a)
        if (self.group_parent is None) != (self.group_start is None):
            raise WorkloadError("group_parent and group_start go together; one of them is missing")
        if self.group_parent is not None:
            parent, start = _checked_tree(self.group_parent, self.group_start, group, shared)
            object.__setattr__(self, "group_parent", parent)
            object.__setattr__(self, "group_start", start)

    @cached_property
    def fingerprint(self) -> str:
        """A digest of every array: two workloads with the same requests have the same one."""
        h = hashlib.sha256()
        for a in (self.prompt_len, self.output_len, self.arrival_s, self.prefix_group, self.prefix_len,
                  self.group_parent, self.group_start):
            h.update(b"-" if a is None else np.ascontiguousarray(a).tobytes() + b"|")
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Workload) and (self is other or self.fingerprint == other.fingerprint)

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    @property
    def has_prefix_tree(self) -> bool:
        return self.group_parent is not None

    @property
    def has_shared_prefixes(self) -> bool:
        return bool((self.prefix_len > 0).any())

    def dense_groups(self) -> np.ndarray:
        """prefix_group renumbered 0, 1, ... (-1 stays): the scheduler core's numbering (a tree's groups are
        numbered so already: its arrays are indexed by group)."""
        group = self.prefix_group
        if group.size == 0 or group.max() < 0 or self.group_parent is not None:
            return group
        out = np.full(group.shape, -1, dtype=np.int64)
        member = group >= 0
        out[member] = np.unique(group[member], return_inverse=True)[1]
        return read_only(out)

    @property
    def num_requests(self) -> int:
        return int(self.prompt_len.shape[0])

    @property
    def total_prompt_tokens(self) -> int:
        return int(self.prompt_len.sum())

    @property
    def total_output_tokens(self) -> int:
        return int(self.output_len.sum())


def _checked_tree(parent_in, start_in, group: np.ndarray, shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """group_parent and group_start as read-only int64 arrays, checked against the requests' groups."""
    parent = np.ascontiguousarray(parent_in, dtype=np.int64)
    start = np.ascontiguousarray(start_in, dtype=np.int64)
    count = parent.shape[0]
    if parent.ndim != 1 or start.shape != parent.shape:
        raise WorkloadError("group_parent and group_start need one entry per group")
    ids = np.arange(count)
    if ((parent < -1) | (parent >= ids)).any():
        raise WorkloadError("group_parent[g] must be -1 (a root) or a group numbered before g")
    roots = parent < 0
    if (start[roots] != 0).any() or (start[~roots] < start[parent[~roots]]).any():
        raise WorkloadError("group_start must be 0 for a root and at least its parent's start for any other group")
    member = group >= 0
    if (group[member] >= count).any():
        raise WorkloadError(f"prefix_group names a group beyond the tree's {count} groups")
    if (shared[member] < start[group[member]]).any():
        raise WorkloadError("a request's prefix_len must reach the token where its group leaves its parent")
    for a in (parent, start):
        a.setflags(write=False)
    return parent, start


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


def share_prefixes(base: Workload, system_prompt_len: int = 0, samples: int = 1, turns: int = 1) -> Workload:
    """A generated workload given shared prefixes; the defaults (0, 1, 1) return `base` itself.

    - system prompt: every prompt starts with the same `system_prompt_len` tokens (lengths unchanged, so caching
      off runs exactly the same work);
    - samples: each run of `samples` consecutive requests is one prompt sampled that many times (vLLM's n):
      they take the first one's prompt length and share all of it;
    - turns: requests form conversations of `turns` turns, all queued at once turn by turn (conversation
      c's turn t is request t x conversations + c); a later turn's prompt is the previous turn's prompt, its
      answer and a new user message a quarter of a first prompt's length, and shares the previous prompt.
    One prefix group per request is all the format states, so these idioms do not combine.
    """
    if system_prompt_len == 0 and samples == 1 and turns == 1:
        return base
    if (system_prompt_len > 0) + (samples > 1) + (turns > 1) > 1:
        raise WorkloadError("a shared system prompt, several samples per prompt and multi-turn conversations "
                            "do not combine (a request belongs to one prefix group); choose one")
    n = base.num_requests
    prompt, output = base.prompt_len.copy(), base.output_len.copy()
    if system_prompt_len > 0:
        return Workload(prompt, output, prefix_group=np.zeros(n, dtype=np.int64),
                        prefix_len=np.minimum(prompt, system_prompt_len))
    if samples > 1:
        group = np.arange(n, dtype=np.int64) // samples
        prompt = prompt[group * samples]
        return Workload(prompt, output, prefix_group=group, prefix_len=prompt.copy())
    conversations = -(-n // turns)
    for i in range(conversations, n):
        before = i - conversations
        prompt[i] = prompt[before] + output[before] + max(1, int(base.prompt_len[i]) // 4)
    return Workload(prompt, output, prefix_group=np.arange(n, dtype=np.int64) % conversations,
                    prefix_len=prompt.copy())


def _validate_prefixes(prompt: list, group: list, shared: list, source: str) -> tuple[list[int], list[int]]:
    """prefix_group (>= -1) and prefix_len (0..prompt_len; 0 with group -1), as integers."""
    for name, values in (("prefix_group", group), ("prefix_len", shared)):
        if len(values) != len(prompt):
            raise WorkloadError(f"{source}: {name} has {len(values)} entries but prompt_len has {len(prompt)}")
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (
                isinstance(v, float) and v.is_integer()
            ):
                raise WorkloadError(f"{source}: {name}[{i}] = {_short(v)} is not an integer")
    groups, lens = [int(v) for v in group], [int(v) for v in shared]
    for i, (g, n) in enumerate(zip(groups, lens)):
        if not -1 <= g <= MAX_REQUEST_TOKENS:
            raise WorkloadError(f"{source}: prefix_group[{i}] = {g} is outside -1..{MAX_REQUEST_TOKENS:,}")
        top = int(prompt[i]) if g >= 0 else 0
        if not 0 <= n <= top:
            raise WorkloadError(f"{source}: prefix_len[{i}] = {n} is outside 0..{top:,} "
                                f"({'its prompt_len' if g >= 0 else 'prefix_group is -1'})")
    return groups, lens


def _token_counts(values: list, name: str, source: str) -> np.ndarray:
    """The list as int64 token counts in 1..MAX_REQUEST_TOKENS; the first bad entry named otherwise."""
    if values and all(type(v) is int for v in values):  # (the CSV parsers' case, checked in C: a file's rows)
        if 1 <= min(values) and max(values) <= MAX_REQUEST_TOKENS:
            return np.array(values, dtype=np.int64)
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) and not (
            isinstance(v, float) and v.is_integer()
        ):
            raise WorkloadError(f"{source}: {name}[{i}] = {_short(v)} is not an integer")
        if not 1 <= int(v) <= MAX_REQUEST_TOKENS:
            raise WorkloadError(f"{source}: {name}[{i}] = {v} is outside 1..{MAX_REQUEST_TOKENS:,}")
    return np.array([int(v) for v in values], dtype=np.int64)


def _validate_lengths(prompt: list, output: list, source: str, arrival: list | None = None,
                      group: list | None = None, shared: list | None = None) -> Workload:
    if len(prompt) != len(output):
        raise WorkloadError(f"{source}: prompt_len has {len(prompt)} entries but output_len has {len(output)}")
    if not prompt:
        raise WorkloadError(f"{source}: no requests")
    if len(prompt) > MAX_FILE_ROWS:
        raise WorkloadError(f"{source}: {len(prompt):,} requests; at most {MAX_FILE_ROWS:,} rows are read")
    prompt_arr, output_arr = _token_counts(prompt, "prompt_len", source), _token_counts(output, "output_len", source)
    if (group is None) != (shared is None):
        raise WorkloadError(f"{source}: prefix_group and prefix_len go together; one of them is missing")
    groups, lens = (None, None) if group is None else (np.array(v) for v in _validate_prefixes(prompt, group,
                                                                                                shared, source))
    if arrival is None:
        return Workload(prompt_arr, output_arr, prefix_group=groups, prefix_len=lens)
    return _timed_workload(Workload(prompt_arr, output_arr, prefix_group=groups, prefix_len=lens), arrival, source)


def _timed_workload(untimed: Workload, arrival: list, source: str) -> Workload:
    """Requests renumbered in arrival order (ties keep file order), times relative to the first arrival."""
    if len(arrival) != untimed.num_requests:
        raise WorkloadError(f"{source}: arrival_s has {len(arrival)} entries but prompt_len has "
                            f"{untimed.num_requests}")
    for i, v in enumerate(arrival):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise WorkloadError(f"{source}: arrival_s[{i}] = {_short(v)} is not a time in seconds >= 0")
    times = np.asarray(arrival, dtype=np.float64)
    order = np.argsort(times, kind="stable")
    return Workload(untimed.prompt_len[order], untimed.output_len[order], times[order] - times[order[0]],
                    untimed.prefix_group[order], untimed.prefix_len[order], untimed.group_parent,
                    untimed.group_start)


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
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:  # (counted in C: the usual case needs no walk)
        return text.count("[") + text.count("{")
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


def raise_too_many_rows(source: str) -> None:
    raise WorkloadError(f"{source}: more than {MAX_FILE_ROWS:,} rows; at most {MAX_FILE_ROWS:,} are read (cut the "
                        "file, e.g. with head)")


def parse_workload(text: str, source: str = "workload", sample: int | None = None, seed: int = 1) -> Workload:
    """The requests of a workload file's text, in any layout engine/workload_formats.py reads (the project's
    CSV or JSON, Azure's and BurstGPT's traces, Mooncake's JSONL), sampled to `sample` requests (a seeded
    window) when the file has more rows, or to DEFAULT_SAMPLE_REQUESTS beyond MAX_WORKLOAD_REQUESTS rows."""
    from engine.workload_formats import read_workload  # (it builds on this module's parsers)

    return read_workload(text, source, sample=sample, seed=seed).workload


def parse_rows(text: str, source: str = "workload") -> Workload:
    """Every row of a CSV with header `prompt_len,output_len` (optionally `,arrival_s`) or the trace layout
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
        group, shared = obj.get("prefix_group"), obj.get("prefix_len")
        if not all(isinstance(v, list) for v in (prompt, output, group or [], shared or [])):
            raise WorkloadError(f'{source}: "prompt_len", "output_len" (and "prefix_group", "prefix_len") must be '
                                'lists of integers')
        if arrival is not None and not isinstance(arrival, list):
            raise WorkloadError(f'{source}: "arrival_s" must be a list of times in seconds')
        return _validate_lengths(prompt, output, source, arrival, group, shared)
    try:
        return _parse_csv(text, source)
    except csv.Error as exc:  # a NUL byte, a field past csv's size limit
        raise WorkloadError(f"{source}: not a readable CSV ({str(exc)[:60]})") from None


EPOCH = datetime(1970, 1, 1)
# Accepted CSV layouts: header -> (prompt column, output column, arrival column or None); any of the first
# three may add prefix_group,prefix_len (shared prompt prefixes).
CSV_LAYOUTS = {
    ("prompt_len", "output_len"): ("prompt_len", "output_len", None),
    ("prompt_len", "output_len", "arrival_s"): ("prompt_len", "output_len", "arrival_s"),
    # The public LLM-inference trace layout (Azure's): wall-clock timestamps, made relative to the first.
    ("TIMESTAMP", "ContextTokens", "GeneratedTokens"): ("ContextTokens", "GeneratedTokens", "TIMESTAMP"),
}
PREFIX_COLUMNS = ("prefix_group", "prefix_len")


def _csv_layout(header: list[str], source: str) -> tuple[list[int], int | None, list[int] | None]:
    """Column indices of (prompt, output), of the arrival time (None when the file has none) and of
    (prefix_group, prefix_len) (None when the file has none)."""
    prefix = all(c in header for c in PREFIX_COLUMNS)
    rest = [c for c in header if c not in PREFIX_COLUMNS] if prefix else header
    for names, (prompt, output, arrival) in CSV_LAYOUTS.items():
        if sorted(rest) == sorted(names):
            return ([header.index(prompt), header.index(output)], None if arrival is None else header.index(arrival),
                    [header.index(c) for c in PREFIX_COLUMNS] if prefix else None)
    raise WorkloadError(f"{source}: CSV header must be 'prompt_len,output_len' (optionally with 'arrival_s' and/or "
                        f"'prefix_group,prefix_len'), 'TIMESTAMP,ContextTokens,GeneratedTokens' (Azure) or "
                        f"BurstGPT's 'Timestamp,Model,Request tokens,Response tokens,...'; got "
                        f"{_short(','.join(header))}")


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
    prompt, output, times, group, shared = [], [], [], [], []
    cols: list[int] = []
    at: int | None = None
    pcols: list[int] | None = None
    for line_no, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [c.strip() for c in row]
            cols, at, pcols = _csv_layout(header, source)
            continue
        if len(prompt) >= MAX_FILE_ROWS:  # checked while reading: never builds a huge list
            raise_too_many_rows(source)
        if len(row) != len(header):
            raise WorkloadError(f"{source}: line {line_no} has {len(row)} fields, expected {len(header)}")
        cells = [row[i].strip() for i in cols + (pcols or [])]
        # prefix_group may be -1 (no group); every other count is a plain non-negative integer.
        digits = [c[1:] if k == 2 and c.startswith("-") else c for k, c in enumerate(cells)]
        if not all(c.isascii() and c.isdigit() and len(c) <= MAX_NUMBER_DIGITS for c in digits):
            raise WorkloadError(f"{source}: line {line_no} is not {'four' if pcols else 'two'} integers (token counts"
                                f"{', prefix group and length' if pcols else ''}): {_short(','.join(row))}")
        prompt.append(int(cells[0]))
        output.append(int(cells[1]))
        if pcols:
            group.append(int(cells[2]))
            shared.append(int(cells[3]))
        if at is not None:
            try:
                times.append(_time_cell(row[at].strip(), header[at] == "TIMESTAMP"))
            except ValueError:
                raise WorkloadError(f"{source}: line {line_no}: {header[at]} {_short(row[at].strip())} is not a "
                                    "time (seconds >= 0, or a date and time)") from None
    if header is None:
        raise WorkloadError(f"{source}: empty file")
    return _validate_lengths(prompt, output, source, times if at is not None else None, group if pcols else None,
                             shared if pcols else None)


def load_workload(path: str | Path, sample: int | None = None, seed: int = 1) -> Workload:
    """Read a workload file (its layout found from its content; sampled as `parse_workload` says): a regular
    file of at most MAX_WORKLOAD_BYTES.

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
    return parse_workload(text, source=str(p)[:80], sample=sample, seed=seed)
