"""The two log lines vLLM itself would print for a run: the startup capacity line and the periodic stats line.

Formats follow vLLM (v0.33 wording; v0.11 splits the startup line in two): numbers with thousands
separators, and "Preemptions: N" present only when N > 0, which is what makes its appearance an alert.
"""
from __future__ import annotations

import numpy as np

from engine.config import RunConfig
from engine.trace import Trace, max_concurrency
from kernels import scheduler_core as core

LOG_STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL default


def startup_log_line(cfg: RunConfig) -> str:
    """`GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx`."""
    tokens, concurrency = max_concurrency(cfg)
    return (
        f"INFO [kv_cache_utils.py] GPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
        f"{cfg.effective_max_model_len:,} tokens per request: {concurrency:.2f}x"
    )


def periodic_stats(trace: Trace, at_s: float, interval_s: float = LOG_STATS_INTERVAL_S) -> dict:
    """The figures of the stats line logged at time `at_s`, over the window (at_s - interval_s, at_s]."""
    if trace.num_passes == 0:
        return {"prompt_tok_s": 0.0, "gen_tok_s": 0.0, "running": 0, "waiting": 0, "preemptions": 0, "kv_usage": 0.0}
    at_s = float(min(max(at_s, 0.0), trace.makespan_s))
    lo = max(at_s - interval_s, 0.0)
    elapsed = at_s - lo
    in_window = (trace.pass_end > lo) & (trace.pass_end <= at_s)
    # Like vLLM v0.33: a prompt counts once, at its first token; re-prefills after preemption do not.
    first = trace.events_of(core.EV_FIRST_TOKEN)
    prompt_tokens = float(trace.workload.prompt_len[first[in_window[first[:, 0]], 1]].sum())
    gen_tokens = float(trace.passes[in_window, core.PASS_OUTPUT].sum())
    last = int(np.searchsorted(trace.pass_start, at_s, side="right")) - 1
    last = max(last, 0)
    row = trace.passes[last]
    return {
        "prompt_tok_s": prompt_tokens / elapsed if elapsed > 0 else 0.0,
        "gen_tok_s": gen_tokens / elapsed if elapsed > 0 else 0.0,
        "running": int(row[core.PASS_RUNNING]),
        "waiting": int(row[core.PASS_WAITING]),
        "preemptions": int(trace.passes[in_window, core.PASS_PREEMPTED].sum()),
        "kv_usage": float(trace.kv_usage[last]),
    }


def periodic_log_line(trace: Trace, at_s: float, interval_s: float = LOG_STATS_INTERVAL_S) -> str:
    """The `Engine 000: Avg prompt throughput ... GPU KV cache usage` line vLLM logs at `at_s`."""
    s = periodic_stats(trace, at_s, interval_s)
    parts = [
        f"Avg prompt throughput: {s['prompt_tok_s']:.1f} tokens/s",
        f"Avg generation throughput: {s['gen_tok_s']:.1f} tokens/s",
        f"Running: {s['running']} reqs",
        f"Waiting: {s['waiting']} reqs",
    ]
    if s["preemptions"] > 0:
        parts.append(f"Preemptions: {s['preemptions']}")
    parts.append(f"GPU KV cache usage: {100 * s['kv_usage']:.1f}%")
    return "INFO [loggers.py] Engine 000: " + ", ".join(parts)
