"""Your workload, your server: a reader's own lengths, trace file or vLLM log lines, read for the page (no Panel).

Nothing a reader uploads or pastes is written anywhere: it is read from memory, kept on the reader's page state
(explorable.state.store) and forgotten with the session, and the caches' entries of its runs go with it
(`forget`). Sizes are bounded before anything is read, and said on the page (`LIMITS_TEXT`):

- a file of at most MAX_UPLOAD_BYTES (the served page's websocket limit in the README is set to carry it as
  Panel's FileInput sends it, base64 in one message) and engine.workload.MAX_FILE_ROWS rows, of which a window
  of UPLOAD_SAMPLE consecutive requests is served (engine/workload_formats.py);
- pasted log text of at most MAX_PASTE_CHARS.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from engine import RunConfig, WorkloadError
from engine.diagnose import Diagnosis, LogError, diagnose_text
from engine.presets import GPUS, MODELS
from engine.quantile_workload import p99_over_p50
from engine.workload import MAX_FILE_ROWS, Workload
from engine.workload_formats import WorkloadRead, first_requests, read_workload
from explorable.state import runs
from explorable.state.bounded_cache import drop_everywhere

MAX_UPLOAD_BYTES = 2_000_000  # 2 MB: base64 makes it 2.67 MB in the page's message (the README allows 3 MiB)
UPLOAD_SAMPLE = 1024  # requests the page serves of a longer file (a seeded window)
# ... and at most this many tokens (prompts and outputs), five times the article's workload (415,845): one run's
# work grows with its tokens, and a page runs dozens for its curves. A window of 1,024 prompts of 20,000 tokens
# made a run of 400,000 passes (0.7 s, a 74 MB trace) and its curves half a minute of the server's time.
MAX_WINDOW_TOKENS = 2_000_000
MAX_PASTE_CHARS = 8192
LIMITS_TEXT = (f"At most {MAX_UPLOAD_BYTES / 1e6:g} MB and {MAX_FILE_ROWS:,} rows; a longer file is served as a "
               f"window of {UPLOAD_SAMPLE:,} consecutive requests drawn by the seed, and of at most "
               f"{MAX_WINDOW_TOKENS / 1e6:g} million tokens. Read in this page's session only: not saved, not logged, "
               "not in the link.")
SAMPLES = Path(__file__).resolve().parents[2] / "assets" / "samples"
SAMPLE_TRACE = SAMPLES / "burstgpt-style-chat.csv"  # the guided step's file (docs/your-workload.md says how made)
SAMPLE_LOG = SAMPLES / "vllm-log-memory-cap.txt"

# The course's verdict on p99 / p50 of completion tokens (the article's last measurement).
NEAR_ONE = 1.5
OPEN_ENDED = 10.0


def display_name(filename: str | None) -> str:
    """A file name as the page may show it: its last part, printable characters only, at most 60."""
    name = re.split(r"[\\/]", filename or "")[-1]
    name = "".join(c for c in name if c.isprintable() and c not in "<>&\"'")[:60]
    return name or "your file"


def read_upload(data: bytes, filename: str | None, seed: int) -> WorkloadRead:
    """An uploaded file's requests (a window of UPLOAD_SAMPLE of a longer one); WorkloadError in one line
    naming what is wrong (the size, the encoding, a row and field) otherwise."""
    name = display_name(filename)
    if len(data) > MAX_UPLOAD_BYTES:
        raise WorkloadError(f"{name} is {len(data) / 1e6:.1f} MB; the limit here is {MAX_UPLOAD_BYTES / 1e6:g} MB "
                            "(cut it, e.g. head -n 20000 file > part)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{name} is not a UTF-8 text file (byte {exc.start:,} is not text): expected a CSV, JSON "
                            "or JSONL file") from None
    return within_token_bound(read_workload(text, name, sample=UPLOAD_SAMPLE, seed=seed))


def within_token_bound(read: WorkloadRead) -> WorkloadRead:
    """The read with its served requests cut to the first ones whose tokens fit MAX_WINDOW_TOKENS (at least one)."""
    wl = read.workload
    tokens = np.cumsum(wl.prompt_len + wl.output_len)
    if tokens[-1] <= MAX_WINDOW_TOKENS:
        return read
    count = max(1, int(np.searchsorted(tokens, MAX_WINDOW_TOKENS, side="right")))
    return replace(read, workload=first_requests(wl, count))


def cut_to_token_bound(read: WorkloadRead) -> bool:
    """Was the served window cut short by MAX_WINDOW_TOKENS?"""
    return read.workload.num_requests < min(read.rows, UPLOAD_SAMPLE)


def read_sample_trace(seed: int = 1) -> WorkloadRead:
    """The trace shipped for the guided step."""
    return read_upload(SAMPLE_TRACE.read_bytes(), SAMPLE_TRACE.name, seed)


def sample_log() -> str:
    return SAMPLE_LOG.read_text()


@dataclass(frozen=True)
class Distribution:
    """A small histogram of lengths on a log scale, with the two percentiles the course reads."""

    edges: np.ndarray  # bin edges (tokens), len(counts) + 1
    counts: np.ndarray
    p50: float
    p99: float
    ratio: float  # p99 / p50
    count: int


def distribution(lengths: np.ndarray, bins: int = 24) -> Distribution:
    lengths = np.asarray(lengths, dtype=np.float64)
    p50, p99, ratio = p99_over_p50(lengths)
    lo, hi = max(1.0, float(lengths.min())), max(float(lengths.max()), 2.0)
    edges = np.geomspace(lo, hi * 1.0001, bins + 1) if hi > lo else np.array([lo * 0.9, lo * 1.1])
    counts, edges = np.histogram(lengths, bins=edges)
    return Distribution(edges, counts, p50, p99, ratio, int(lengths.size))


def verdict(ratio: float) -> tuple[str, str]:
    """(level, the course's verdict in words) for p99 / p50 of completion tokens."""
    shown = f"p99 / p50 = {ratio:,.1f}"
    if ratio < NEAR_ONE:
        return "near-one", (f"{shown}: close to 1. Iteration-level scheduling buys a couple of percent on this traffic; "
                            "if throughput is a problem, it is somewhere else (most likely how memory-bound decode is).")
    if ratio >= OPEN_ENDED:
        return "open-ended", (f"{shown}: 10 or more, what open-ended chat looks like. The scheduler is the largest "
                              "single lever you have: continuous batching and the settings here are worth an afternoon.")
    return "between", (f"{shown}: between the two. Slots that finish early sit idle under static batching, so "
                       "continuous batching pays, by how much the comparison below says for these settings.")


@dataclass(frozen=True)
class UnitGain:
    per_pass_tok_s: float
    per_request_tok_s: float
    queued_at_once: bool  # compared with every request queued at 0 s (the page's traffic was arriving)

    @property
    def gain(self) -> float:
        return self.per_pass_tok_s / self.per_request_tok_s if self.per_request_tok_s else math.nan


def unit_gain(cfg: RunConfig) -> UnitGain | None:
    """The same workload and settings scheduled per pass and per request (the allocator as set), all queued at
    once: the gain from continuous batching on it. None when either cannot run."""
    at_once = cfg.arrival != "all-at-once"
    base = cfg.replace(arrival="all-at-once") if at_once else cfg
    per_pass = runs.throughput(base.replace(unit="pass"))
    per_request = runs.throughput(base.replace(unit="request"))
    if math.isnan(per_pass) or math.isnan(per_request):
        return None
    return UnitGain(per_pass, per_request, at_once)


def diagnose_paste(text: str, max_num_seqs: int | None) -> Diagnosis:
    """The diagnosis of pasted log lines; LogError in one line for text that is too long or holds no log."""
    if len(text) > MAX_PASTE_CHARS:
        raise LogError(f"{len(text):,} characters pasted; at most {MAX_PASTE_CHARS:,} are read here (paste the start-up "
                       "line and a few stats lines)")
    return diagnose_text(text, max_num_seqs)


def reproduction(diag: Diagnosis, bounds: dict[str, tuple], uploaded: Workload | None) -> tuple[dict, list[str]]:
    """(control values, notes): the page set to reproduce the diagnosed server (a vLLM server: on demand, per
    pass), within the page's own bounds (each value moved to fit is said in a note)."""
    settings: dict = {"allocation": "on-demand", "unit": "pass", "enable_prefix_caching": False}
    notes: list[str] = []
    r = diag.reproduce
    if r.get("model") in MODELS:
        settings["model"] = r["model"]
    if r.get("gpu") in GPUS:
        settings["gpu"] = r["gpu"]
    for name in ("max_num_seqs", "pool_gib"):
        if name not in r:
            continue
        lo, hi, step = bounds[name]
        value = r[name]
        fitted = min(max(value, lo), hi)
        if step:
            fitted = round(lo + round((fitted - lo) / step) * step, 6)
        if name == "max_num_seqs":
            fitted = int(fitted)
        if not math.isclose(fitted, value):
            notes.append(f"{name} {value:g} shown as {fitted:g} (the page's control runs {lo:g} to {hi:g}"
                         f"{f' in steps of {step:g}' if step else ''})")
        settings[name] = fitted
    if diag.numbers.get("prefix_cache_hit_rate_pct"):
        settings["enable_prefix_caching"] = True  # the server caches (vLLM V1's default) and its lines say so
    settings["arrival"] = "workload" if uploaded is not None and uploaded.arrival_s is not None else "all-at-once"
    return settings, notes


def forget(workload: Workload | None) -> None:
    """Drop every cached run and view of a reader's own workload (its session has ended)."""
    if workload is None:
        return
    drop_everywhere(lambda key: _mentions(key, workload))


def _mentions(key, workload: Workload) -> bool:
    if isinstance(key, RunConfig):
        return key.workload is workload or (isinstance(key.workload, Workload) and key.workload == workload)
    if isinstance(key, tuple):
        return any(_mentions(k, workload) for k in key)
    return False
