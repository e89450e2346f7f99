"""The queue of requests a run serves: generated from a seed, or read from a CSV/JSON file.

The generated workload follows the course's calibration: prompts spread mildly around a fixed mean,
output lengths log-uniform over [a, spread x a], both rescaled to exact totals, so changing the spread
moves tokens between requests without changing how much work there is.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
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


class WorkloadError(ValueError):
    """A workload file or array that cannot be served; the message says what is wrong."""


@dataclass(frozen=True)
class Workload:
    """Requests in arrival (= id) order, all queued at t = 0."""

    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64

    def __post_init__(self) -> None:
        prompt = np.ascontiguousarray(self.prompt_len, dtype=np.int64)
        output = np.ascontiguousarray(self.output_len, dtype=np.int64)
        prompt.setflags(write=False)
        output.setflags(write=False)
        object.__setattr__(self, "prompt_len", prompt)
        object.__setattr__(self, "output_len", output)

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


def _validate_lengths(prompt: list, output: list, source: str) -> Workload:
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
                raise WorkloadError(f"{source}: {name}[{i}] = {v!r} is not an integer")
            if not 1 <= int(v) <= MAX_REQUEST_TOKENS:
                raise WorkloadError(f"{source}: {name}[{i}] = {v} is outside 1..{MAX_REQUEST_TOKENS:,}")
    return Workload(np.array([int(v) for v in prompt]), np.array([int(v) for v in output]))


def parse_workload(text: str, source: str = "workload") -> Workload:
    """Parse a CSV with header `prompt_len,output_len` or a JSON object {"prompt_len": [...], "output_len": [...]}."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(obj, dict) or "prompt_len" not in obj or "output_len" not in obj:
            raise WorkloadError(f'{source}: expected a JSON object with "prompt_len" and "output_len" lists')
        prompt, output = obj["prompt_len"], obj["output_len"]
        if not isinstance(prompt, list) or not isinstance(output, list):
            raise WorkloadError(f'{source}: "prompt_len" and "output_len" must be lists of integers')
        return _validate_lengths(prompt, output, source)
    rows = list(csv.reader(io.StringIO(text)))
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        raise WorkloadError(f"{source}: empty file")
    header = [c.strip() for c in rows[0]]
    if header != ["prompt_len", "output_len"]:
        raise WorkloadError(f"{source}: CSV header must be 'prompt_len,output_len', got {','.join(header)!r}")
    prompt, output = [], []
    for line_no, row in enumerate(rows[1:], start=2):
        if len(row) != 2:
            raise WorkloadError(f"{source}: line {line_no} has {len(row)} fields, expected 2")
        try:
            prompt.append(int(row[0].strip()))
            output.append(int(row[1].strip()))
        except ValueError:
            raise WorkloadError(f"{source}: line {line_no} is not two integers: {','.join(row)!r}") from None
    return _validate_lengths(prompt, output, source)


def load_workload(path: str | Path) -> Workload:
    """Read a workload file (CSV or JSON, by content)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise WorkloadError(f"workload: cannot read {str(p)!r} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"workload: {str(p)!r} is not a text file") from None
    return parse_workload(text, source=str(p))
