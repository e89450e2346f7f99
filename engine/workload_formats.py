"""The layouts a workload file comes in, read into one `Workload`, and the seeded window a run serves of a long one.

- the project's CSV `prompt_len,output_len[,arrival_s][,prefix_group,prefix_len]` and its JSON object;
- Azure's LLM inference trace, `TIMESTAMP,ContextTokens,GeneratedTokens` (dates and times);
- BurstGPT's CSV (github.com/HPMLL/BurstGPT): `Timestamp,Model,Request tokens,Response tokens,...` in any column
  order with any further columns (Total tokens, Log Type, Session ID, Elapsed time); Timestamp is in seconds,
  and a row whose Response tokens is 0 is a failed request (the README says so), left out and counted;
- Mooncake's JSONL (github.com/kvcache-ai/Mooncake, FAST25-release/traces): one object a line with `timestamp`
  (milliseconds), `input_length`, `output_length` and `hash_ids`, the hashes of the prompt's 512-token blocks:
  two requests share the longest run of equal leading hash ids, which becomes a tree of prefix groups
  (engine/workload.py), so a request's prompt is a chain of blocks as prefix caching sees it.

A file may hold up to MAX_FILE_ROWS rows. A run serves at most MAX_WORKLOAD_REQUESTS: a longer file, or any file
with more rows than the run asks for, is sampled to a window of consecutive requests (in arrival order) whose
first row the seed draws. A window rather than a scattered sample keeps what a trace is read for: the arrival
rate and its bursts, and the turns of a conversation close enough to share their cached prefix.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass

import numpy as np

from engine.workload import (DEFAULT_SAMPLE_REQUESTS, MAX_FILE_ROWS, MAX_JSON_DEPTH, MAX_NUMBER_DIGITS,
                             MAX_REQUEST_TOKENS, MAX_WORKLOAD_REQUESTS, Workload, WorkloadError, _json_depth,
                             _short, parse_rows, raise_too_many_rows)

MOONCAKE_BLOCK_TOKENS = 512  # Mooncake's README: "The block size is 512 tokens"
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")  # (and Model, which a run does not read)
MAX_LINE_CHARS = 1 << 20  # one JSONL row: ~200k hash ids of 4 digits, more than any model's context holds
LAYOUTS = ("project CSV", "project JSON", "Azure trace", "BurstGPT", "Mooncake")


@dataclass(frozen=True)
class WorkloadRead:
    """A file's requests as a run serves them, and what the reader should know about the file itself."""

    workload: Workload  # the requests served (the window, when sampled)
    layout: str  # one of LAYOUTS
    rows: int  # requests the file holds (failed ones left out)
    skipped: int  # rows left out as failed requests (BurstGPT's Response tokens 0)
    window_start: int  # index (in arrival order) of the first request served; 0 unless sampled
    all_prompt_len: np.ndarray  # every row's prompt length, in arrival order (for the file's own distribution)
    all_output_len: np.ndarray

    @property
    def sampled(self) -> bool:
        return self.workload.num_requests < self.rows


def sample_size(rows: int, sample: int | None) -> int:
    """How many of a file's rows a run serves: `sample` if the file has more, else every row up to
    MAX_WORKLOAD_REQUESTS, and DEFAULT_SAMPLE_REQUESTS of a longer file."""
    if sample is not None:
        if not 1 <= sample <= MAX_WORKLOAD_REQUESTS:
            raise WorkloadError(f"a workload sample must be 1..{MAX_WORKLOAD_REQUESTS:,} requests, got {sample!r}")
        return min(rows, sample)
    return rows if rows <= MAX_WORKLOAD_REQUESTS else DEFAULT_SAMPLE_REQUESTS


def window_start(rows: int, size: int, seed: int) -> int:
    """First row of the seeded window of `size` consecutive rows (0 when every row is served)."""
    if size >= rows:
        return 0
    return int(np.random.default_rng([seed, rows, size]).integers(0, rows - size + 1))


def _window(workload: Workload, start: int, size: int) -> Workload:
    """Requests start..start+size of a workload (times made relative to the first; groups kept)."""
    if start == 0 and size == workload.num_requests:
        return workload
    cut = slice(start, start + size)
    arrival = None if workload.arrival_s is None else workload.arrival_s[cut] - workload.arrival_s[start]
    return Workload(workload.prompt_len[cut], workload.output_len[cut], arrival, workload.prefix_group[cut],
                    workload.prefix_len[cut], workload.group_parent, workload.group_start)


def read_workload(text: str, source: str = "workload", sample: int | None = None, seed: int = 1) -> WorkloadRead:
    """A workload file's text in any of the layouts, sampled for a run (see the module's docstring)."""
    text = text.removeprefix("\ufeff")
    first = next((line.strip() for line in io.StringIO(text) if line.strip()), "")
    if first.startswith("{") and _is_mooncake_row(first):
        return _read_mooncake(text, source, sample, seed)
    if not first.startswith("{") and all(c in first for c in BURSTGPT_COLUMNS):
        try:
            return _read_burstgpt(text, source, sample, seed)
        except csv.Error as exc:
            raise WorkloadError(f"{source}: not a readable CSV ({str(exc)[:60]})") from None
    rows = parse_rows(text, source)
    layout = "project JSON" if first.startswith("{") else (
        "Azure trace" if first.replace(" ", "").startswith("TIMESTAMP") or "ContextTokens" in first else "project CSV")
    return _sampled(rows, layout, 0, sample, seed)


def _sampled(rows: Workload, layout: str, skipped: int, sample: int | None, seed: int) -> WorkloadRead:
    size = sample_size(rows.num_requests, sample)
    start = window_start(rows.num_requests, size, seed)
    return WorkloadRead(_window(rows, start, size), layout, rows.num_requests, skipped, start, rows.prompt_len,
                        rows.output_len)


# -- BurstGPT ------------------------------------------------------------------------------------------------
def _read_burstgpt(text: str, source: str, sample: int | None, seed: int) -> WorkloadRead:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    prompt, output, times = [], [], []
    skipped = 0
    for line_no, row in enumerate(reader, start=1):
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [c.strip() for c in row]
            if not all(c in header for c in BURSTGPT_COLUMNS):
                raise WorkloadError(f"{source}: a BurstGPT header names the columns {', '.join(BURSTGPT_COLUMNS)}; "
                                    f"got {_short(','.join(header))}")
            at, p_col, o_col = (header.index(c) for c in BURSTGPT_COLUMNS)
            continue
        if len(prompt) >= MAX_FILE_ROWS:
            raise_too_many_rows(source)
        if len(row) != len(header):
            raise WorkloadError(f"{source}: line {line_no} has {len(row)} fields, expected {len(header)} (the "
                                "header's)")
        p, o = _count(row[p_col], source, line_no, "Request tokens"), _count(row[o_col], source, line_no,
                                                                             "Response tokens")
        if p == 0 or o == 0:  # a failed request (BurstGPT writes 0 response tokens for a failure)
            skipped += 1
            continue
        times.append(_seconds(row[at], source, line_no, "Timestamp", 1.0))
        prompt.append(p)
        output.append(o)
    if not prompt:
        raise WorkloadError(f"{source}: no requests" + (f" ({skipped:,} failed rows with 0 tokens left out)"
                                                         if skipped else ""))
    rows = _timed(prompt, output, times, source)
    return _sampled(rows, "BurstGPT", skipped, sample, seed)


def _count(cell: str, source: str, line_no: int, field: str) -> int:
    text = cell.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= MAX_NUMBER_DIGITS):
        raise WorkloadError(f"{source}: line {line_no}: {field} {_short(text)} is not a token count (a whole "
                            "number >= 0)")
    value = int(text)
    if value > MAX_REQUEST_TOKENS:
        raise WorkloadError(f"{source}: line {line_no}: {field} {value:,} is more than {MAX_REQUEST_TOKENS:,} "
                            "tokens")
    return value


def _seconds(cell, source: str, line_no: int, field: str, unit_s: float) -> float:
    """A time cell (a number of `unit_s` seconds, >= 0) in seconds."""
    try:
        value = float(cell.strip() if isinstance(cell, str) else cell)
        if isinstance(cell, bool) or (isinstance(cell, str) and len(cell) > 40):
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise WorkloadError(f"{source}: line {line_no}: {field} {_short(cell)} is not a time (a number >= 0)")
    return value * unit_s


def _timed(prompt: list[int], output: list[int], times: list[float], source: str) -> Workload:
    order = np.argsort(np.asarray(times), kind="stable")
    t = np.asarray(times, dtype=np.float64)[order]
    return Workload(np.asarray(prompt, dtype=np.int64)[order], np.asarray(output, dtype=np.int64)[order], t - t[0])


# -- Mooncake --------------------------------------------------------------------------------------------------
def _is_mooncake_row(line: str) -> bool:
    """Is this first line a Mooncake request (a whole JSON object with its four fields)?"""
    if len(line) > MAX_LINE_CHARS:
        return False
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # (a 5,000-digit number is a ValueError, not a JSONDecodeError)
        return False
    return isinstance(obj, dict) and "input_length" in obj and "hash_ids" in obj


def _no_constant(name: str):
    raise ValueError(name)


def _mooncake_row(line: str, source: str, line_no: int) -> tuple[float, int, int, list[int]]:
    where = f"{source}: line {line_no}"
    if len(line) > MAX_LINE_CHARS or _json_depth(line) > MAX_JSON_DEPTH:
        raise WorkloadError(f"{where} is too long or nested too deep for a Mooncake request")
    try:
        obj = json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where} is not a JSON object ({exc.msg})") from None
    except ValueError:  # a number of thousands of digits, NaN or Infinity
        raise WorkloadError(f"{where} holds a number that is no token count or time") from None
    if not isinstance(obj, dict) or any(k not in obj for k in MOONCAKE_FIELDS):
        missing = [k for k in MOONCAKE_FIELDS if not isinstance(obj, dict) or k not in obj]
        raise WorkloadError(f"{where} lacks {', '.join(missing)} (a Mooncake request has "
                            f"{', '.join(MOONCAKE_FIELDS)})")
    lengths = []
    for field in ("input_length", "output_length"):
        v = obj[field]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_REQUEST_TOKENS:
            raise WorkloadError(f"{where}: {field} {_short(v)} is not a token count in 1..{MAX_REQUEST_TOKENS:,}")
        lengths.append(v)
    hashes = obj["hash_ids"]
    blocks = -(-lengths[0] // MOONCAKE_BLOCK_TOKENS)
    if not isinstance(hashes, list) or len(hashes) > blocks or not _block_ids(hashes):
        raise WorkloadError(f"{where}: hash_ids must be a list of at most {blocks} block ids (whole numbers >= 0), "
                            f"one per {MOONCAKE_BLOCK_TOKENS}-token block of its input_length")
    return _seconds(obj["timestamp"], source, line_no, "timestamp", 1e-3), lengths[0], lengths[1], hashes


def _block_ids(hashes: list) -> bool:
    """Are these whole numbers >= 0 (and < 2**63)? Checked in numpy: a row has hundreds of them."""
    if not hashes:
        return True
    try:
        ids = np.array(hashes)
    except (OverflowError, ValueError):
        return False
    return ids.dtype.kind == "i" and ids.ndim == 1 and int(ids.min()) >= 0  # (bools, floats, strings: not "i")


def _read_mooncake(text: str, source: str, sample: int | None, seed: int) -> WorkloadRead:
    rows = []
    for line_no, line in enumerate(io.StringIO(text), start=1):
        if not line.strip():
            continue
        if len(rows) >= MAX_FILE_ROWS:
            raise_too_many_rows(source)
        rows.append(_mooncake_row(line.strip(), source, line_no))
    if not rows:
        raise WorkloadError(f"{source}: no requests")
    order = sorted(range(len(rows)), key=lambda i: rows[i][0])  # (stable: ties keep file order)
    rows = [rows[i] for i in order]
    size = sample_size(len(rows), sample)
    start = window_start(len(rows), size, seed)
    served = rows[start:start + size]
    workload = mooncake_workload(served)
    prompt = np.array([r[1] for r in rows], dtype=np.int64)
    output = np.array([r[2] for r in rows], dtype=np.int64)
    return WorkloadRead(workload, "Mooncake", len(rows), 0, start, prompt, output)


def mooncake_workload(rows: list[tuple[float, int, int, list[int]]]) -> Workload:
    """Requests (time s, input tokens, output tokens, block hash ids) in arrival order, sharing prompts as a
    prefix cache would: the trie of their hash-id sequences, cut to the blocks two or more of them hold, is
    their tree of prefix groups (a group per shared block, starting where that block starts)."""
    node_of: dict[tuple[int, int], int] = {}
    parent: list[int] = []
    count: list[int] = []
    paths = []
    for _t, _p, _o, hashes in rows:
        at, path = -1, []
        for h in hashes:
            node = node_of.get((at, h))
            if node is None:
                node = node_of[(at, h)] = len(parent)
                parent.append(at)
                count.append(0)
            count[node] += 1
            path.append(node)
            at = node
        paths.append(path)
    # A block one request alone holds is its own; the shared ones are a prefix of each path (counts only fall).
    number = {}
    for node in range(len(parent)):
        if count[node] >= 2:
            number[node] = len(number)
    group_parent = np.full(len(number), -1, dtype=np.int64)
    group_start = np.zeros(len(number), dtype=np.int64)
    depth = {-1: -1}
    for node in range(len(parent)):  # parents are created before their children
        depth[node] = depth[parent[node]] + 1
        if node in number:
            group_parent[number[node]] = number.get(parent[node], -1)
            group_start[number[node]] = depth[node] * MOONCAKE_BLOCK_TOKENS
    group = np.full(len(rows), -1, dtype=np.int64)
    shared = np.zeros(len(rows), dtype=np.int64)
    for i, ((_t, prompt_len, _o, _h), path) in enumerate(zip(rows, paths)):
        held = [n for n in path if n in number]
        if held:
            group[i] = number[held[-1]]
            shared[i] = min(prompt_len, len(held) * MOONCAKE_BLOCK_TOKENS)
    times = np.array([r[0] for r in rows], dtype=np.float64)
    return Workload(np.array([r[1] for r in rows], dtype=np.int64), np.array([r[2] for r in rows], dtype=np.int64),
                    times - times[0] if len(times) else times, group, shared, group_parent, group_start)
