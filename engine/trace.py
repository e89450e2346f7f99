"""Trace: what a run did, pass by pass and request by request, and the summary everything quotes.

Everything the explorable draws (lanes, strips, readouts, log lines) is derived from a Trace. A simulated
run and a live GPU run produce the same Trace type; only where the pass durations came from differs.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.config import RunConfig
from engine.outputs import write_text_atomic
from engine.workload import Workload
from kernels import scheduler_core as core

SUMMARY_KEYS = (
    "throughput_tok_s", "peak_batch", "mean_batch", "preemptions", "recomputed_prompt_tokens", "recomputed_tokens",
    "live_cache_fraction", "passes", "makespan_s", "finished_requests", "kv_cache_tokens", "max_concurrency",
    "trace_digest",
)


def max_concurrency(cfg: RunConfig) -> tuple[int, float]:
    """vLLM's startup figures: (GPU KV cache size in tokens, maximum concurrency at max_model_len).

    As vLLM computes them: concurrency = blocks (null block included) / blocks per max_model_len request.
    """
    length = cfg.served_max_model_len
    concurrency = cfg.num_gpu_blocks / (-(-length // cfg.block_size))
    return int(concurrency * length), concurrency


@dataclass
class Trace:
    config: RunConfig
    workload: Workload
    passes: np.ndarray  # int64 [passes, core.NUM_PASS_FIELDS]
    pass_duration: np.ndarray  # seconds, float64 [passes]
    events: np.ndarray  # int64 [events, 3]: (pass, request, kind)
    requests: np.ndarray  # int64 [requests, core.NUM_REQ_FIELDS]: final per-request table
    digest: str
    measured: bool = False  # True when durations were read off a GPU
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pass_start = np.concatenate(([0.0], np.cumsum(self.pass_duration)[:-1])) if len(self.pass_duration) else (
            np.zeros(0)
        )
        self.pass_end = self.pass_start + self.pass_duration

    # -- per-pass columns -------------------------------------------------------------------------
    @property
    def num_passes(self) -> int:
        return int(self.passes.shape[0])

    def column(self, name: int) -> np.ndarray:
        return self.passes[:, name]

    @property
    def n_seqs(self) -> np.ndarray:
        return self.passes[:, core.PASS_SEQS]

    @property
    def n_tokens(self) -> np.ndarray:
        return self.passes[:, core.PASS_TOKENS]

    @property
    def kv_blocks(self) -> np.ndarray:
        return self.passes[:, core.PASS_BLOCKS]

    @property
    def kv_usage(self) -> np.ndarray:
        """vLLM's "GPU KV cache usage": share of usable blocks handed out (or reserved, when reserving)."""
        usable = self.config.usable_blocks
        if self.config.allocation == "reserve":
            return self.passes[:, core.PASS_RESERVED] / (usable * self.config.block_size)
        return self.passes[:, core.PASS_BLOCKS] / usable

    @property
    def preempted_per_pass(self) -> np.ndarray:
        return self.passes[:, core.PASS_PREEMPTED]

    def preempted_lists(self) -> list[list[int]]:
        """Per pass, the request ids evicted in that pass, in eviction order."""
        out: list[list[int]] = [[] for _ in range(self.num_passes)]
        for p, r, kind in self.events:
            if kind == core.EV_PREEMPT:
                out[int(p)].append(int(r))
        return out

    def events_of(self, kind: int) -> np.ndarray:
        return self.events[self.events[:, 2] == kind]

    # -- per-request ------------------------------------------------------------------------------
    @property
    def preemptions_per_request(self) -> np.ndarray:
        return self.requests[:, core.PREEMPTS]

    def finish_time(self) -> np.ndarray:
        fin = self.events_of(core.EV_FINISH)
        out = np.full(self.workload.num_requests, np.nan)
        out[fin[:, 1]] = self.pass_end[fin[:, 0]]
        return out

    # -- summary ----------------------------------------------------------------------------------
    @property
    def makespan_s(self) -> float:
        return float(self.pass_end[-1]) if self.num_passes else 0.0

    @property
    def output_tokens(self) -> int:
        return int(self.passes[:, core.PASS_OUTPUT].sum())

    def summary(self) -> dict[str, Any]:
        seqs = self.n_seqs
        held = self.passes[:, core.PASS_HELD_SLOTS].astype(np.float64)
        live = self.passes[:, core.PASS_LIVE_TOKENS].astype(np.float64)
        has_held = held > 0
        kv_tokens, concurrency = max_concurrency(self.config)
        makespan = self.makespan_s
        return {
            "throughput_tok_s": self.output_tokens / makespan if makespan > 0 else 0.0,
            "peak_batch": int(seqs.max()) if self.num_passes else 0,
            "mean_batch": float(seqs.mean()) if self.num_passes else 0.0,
            "preemptions": int(self.requests[:, core.PREEMPTS].sum()),
            "recomputed_prompt_tokens": int(self.requests[:, core.RECOMPUTED_PROMPT].sum()),
            "recomputed_tokens": int(self.requests[:, core.RECOMPUTED].sum()),
            "live_cache_fraction": float((live[has_held] / held[has_held]).mean()) if has_held.any() else 0.0,
            "passes": self.num_passes,
            "makespan_s": makespan,
            "finished_requests": int((self.requests[:, core.STATUS] == core.FINISHED).sum()),
            "kv_cache_tokens": kv_tokens,
            "max_concurrency": round(concurrency, 2),
            "trace_digest": self.digest,
        }

    def schedule_json(self) -> dict[str, Any]:
        """The per-pass schedule in the fixtures' shape (what `--trace-out` writes)."""
        return {
            "n_seqs": self.n_seqs.tolist(),
            "n_tokens": self.n_tokens.tolist(),
            "preempted": self.preempted_lists(),
            "pass_start_s": self.pass_start.tolist(),
            "pass_duration_s": self.pass_duration.tolist(),
            "summary": self.summary(),
        }

    def write_schedule(self, path: str) -> None:
        write_text_atomic(path, json.dumps(self.schedule_json()))


class TraceBuilder:
    """Collects the rows of a step-at-a-time run (the live executor, or the stepwise simulator)."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.durations: list[float] = []
        self.events: list[tuple[int, int, int]] = []

    def add(self, plan, outcome, seconds: float) -> None:
        p = plan.index
        self.rows.append(plan.record)
        self.durations.append(seconds)
        self.events.extend((p, int(r), core.EV_PREEMPT) for r in plan.preempted)
        self.events.extend(
            (p, int(r), core.EV_RESUME if res else core.EV_ADMIT) for r, res in zip(plan.admitted, plan.resumed)
        )
        self.events.extend((p, int(r), core.EV_CAUGHT_UP) for r in outcome.caught_up)
        self.events.extend((p, int(r), core.EV_FIRST_TOKEN) for r in outcome.first_token)
        self.events.extend((p, int(r), core.EV_FINISH) for r in outcome.finished)

    def build(self, scheduler, measured: bool = False, extra: dict | None = None) -> Trace:
        passes = np.array(self.rows, dtype=np.int64).reshape(-1, core.NUM_PASS_FIELDS)
        events = np.array(self.events, dtype=np.int64).reshape(-1, 3)
        return Trace(scheduler.config, scheduler.workload, passes, np.array(self.durations, dtype=np.float64),
                     events, scheduler.req.copy(), scheduler.digest, measured=measured, extra=extra or {})
