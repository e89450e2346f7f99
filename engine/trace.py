"""Trace: what a run did, pass by pass and request by request, and the summary everything quotes.

Everything the explorable draws (lanes, strips, readouts, log lines) is derived from a Trace. A simulated
run and a live GPU run produce the same Trace type; only where the pass durations came from differs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.config import RunConfig
from engine.latency import LATENCY_KEYS, RequestTiming, latency_summary, request_timing
from engine.outputs import write_text_atomic
from engine.workload import Workload
from kernels import scheduler_core as core

if TYPE_CHECKING:
    from engine.live.stats import LiveStats

SUMMARY_KEYS = (
    "throughput_tok_s", "peak_batch", "mean_batch", "preemptions", "recomputed_prompt_tokens", "recomputed_tokens",
    "live_cache_fraction", "passes", "makespan_s", "finished_requests", "kv_cache_tokens", "max_concurrency",
    "trace_digest", "prefix_cache_hit_tokens", "prefix_cache_hit_rate", *LATENCY_KEYS,
    # the memory-wall fixes: their settings as served, and what they cost in GPUs
    "max_model_len", "gpu_memory_utilization", "kv_cache_dtype", "tensor_parallel_size", "num_gpus",
    "throughput_per_gpu_tok_s", "kv_cache_gib", "refused_requests",
    # the vLLM release the run mirrors and the scheduling settings its defaults set (engine/versions.py)
    "vllm_version", "async_scheduling", "scheduler_reserve_full_isl",
)


def max_concurrency(cfg: RunConfig) -> tuple[int, float]:
    """vLLM's startup figures: (GPU KV cache size in tokens, maximum concurrency at max_model_len).

    As vLLM computes them: concurrency = blocks (null block included) / blocks per max_model_len request.
    """
    length = cfg.served_max_model_len
    concurrency = cfg.num_gpu_blocks / cfg.blocks_for(length)
    return int(concurrency * length), concurrency


def format_digest(value: int) -> str:
    """The schedule digest as the CLI, the JSON and the tests print it: 16 hex digits."""
    return f"{value & 0xFFFFFFFFFFFFFFFF:016x}"


class Event(IntEnum):
    """What happened to a request in a pass (the `kind` column of `Trace.events`)."""

    ADMIT = core.EV_ADMIT
    RESUME = core.EV_RESUME  # readmitted after a preemption
    PREEMPT = core.EV_PREEMPT
    FINISH = core.EV_FINISH
    CAUGHT_UP = core.EV_CAUGHT_UP  # a resumed request's recompute reached what it had lost
    FIRST_TOKEN = core.EV_FIRST_TOKEN


# The columns of `Trace.events`, read through its named properties (`event_pass`, `event_request`, `event_kind`).
EVENT_PASS, EVENT_REQUEST, EVENT_KIND = 0, 1, 2


def _event_column(field: int, doc: str) -> property:
    return property(lambda self: self.events[:, field], doc=doc)


def _pass_column(field: int, doc: str) -> property:
    return property(lambda self: self.passes[:, field], doc=doc)


def _request_column(field: int, doc: str) -> property:
    return property(lambda self: self.requests[:, field], doc=doc)


@dataclass
class Trace:
    config: RunConfig
    workload: Workload
    passes: np.ndarray  # int64 [passes, fields]: read it through the named properties below
    pass_duration: np.ndarray  # seconds, float64 [passes]
    events: np.ndarray  # int64 [events, 3]: (pass, request, Event): read it through the event_* properties
    requests: np.ndarray  # int64 [requests, fields]: the final per-request table, read through properties
    digest: str
    measured: bool = False  # True when durations were read off a GPU
    live: LiveStats | None = None  # what a live run measured besides the durations
    starts: np.ndarray | None = None  # each pass's start (s); None: back to back from 0 s
    # The request of each output token in the order produced (pass p's are the next output_per_pass[p]).
    sampled: np.ndarray | None = None
    arrivals: np.ndarray | None = None  # each request's arrival (s); None or empty: all at 0 s
    # Per event, the tokens an ADMIT/RESUME was served from the prefix cache (0 for every other event).
    event_cached: np.ndarray | None = None
    refused_requests: int = 0  # requests vLLM refused (longer than max_model_len); not in `workload`

    def __post_init__(self) -> None:
        if self.events.shape[1] > 3:  # the core's table carries the cached tokens as a fourth column
            self.event_cached = self.events[:, 3].copy()
            self.events = self.events[:, :3].copy()
        if self.event_cached is None:
            self.event_cached = np.zeros(len(self.events), dtype=np.int64)
        if self.starts is not None:
            self.pass_start = np.asarray(self.starts, dtype=np.float64)
        else:
            self.pass_start = np.concatenate(([0.0], np.cumsum(self.pass_duration)[:-1])) if len(
                self.pass_duration) else np.zeros(0)
        self.pass_end = self.pass_start + self.pass_duration
        n = self.workload.num_requests
        self.arrival_s = (np.asarray(self.arrivals, dtype=np.float64) if self.arrivals is not None
                          and len(self.arrivals) else np.zeros(n))
        self._summary: dict[str, Any] | None = None
        self._timing: RequestTiming | None = None

    # -- per pass ---------------------------------------------------------------------------------
    @property
    def num_passes(self) -> int:
        return int(self.passes.shape[0])

    n_seqs = _pass_column(core.PASS_SEQS, "sequences scheduled in each pass")
    n_tokens = _pass_column(core.PASS_TOKENS, "tokens computed in each pass")
    prefill_tokens = _pass_column(core.PASS_PREFILL, "of those, tokens that are not a decode")
    kv_blocks = _pass_column(core.PASS_BLOCKS, "KV blocks handed out after scheduling the pass")
    running = _pass_column(core.PASS_RUNNING, "running requests after scheduling the pass")
    waiting = _pass_column(core.PASS_WAITING, "waiting requests after scheduling the pass")
    live_tokens = _pass_column(core.PASS_LIVE_TOKENS, "computed tokens the running requests hold (a shared block once)")
    held_slots = _pass_column(core.PASS_HELD_SLOTS, "token slots handed out (blocks x block size) or reserved")
    output_per_pass = _pass_column(core.PASS_OUTPUT, "output tokens sampled in each pass")
    preempted_per_pass = _pass_column(core.PASS_PREEMPTED, "requests evicted in each pass")
    cached_per_pass = _pass_column(core.PASS_CACHED, "tokens admissions took from the prefix cache in each pass")
    lookup_queries = _pass_column(core.PASS_LOOKUP_QUERIES, "tokens looked up in the prefix cache in each pass "
                                                            "(every lookup, admitted or not, as vLLM counts them)")
    lookup_hits = _pass_column(core.PASS_LOOKUP_HITS, "of those, tokens found")

    @property
    def kv_usage(self) -> np.ndarray:
        """vLLM's "GPU KV cache usage": share of usable blocks handed out (or reserved, when reserving)."""
        usable = self.config.usable_blocks
        if self.config.allocation == "reserve":
            return self.passes[:, core.PASS_RESERVED] / (usable * self.config.block_size)
        return self.kv_blocks / usable

    def preempted_lists(self) -> list[list[int]]:
        """Per pass, the request ids evicted in that pass, in eviction order."""
        out: list[list[int]] = [[] for _ in range(self.num_passes)]
        for p, r in self.events_of(Event.PREEMPT)[:, :2].tolist():
            out[p].append(r)
        return out

    def admit_lists(self) -> list[list[list[int]]]:
        """Per pass, [request, tokens from the prefix cache] for every admission (new or resumed), in order."""
        out: list[list[list[int]]] = [[] for _ in range(self.num_passes)]
        mask = (self.event_kind == Event.ADMIT) | (self.event_kind == Event.RESUME)
        for p, r, cached in zip(self.event_pass[mask].tolist(), self.event_request[mask].tolist(),
                                self.event_cached[mask].tolist()):
            out[p].append([r, cached])
        return out

    # -- per event (in the order the core recorded them) ---------------------------------------------
    event_pass = _event_column(EVENT_PASS, "the pass each event happened in")
    event_request = _event_column(EVENT_REQUEST, "the request it happened to")
    event_kind = _event_column(EVENT_KIND, "what happened (an Event)")

    def events_of(self, kind: Event) -> np.ndarray:
        """The rows of `events` of one kind: (pass, request, kind)."""
        return self.events[self.event_kind == kind]

    # -- per request ------------------------------------------------------------------------------
    preemptions_per_request = _request_column(core.PREEMPTS, "times each request was evicted")
    recomputed_per_request = _request_column(core.RECOMPUTED, "tokens each request computed again")
    recomputed_prompt_per_request = _request_column(core.RECOMPUTED_PROMPT, "of those, prompt tokens")
    generated_per_request = _request_column(core.GENERATED, "output tokens each request produced")
    cache_hits_per_request = _request_column(core.CACHE_HITS, "tokens each request took from the prefix cache")

    @property
    def finished_per_request(self) -> np.ndarray:
        return self.requests[:, core.STATUS] == core.FINISHED

    def finish_time(self) -> np.ndarray:
        fin = self.events_of(Event.FINISH)
        out = np.full(self.workload.num_requests, np.nan)
        out[fin[:, 1]] = self.pass_end[fin[:, 0]]
        return out

    @property
    def samples(self) -> np.ndarray | None:
        """int64 [output tokens, 2]: (pass, request) of each output token, in the order produced."""
        if self.sampled is None:
            return None
        return np.stack([np.repeat(np.arange(self.num_passes), self.output_per_pass), self.sampled], axis=1)

    @property
    def arrives_over_time(self) -> bool:
        return bool(self.arrival_s.any())

    def timing(self) -> RequestTiming:
        """Per-request TTFT, TPOT, E2EL and ITL gaps (engine.latency), computed once per trace."""
        if self._timing is None:
            if self.sampled is None:
                raise ValueError("this trace has no record of sampled tokens")
            self._timing = request_timing(self.arrival_s, self.pass_end, self.output_per_pass, self.sampled,
                                          self.workload.num_requests)
        return self._timing

    # -- summary ----------------------------------------------------------------------------------
    @property
    def makespan_s(self) -> float:
        return float(self.pass_end[-1]) if self.num_passes else 0.0

    @property
    def output_tokens(self) -> int:
        return int(self.output_per_pass.sum())

    @property
    def throughput_tok_s(self) -> float:
        """Output tokens per second of the run (the summary's figure, without the rest of the summary)."""
        makespan = self.makespan_s
        return self.output_tokens / makespan if makespan > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The figures everything quotes (SUMMARY_KEYS), computed once per trace."""
        if self._summary is None:
            self._summary = self._compute_summary()
        return dict(self._summary)

    def _compute_summary(self) -> dict[str, Any]:
        seqs = self.n_seqs
        held = self.held_slots.astype(np.float64)
        live = self.live_tokens.astype(np.float64)
        has_held = held > 0
        kv_tokens, concurrency = max_concurrency(self.config)
        makespan = self.makespan_s
        return {
            "throughput_tok_s": self.throughput_tok_s,
            "peak_batch": int(seqs.max()) if self.num_passes else 0,
            "mean_batch": float(seqs.mean()) if self.num_passes else 0.0,
            "preemptions": int(self.preemptions_per_request.sum()),
            "recomputed_prompt_tokens": int(self.recomputed_prompt_per_request.sum()),
            "recomputed_tokens": int(self.recomputed_per_request.sum()),
            "live_cache_fraction": float((live[has_held] / held[has_held]).mean()) if has_held.any() else 0.0,
            "passes": self.num_passes,
            "makespan_s": makespan,
            "finished_requests": int(self.finished_per_request.sum()),
            "kv_cache_tokens": kv_tokens,
            "max_concurrency": round(concurrency, 2),
            "trace_digest": self.digest,
            **self._cache_summary(),
            **self._memory_summary(),
            "vllm_version": self.config.vllm_version, "async_scheduling": self.config.async_scheduling,
            "scheduler_reserve_full_isl": self.config.scheduler_reserve_full_isl,
            **(latency_summary(self.timing(), makespan, self.config.slo_targets) if self.sampled is not None else {}),
        }

    def _memory_summary(self) -> dict[str, Any]:
        """The memory-wall settings as the server ran (max_model_len as served), per-GPU figures, refusals, and
        with --gpu-memory-utilization the start-up memory profile that sized the pool (engine/memory.py)."""
        cfg = self.config
        out = {
            "max_model_len": cfg.served_max_model_len, "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "kv_cache_dtype": cfg.kv_cache_dtype, "tensor_parallel_size": cfg.tensor_parallel_size,
            "num_gpus": cfg.num_gpus, "throughput_per_gpu_tok_s": self.throughput_tok_s / cfg.num_gpus,
            "kv_cache_gib": cfg.kv_cache_gib, "refused_requests": self.refused_requests,
        }
        if cfg.pool_source == "utilization":
            out["memory_profile"] = cfg.memory_profile.as_dict()
        return out

    def _cache_summary(self) -> dict[str, Any]:
        """Prefix-cache figures: tokens admissions were served from the cache (all, and on readmission), and
        vLLM's hit rate: hits over tokens looked up, every lookup counted (its prefix_cache_hits/_queries)."""
        queries = int(self.lookup_queries.sum())
        return {
            "prefix_cache_hit_tokens": int(self.cached_per_pass.sum()),
            "prefix_cache_readmission_hit_tokens": int(self.event_cached[self.event_kind == Event.RESUME].sum()),
            "prefix_cache_hit_rate": int(self.lookup_hits.sum()) / queries if queries else 0.0,
        }

    def schedule_json(self) -> dict[str, Any]:
        """The per-pass schedule in the fixtures' shape (what `--trace-out` writes)."""
        return {
            "n_seqs": self.n_seqs.tolist(),
            "n_tokens": self.n_tokens.tolist(),
            "preempted": self.preempted_lists(),
            "admit": self.admit_lists(),
            "pass_start_s": self.pass_start.tolist(),
            "t_start_s": self.pass_start.tolist(),  # the same times under the name replays read
            "pass_duration_s": self.pass_duration.tolist(),
            "arrival_s": self.arrival_s.tolist(),
            "workload": {"prompt_len": self.workload.prompt_len.tolist(),
                         "output_len": self.workload.output_len.tolist(), "arrival_s": self.arrival_s.tolist(),
                         "prefix_group": self.workload.prefix_group.tolist(),
                         "prefix_len": self.workload.prefix_len.tolist(),
                         **({"group_parent": self.workload.group_parent.tolist(),
                             "group_start": self.workload.group_start.tolist()} if self.workload.has_prefix_tree
                            else {})},
            "max_num_seqs": self.config.max_num_seqs, "max_num_batched_tokens": self.config.max_num_batched_tokens,
            "block_size": self.config.block_size, "num_gpu_blocks": self.config.num_gpu_blocks,
            "scheduler_reserve_full_isl": self.config.scheduler_reserve_full_isl,
            "enable_prefix_caching": self.config.enable_prefix_caching,
            "async_scheduling": self.config.async_scheduling, "vllm_version": self.config.vllm_version,
            "summary": self.summary(),
        }

    def write_schedule(self, path: str) -> None:
        write_text_atomic(path, json.dumps(self.schedule_json()))
