"""What a live run measured, as a typed record: per pass (GPU and wall time, kind, bytes and FLOPs, the
cost model's prediction) and the run's totals. `Trace.live` holds one; calibration, scoring, the CLI
and the GPU benchmark read its fields. No torch import.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.presets import ModelSpec

# A pass as the runner sees it: every sequence runs one token (decode-only: the CUDA-graph path), some do
# and some do not (prompts joining decodes: eager), none does, or nobody runs (a pass that only preempted).
PASS_KINDS = ("decode", "mixed", "prefill", "empty")


def pass_kind(new_tokens: np.ndarray) -> int:
    """Index into PASS_KINDS of a pass that runs new_tokens[i] tokens for each scheduled sequence. A
    1-token chunk counts as a decode, as the runner batches it with them."""
    singles = int(np.count_nonzero(np.asarray(new_tokens) == 1))
    if len(new_tokens) == 0:
        return PASS_KINDS.index("empty")
    if singles == len(new_tokens):
        return PASS_KINDS.index("decode")
    return PASS_KINDS.index("mixed" if singles else "prefill")


@dataclass
class LivePasses:
    """Per pass of a live run (arrays of one length): what it cost on each clock and what it did."""

    gpu_ms: np.ndarray  # CUDA-event time (host time on a CPU)
    wall_ms: np.ndarray  # the whole host loop: schedule, stage, run, sync, complete
    runner_wall_ms: np.ndarray  # the runner's part of the loop
    pass_kind: np.ndarray  # int8 codes into PASS_KINDS
    graph_pass: np.ndarray  # bool: replayed a CUDA graph
    predicted_ms: np.ndarray  # the cost model's time for the pass with the run's GPU preset
    pass_bytes: np.ndarray
    pass_flops: np.ndarray


@dataclass(frozen=True)
class LiveStats:
    """A live run's setting and totals (the keys `python -m engine live --json` adds), and its passes."""

    device: str
    model_preset: str
    dtype: str
    weights: str
    attention: str
    kernels: str
    predicted_gpu: str
    cuda_graph_passes: int
    measured_tok_s: float  # output tokens over summed GPU time
    wall_tok_s: float  # over the summed host loop
    predicted_tok_s: float  # over the summed predictions
    gpu_ms_per_pass: float
    wall_ms_per_pass: float
    host_ms_per_pass: float  # wall minus GPU: scheduling, staging, sync
    live_spec: ModelSpec = field(repr=False)  # the shapes actually run, priced at the run's element size
    passes: LivePasses = field(repr=False)
    # On a GPU, the terms of vLLM's start-up memory profile as measured (engine/live/memory_probe.py), else None.
    memory: dict | None = field(default=None, repr=False)

    @classmethod
    def measure(cls, passes: LivePasses, output_tokens: int, **setting: Any) -> "LiveStats":
        n = max(1, len(passes.gpu_ms))
        gpu_s, wall_s, predicted_s = (float(np.sum(a)) / 1e3 for a in
                                      (passes.gpu_ms, passes.wall_ms, passes.predicted_ms))
        return cls(
            cuda_graph_passes=int(np.sum(passes.graph_pass)),
            measured_tok_s=output_tokens / gpu_s if gpu_s > 0 else 0.0,
            wall_tok_s=output_tokens / wall_s if wall_s > 0 else 0.0,
            predicted_tok_s=output_tokens / predicted_s if predicted_s > 0 else 0.0,
            gpu_ms_per_pass=1e3 * gpu_s / n, wall_ms_per_pass=1e3 * wall_s / n,
            host_ms_per_pass=1e3 * (wall_s - gpu_s) / n, passes=passes, **setting,
        )

    def summary(self) -> dict[str, Any]:
        """The setting and totals as plain values (not the per-pass arrays, not the spec)."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__ if f not in ("live_spec", "passes", "memory")}
