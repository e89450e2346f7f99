"""Diagnose a vLLM server from its own log lines: which of the course's three cases it is in, why, and what to do.

vLLM prints two kinds of line worth reading (vllm/v1/core/kv_cache_utils.py and vllm/v1/metrics/loggers.py):

- once at start-up: `GPU KV cache size: N tokens` and `Maximum concurrency for L tokens per request: Cx` (one
  line since v0.33, two before; the first word is the device: GPU, or CPU, XPU ...);
- every 10 s: `Engine 000: Avg prompt throughput: X tokens/s, Avg generation throughput: Y tokens/s, Running: N
  reqs, Waiting: M reqs[, Deferred: K reqs][, Preemptions: P], GPU KV cache usage: Z%[, Prefix cache hit rate:
  H%]`. v0.11 always prints the hit rate and never Preemptions; later versions print `Preemptions: P` only when
  P > 0 (the count since the line before) and, in the newest, `Deferred: K reqs` (waiting requests the scheduler
  skipped, counted inside Waiting); a hit rate may be left out, and further `..., External prefix cache hit rate:
  ..., MM cache hit rate: ...` parts may follow. V0's engine said `Pending: M reqs` for Waiting.

Read together with --max-num-seqs they name the case (the course's reading of them):

- past-the-wall: Preemptions appears at all: every one is a prefill thrown away and done again;
- memory-cap: requests wait with the KV cache at MEMORY_FULL_PCT or more: the cache, not the slot cap, decides the
  batch (Running sits below --max-num-seqs);
- slot-cap: requests wait with Running at --max-num-seqs and the cache under MEMORY_FULL_PCT: the cap binds.

Anything else (nothing waits, or requests wait with room on both counts) is none of them, and says so.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from engine.presets import DEFAULT_MODEL, MODELS, gpu_preset_for_device
from engine.server_advice import MEMORY_FULL_PCT, explain

MAX_STATS_LINES = 10_000  # a long log: the latest lines are kept (the CLI streams; the page takes 8 kB)
BLOCK_SIZE = 16  # vLLM's default --block-size, for a pool given in tokens
CASES = ("memory-cap", "slot-cap", "past-the-wall")

_NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
_KV_SIZE = re.compile(r"\b([A-Z]{2,5}(?: \+ host)?) KV cache size: (\d[\d,]*) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for (\d[\d,]*) tokens per request: " + _NUMBER + "x")
_STATS_FIELDS = {
    "prompt_tok_s": re.compile(r"Avg prompt throughput: " + _NUMBER + " tokens/s"),
    "gen_tok_s": re.compile(r"Avg generation throughput: " + _NUMBER + " tokens/s"),
    "running": re.compile(r"\bRunning: (\d+) reqs"),
    "waiting": re.compile(r"\b(?:Waiting|Pending): (\d+) reqs"),
    "deferred": re.compile(r"\bDeferred: (\d+) reqs"),
    "preemptions": re.compile(r"\bPreemptions: (\d+)"),
    "kv_usage_pct": re.compile(r"\bGPU KV cache usage: " + _NUMBER + "%"),
    "prefix_hit_pct": re.compile(r"(?<!External )(?<!external )\bPrefix cache hit rate: " + _NUMBER + "%"),
}
_REQUIRED = ("running", "waiting", "kv_usage_pct")
_WHAT = {"running": "'Running: N reqs'", "waiting": "'Waiting: M reqs'", "kv_usage_pct": "'GPU KV cache usage: Z%'"}
_MAX_NUM_SEQS = re.compile(r"(?:--max[-_]num[-_]seqs[= ]|'max_num_seqs': |max_num_seqs=)(\d+)")
_MODEL = re.compile(r"(?:vllm serve |'model': '|model='|--model[= ])([\w./-]+)")
_VERSION = re.compile(r"(?:vLLM API server version |LLM engine \(v)(\d+\.\d+[\w.+-]*)")


class LogError(ValueError):
    """Text that holds no vLLM log line to read, or a stats line that lacks a field; the message says which."""


@dataclass(frozen=True)
class StatsLine:
    """One periodic stats line, as printed."""

    line_no: int
    running: int
    waiting: int  # as printed (the newest versions count deferred requests inside it)
    kv_usage_pct: float
    preemptions: int = 0  # 0 where the line has no Preemptions part
    deferred: int | None = None
    prompt_tok_s: float | None = None
    gen_tok_s: float | None = None
    prefix_hit_pct: float | None = None


@dataclass
class ServerLog:
    """What a pasted or piped log says about the server."""

    stats: list[StatsLine] = field(default_factory=list)
    kv_cache_tokens: int | None = None
    device: str | None = None
    max_model_len: int | None = None  # the "tokens per request" of the concurrency line
    max_concurrency: float | None = None
    max_num_seqs: int | None = None  # when the log itself names it (a command line, vLLM's non-default args)
    model: str | None = None  # a preset's name, when the log names that model
    model_named: str | None = None  # as the log names it
    gpu: str | None = None  # a preset's name, when the log names a GPU with one
    vllm_version: str | None = None
    lines_read: int = 0


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def model_preset(name: str) -> str | None:
    """The model preset a Hugging Face name stands for ('meta-llama/Llama-3.1-8B-Instruct' -> 'Llama-3.1-8B')."""
    short = name.rsplit("/", 1)[-1].lower().removeprefix("meta-")
    for suffix in ("-instruct", "-chat", "-base", "-fp8", "-awq"):
        short = short.removesuffix(suffix)
    return next((m for m in MODELS if m.lower() == short and m != "tiny"), None)


def _stats_line(line: str, line_no: int) -> StatsLine:
    found = {k: pattern.search(line) for k, pattern in _STATS_FIELDS.items()}
    missing = [_WHAT[k] for k in _REQUIRED if found[k] is None]
    if missing:
        raise LogError(f"line {line_no} looks like vLLM's stats line but has no {' or '.join(missing)}; expected "
                       "'Avg prompt throughput: X tokens/s, Avg generation throughput: Y tokens/s, Running: N reqs, "
                       "Waiting: M reqs, ... GPU KV cache usage: Z%'")
    get = {k: _number(m.group(1)) if m else None for k, m in found.items()}
    usage = get["kv_usage_pct"]
    if usage > 100.0:
        raise LogError(f"line {line_no}: GPU KV cache usage {usage:g}% is more than 100%")
    return StatsLine(line_no, int(get["running"]), int(get["waiting"]), usage, int(get["preemptions"] or 0),
                     None if get["deferred"] is None else int(get["deferred"]), get["prompt_tok_s"], get["gen_tok_s"],
                     get["prefix_hit_pct"])


def _read_line(log: ServerLog, line: str, line_no: int) -> None:
    if "Running:" in line and ("Waiting:" in line or "Pending:" in line or "KV cache usage" in line):
        log.stats.append(_stats_line(line, line_no))
        if len(log.stats) > MAX_STATS_LINES:
            del log.stats[: len(log.stats) - MAX_STATS_LINES]
    if m := _KV_SIZE.search(line):
        log.device, log.kv_cache_tokens = m.group(1), int(_number(m.group(2)))
    if m := _CONCURRENCY.search(line):
        log.max_model_len, log.max_concurrency = int(_number(m.group(1))), _number(m.group(2))
    if m := _MAX_NUM_SEQS.search(line):
        log.max_num_seqs = int(m.group(1))
    if m := _MODEL.search(line):
        log.model_named = m.group(1)
        log.model = model_preset(m.group(1)) or log.model
    if m := _VERSION.search(line):
        log.vllm_version = m.group(1)
    if log.gpu is None and (gpu := gpu_preset_for_device(line)) is not None and "KV cache" not in line:
        log.gpu = gpu.name


def parse_log(lines: Iterable[str]) -> ServerLog:
    """Read vLLM's log lines (any prefix before them: timestamps, process names); unrelated lines are skipped.
    Raises LogError when no line is vLLM's, or a stats line lacks what the diagnosis reads."""
    log = ServerLog()
    for line_no, line in enumerate(lines, start=1):
        log.lines_read = line_no
        _read_line(log, line[:4096], line_no)  # (a line longer than any vLLM prints is read in part)
    if not log.stats and log.kv_cache_tokens is None and log.max_concurrency is None:
        raise LogError("no vLLM log line found: expected the start-up line 'GPU KV cache size: N tokens' or the "
                       "stats line 'Avg prompt throughput: ... Running: N reqs, Waiting: M reqs, ... GPU KV cache "
                       "usage: Z%'")
    return log


@dataclass(frozen=True)
class Diagnosis:
    case: str | None  # one of CASES, or None: none of them
    title: str
    why: str  # one or two sentences with the server's numbers
    fixes: list[str]
    numbers: dict[str, Any]
    reproduce: dict[str, Any]  # explorable / CLI settings that reproduce the server (what is known of it)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def line_case(s: StatsLine, max_num_seqs: int | None) -> str | None:
    """The case one stats line shows (None: none of the three)."""
    if s.preemptions > 0:
        return "past-the-wall"
    if s.waiting == 0:
        return None
    if s.kv_usage_pct >= MEMORY_FULL_PCT:
        return "memory-cap"
    if max_num_seqs is None or s.running >= max_num_seqs:
        return "slot-cap"
    return None


def _chosen(log: ServerLog, max_num_seqs: int | None) -> tuple[str | None, StatsLine | None]:
    """The case of the log as a whole, and the line it is read from (the latest of that case)."""
    cases = [(line_case(s, max_num_seqs), s) for s in log.stats]
    walled = [s for c, s in cases if c == "past-the-wall"]
    if walled:
        return "past-the-wall", max(walled, key=lambda s: (s.preemptions, s.line_no))
    queued = Counter(c for c, _s in cases if c is not None)
    if not queued:
        return None, log.stats[-1] if log.stats else None
    top = max(queued.values())
    case = next(c for c, _s in reversed(cases) if c is not None and queued[c] == top)  # a tie: the latest
    return case, next(s for c, s in reversed(cases) if c == case)


def diagnose(log: ServerLog, max_num_seqs: int | None = None) -> Diagnosis:
    """The case the log shows with this --max-num-seqs (or the one the log names), why, and its fixes."""
    seqs = max_num_seqs if max_num_seqs is not None else log.max_num_seqs
    case, line = _chosen(log, seqs)
    numbers = _numbers(log, line, seqs)
    title, why, fixes = explain(case, numbers, line is not None)
    return Diagnosis(case, title, why, fixes, numbers, reproduction(log, seqs))


def _numbers(log: ServerLog, line: StatsLine | None, seqs: int | None) -> dict[str, Any]:
    total_preemptions = sum(s.preemptions for s in log.stats)
    return {
        "max_num_seqs": seqs, "kv_cache_tokens": log.kv_cache_tokens, "max_model_len": log.max_model_len,
        "max_concurrency": log.max_concurrency, "device": log.device,
        "running": line.running if line else None, "waiting": line.waiting if line else None,
        "deferred": line.deferred if line else None, "kv_cache_usage_pct": line.kv_usage_pct if line else None,
        "preemptions": line.preemptions if line else None, "preemptions_total": total_preemptions,
        "prefix_cache_hit_rate_pct": line.prefix_hit_pct if line else None,
        "generation_tok_s": line.gen_tok_s if line else None, "prompt_tok_s": line.prompt_tok_s if line else None,
        "stats_lines": len(log.stats), "stats_lines_with_preemptions": sum(s.preemptions > 0 for s in log.stats),
        "line": line.line_no if line else None, "model": log.model, "model_named": log.model_named, "gpu": log.gpu,
        "vllm_version": log.vllm_version,
    }


def reproduction(log: ServerLog, seqs: int | None) -> dict[str, Any]:
    """Settings that reproduce the server here: its pool (from the KV cache size, priced for its model), slot cap,
    model and GPU where the log names them."""
    out: dict[str, Any] = {}
    model = log.model or DEFAULT_MODEL
    if log.model:
        out["model"] = log.model
    if log.gpu:
        out["gpu"] = log.gpu
    if seqs is not None:
        out["max_num_seqs"] = seqs
    if log.kv_cache_tokens:
        blocks = log.kv_cache_tokens // BLOCK_SIZE
        out["num_gpu_blocks_override"] = blocks
        out["pool_gib"] = round(blocks * BLOCK_SIZE * MODELS[model].kv_bytes_per_token / 2**30, 2)
    if log.max_model_len:
        out["max_model_len"] = log.max_model_len
    return out


def diagnose_text(text: str, max_num_seqs: int | None = None) -> Diagnosis:
    return diagnose(parse_log(text.splitlines()), max_num_seqs)
