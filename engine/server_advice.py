"""The course's words for each case engine/diagnose.py names: a title, why (with the server's own numbers) and the
fixes that case calls for (the article's "Checking it on a real system")."""
from __future__ import annotations

import math
from typing import Any

MEMORY_FULL_PCT = 90.0  # the course: "near 100%" is memory's cap, "well under 90%" leaves the slot cap binding

TITLES = {
    "memory-cap": "Memory is the cap",
    "slot-cap": "The slot cap binds",
    "past-the-wall": "Past the wall",
    None: "None of the three cases",
}

MORE_CACHE = [
    "Lower --max-model-len to what your requests need: the start-up concurrency is the pool divided by it",
    "Raise --gpu-memory-utilization (0.92 by default in recent vLLM, 0.9 in v0.11; 0.95 if nothing else shares the "
    "GPU)",
    "Quantize the cache: --kv-cache-dtype fp8 stores each token's keys and values in half the bytes",
    "Shard the cache with tensor parallelism: --tensor-parallel-size 2 gives each GPU half the KV heads (and the "
    "weights' memory back)",
]


def suggested_seqs(running: int | None, usage_pct: float | None) -> int | None:
    """Sequences that would fill the cache to MEMORY_FULL_PCT at today's lengths (Running scaled by usage)."""
    if not running or not usage_pct:
        return None
    return max(1, math.floor(running * MEMORY_FULL_PCT / usage_pct))


def _startup(n: dict[str, Any]) -> str:
    if n.get("kv_cache_tokens") and n.get("max_concurrency") and n.get("max_model_len"):
        return (f" At start-up vLLM gave the cache {n['kv_cache_tokens']:,} tokens: {n['max_concurrency']:.2f} "
                f"requests of {n['max_model_len']:,} tokens at once.")
    if n.get("kv_cache_tokens"):
        return f" At start-up vLLM gave the cache {n['kv_cache_tokens']:,} tokens."
    return ""


def _seqs(n: dict[str, Any]) -> str:
    return f"--max-num-seqs {n['max_num_seqs']:,}" if n.get("max_num_seqs") is not None else "--max-num-seqs"


def explain(case: str | None, n: dict[str, Any], has_stats: bool) -> tuple[str, str, list[str]]:
    """(title, why, fixes) for the case, worded with the numbers read."""
    if not has_stats:
        conc = n.get("max_concurrency")
        why = ("Only the start-up line was given: it says how many sequences fit at full context length, not which "
               "cap the server meets. Paste a stats line (Running, Waiting, GPU KV cache usage) too." + _startup(n))
        fixes = ([f"If --max-num-seqs is above {math.floor(conc):,}, requests of full length will never all fit: "
                  "expect memory, not the slot cap, to bind"] if conc else [])
        return TITLES[None], why, fixes
    run, wait, kv = n["running"], n["waiting"], n["kv_cache_usage_pct"]
    if case == "past-the-wall":
        lines = n["stats_lines_with_preemptions"]
        why = (f"{n['preemptions_total']:,} preemptions in {lines:,} stats line{'s' if lines != 1 else ''} "
               f"({n['preemptions']:,} in the line read, with {run:,} running and the KV cache {kv:.1f}% full): the "
               "server admits more sequences than its cache can carry, and every preemption throws away a prefill "
               "it must compute again." + _startup(n))
        fewer = suggested_seqs(run, kv)
        fixes = [f"Lower {_seqs(n)} to about {fewer:,}, what this cache carries at today's lengths, so that "
                 "admission stops before eviction starts" if fewer else "Lower --max-num-seqs below the Running "
                 "count at which Preemptions appears"] + MORE_CACHE + [
                 "Alert on any non-zero rate of vllm:num_preemptions, not on a threshold: the throughput lost is "
                 "about the preempted prompt tokens divided by your prefill rate"]
        return TITLES[case], why, fixes
    if case == "memory-cap":
        seqs = f" of {_seqs(n)}" if n.get("max_num_seqs") is not None else ""
        why = (f"Running is {run:,}{seqs} with {wait:,} waiting and the KV cache {kv:.1f}% full: the cache, not the "
               "slot cap, decides the batch." + _startup(n))
        return TITLES[case], why, MORE_CACHE + ["Leave --max-num-seqs alone: raising it cannot help, since the "
                                                "cache stops admission before the cap does"]
    if case == "slot-cap":
        pinned = (f"Running is pinned at {_seqs(n)}" if n.get("max_num_seqs") is not None
                  else f"Running is {run:,} (give --max-num-seqs to confirm it is the cap)")
        why = (f"{pinned} with {wait:,} waiting while the KV cache is only {kv:.1f}% full: the slot cap really "
               "binds, and raising it really will help." + _startup(n))
        more = suggested_seqs(run, kv)
        fixes = [f"Raise --max-num-seqs to about {more:,}: that would fill the cache to {MEMORY_FULL_PCT:.0f}% at "
                 "today's lengths" if more else "Raise --max-num-seqs",
                 "Keep --max-num-batched-tokens at least --max-num-seqs (vLLM refuses to start otherwise)",
                 "Watch for Preemptions after raising it: past what the cache holds, the same change turns into "
                 "evictions"]
        return TITLES[case], why, fixes
    if wait == 0:
        why = (f"Nothing waits ({run:,} running, KV cache {kv:.1f}% full): the server keeps up with its traffic, so "
               "neither cap binds; the batch is what arrivals bring.")
        return TITLES[None], why, ["Nothing to fix for throughput; look at latency (TTFT, TPOT) instead"]
    why = (f"{wait:,} wait with {run:,} running of {_seqs(n)} and the KV cache {kv:.1f}% full: neither cap binds "
           "here; a queue this short-lived usually means prompts waiting for room in the per-pass token budget.")
    return TITLES[None], why, ["Read a few more stats lines: if Waiting stays, raise --max-num-batched-tokens"]
