"""The two log lines vLLM itself would print for a run: the startup capacity line and the periodic stats line.

Formats follow vLLM (v0.33 wording; v0.11 splits the startup line in two): numbers with thousands
separators, and "Preemptions: N" present only when N > 0, which is what makes its appearance an alert.
"""
from __future__ import annotations

import numpy as np

from engine.config import RunConfig, refusal_message, refused_requests
from engine.trace import Event, Trace, max_concurrency
from engine.versions import VERSIONS

LOG_STATS_INTERVAL_S = 10.0  # VLLM_LOG_STATS_INTERVAL default


def startup_log_line(cfg: RunConfig) -> str:
    """`GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx`."""
    tokens, concurrency = max_concurrency(cfg)
    return (
        f"INFO [kv_cache_utils.py] GPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
        f"{cfg.served_max_model_len:,} tokens per request: {concurrency:.2f}x"
    )


def memory_log_lines(cfg: RunConfig) -> list[str]:
    """What vLLM logs while sizing the cache from --gpu-memory-utilization (gpu_worker.py, v0.11), or nothing
    when the pool was given directly."""
    if cfg.pool_source != "utilization":
        return []
    p = cfg.memory_profile
    gib = 2**30
    return [f"INFO [gpu_worker.py] Available KV cache memory: {p.available_kv_cache_memory / gib:.2f} GiB"
            + (f" (each of {cfg.tensor_parallel_size} workers)" if cfg.tensor_parallel_size > 1 else "")]


def refusal_log_lines(cfg: RunConfig) -> list[str]:
    """The error the first refused request got, and a count of the others (empty when none was refused)."""
    workload = cfg.build_workload()
    refused = refused_requests(cfg, workload)
    if refused.size == 0:
        return []
    lines = [f"ERROR [serving_completion.py] {refusal_message(cfg, workload, int(refused[0]))}"]
    if refused.size > 1:
        lines.append(f"# {refused.size:,} requests refused like this (HTTP 400), longer than --max-model-len "
                     f"{cfg.effective_max_model_len:,}; the scheduler never saw them")
    return lines


def startup_error(cfg: RunConfig) -> str | None:
    """vLLM's start-up refusal when one request of max_model_len cannot fit the pool, else None.

    The simulator still runs such a config (its workload fits); the explorable shows what vLLM would say. A
    --max-model-len beyond the model's own context is refused first, at configuration (ModelConfig's
    _get_and_verify_max_len, vllm/config/model.py, v0.11).
    """
    length = cfg.served_max_model_len
    if length > cfg.model_spec.max_model_len:
        return (f"ERROR [model.py] User-specified max_model_len ({length}) is greater than the derived max_model_len "
                f"(max_position_embeddings={cfg.model_spec.max_model_len} in model's config.json). To allow "
                "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
    if cfg.blocks_for(length) <= cfg.usable_blocks:
        return None
    kv = cfg.kv_bytes_per_token
    needed = cfg.blocks_for(length) * cfg.block_size * kv / 2**30
    available = cfg.usable_blocks * cfg.block_size * kv / 2**30
    estimate = cfg.usable_blocks * cfg.block_size
    return (
        f"ERROR [kv_cache_utils.py] To serve at least one request with the model's max seq len ({length}), "
        f"({needed:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({available:.2f} GiB). Based on the available memory, the estimated maximum model length is {estimate}. "
        "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )


def serve_command(cfg: RunConfig) -> str:
    """The `vllm serve` command line this run stands for."""
    parts = [f"vllm serve {cfg.model}", f"--max-num-seqs {cfg.max_num_seqs}",
             f"--max-num-batched-tokens {cfg.max_num_batched_tokens}"]
    if cfg.served_max_model_len != cfg.model_spec.max_model_len:
        parts.append(f"--max-model-len {cfg.served_max_model_len}")
    if cfg.num_gpu_blocks_override is not None:
        parts.append(f"--num-gpu-blocks-override {cfg.num_gpu_blocks_override}")
    if cfg.block_size != 16:
        parts.append(f"--block-size {cfg.block_size}")
    parts += _memory_flags(cfg)
    if not cfg.enable_prefix_caching:  # vLLM V1 caches by default: these figures are for a server that does not
        parts.append("--no-enable-prefix-caching")
    parts += [flag for flag, _ in _scheduling_flags(cfg)]
    return "$ " + " ".join(parts)


def serve_command_notes(cfg: RunConfig) -> list[str]:
    """One `# --flag: why` comment for each flag `serve_command` writes, in the same order."""
    notes = [
        f"# --max-num-seqs {cfg.max_num_seqs}: the cap on running sequences; it only stops admission",
        f"# --max-num-batched-tokens {cfg.max_num_batched_tokens}: the token budget of one pass, prefill chunks "
        "and decode tokens together",
    ]
    if cfg.served_max_model_len != cfg.model_spec.max_model_len:
        if cfg.max_model_len is None:
            notes.append(
                f"# --max-model-len {cfg.served_max_model_len}: this pool cannot hold one request of the model's "
                f"full {cfg.model_spec.max_model_len:,}-token context, so vLLM would refuse to start and advise "
                "this length instead; we serve with it (every request here is far shorter)")
        else:
            notes.append(f"# --max-model-len {cfg.served_max_model_len}: the longest request (prompt + output) "
                         "the server accepts")
    if cfg.num_gpu_blocks_override is not None:
        notes.append(f"# --num-gpu-blocks-override {cfg.num_gpu_blocks_override}: the pool given as that many "
                     f"{cfg.block_size}-token blocks (block 0 included) instead of sized from GPU memory")
    if cfg.block_size != 16:
        notes.append(f"# --block-size {cfg.block_size}: tokens per KV cache block (vLLM's default is 16)")
    return notes + _memory_notes(cfg) + [f"# {flag}: {why}" for flag, why in _scheduling_flags(cfg)]


def _scheduling_flags(cfg: RunConfig) -> list[tuple[str, str]]:
    """(flag, why) for the scheduling switches the run sets: --async-scheduling whenever it is on (a reader of
    any version sees it), --no-async-scheduling where the chosen release would turn it on."""
    default = VERSIONS[cfg.vllm_version].settings["async_scheduling"]
    if cfg.async_scheduling:
        return [("--async-scheduling", "pass N+1 is planned while pass N runs; a finished request's blocks come "
                                       "back one pass later")]
    if default:
        return [("--no-async-scheduling", f"vLLM {cfg.vllm_version} schedules asynchronously by default; this "
                                          "run is synchronous")]
    return []


def _memory_flags(cfg: RunConfig) -> list[str]:
    """The memory-wall fixes' flags, as vLLM spells them (each only when it is not vLLM's default)."""
    flags = []
    if cfg.gpu_memory_utilization is not None:
        flags.append(f"--gpu-memory-utilization {cfg.gpu_memory_utilization:g}")
    if cfg.kv_cache_dtype != "auto":
        flags.append(f"--kv-cache-dtype {cfg.kv_cache_dtype}")
    if cfg.tensor_parallel_size > 1:
        flags.append(f"--tensor-parallel-size {cfg.tensor_parallel_size}")
    return flags


def _memory_notes(cfg: RunConfig) -> list[str]:
    notes = []
    if cfg.gpu_memory_utilization is not None:
        p = cfg.memory_profile
        gib = 2**30
        notes.append(
            f"# --gpu-memory-utilization {cfg.gpu_memory_utilization:g}: of {p.total_memory / gib:.2f} GiB per GPU "
            f"vLLM may use {p.requested_memory / gib:.2f}; less {p.weights_memory / gib:.2f} GiB of weights, "
            f"{p.activation_peak / gib:.2f} GiB activation peak at {cfg.max_num_batched_tokens:,} tokens and "
            f"{p.non_torch_memory / gib:.2f} GiB outside PyTorch leaves {p.available_kv_cache_memory / gib:.2f} GiB "
            f"= {p.num_gpu_blocks:,} blocks ({p.source}; CUDA graphs, about {p.cuda_graph_memory / gib:.1f} GiB, "
            "come out of the rest)")
    if cfg.kv_cache_dtype != "auto":
        notes.append(f"# --kv-cache-dtype {cfg.kv_cache_dtype}: one byte per cached key or value, twice the tokens "
                     "in the same memory; a small accuracy cost (per-tensor scales), check your evals")
    if cfg.tensor_parallel_size > 1:
        notes.append(f"# --tensor-parallel-size {cfg.tensor_parallel_size}: every layer split over "
                     f"{cfg.tensor_parallel_size} GPUs, each holding 1/{cfg.tensor_parallel_size} of the weights and "
                     "KV heads; two all-reduces per layer over NVLink")
    return notes


def prefix_caching_note(cfg: RunConfig) -> str:
    """The `# ...` line that explains the prefix-caching switch of `serve_command` (a flag without a value, so
    it is explained apart from the valued flags `serve_command_notes` covers)."""
    if cfg.enable_prefix_caching:
        return ("# prefix caching on (vLLM V1's default, no flag needed): full prompt blocks stay reusable after "
                "their request lets go of them")
    return ("# --no-enable-prefix-caching (vLLM V1 keeps full prompt blocks for reuse by default): these figures "
            "are for a server that does not")


def periodic_stats(trace: Trace, at_s: float, interval_s: float = LOG_STATS_INTERVAL_S,
                   since_s: float | None = None) -> dict:
    """The figures of the stats line logged at time `at_s`, over the window (since_s, at_s].

    vLLM's logger reports what happened since its previous line, so `since_s` is that line's time; unset, it
    is `at_s - interval_s`. Consecutive windows then never overlap and their preemptions add up to the run's.
    """
    if trace.num_passes == 0:
        return {"prompt_tok_s": 0.0, "gen_tok_s": 0.0, "running": 0, "waiting": 0, "preemptions": 0, "kv_usage": 0.0}
    at_s = float(min(max(at_s, 0.0), trace.makespan_s))
    lo = max(at_s - interval_s if since_s is None else float(since_s), 0.0)
    elapsed = at_s - lo
    in_window = (trace.pass_end > lo) & (trace.pass_end <= at_s)
    # Like vLLM v0.33: a prompt counts once, at its first token; re-prefills after preemption do not.
    first = trace.events_of(Event.FIRST_TOKEN)
    prompt_tokens = float(trace.workload.prompt_len[first[in_window[first[:, 0]], 1]].sum())
    gen_tokens = float(trace.output_per_pass[in_window].sum())
    last = int(np.searchsorted(trace.pass_start, at_s, side="right")) - 1
    last = max(last, 0)
    return {
        "prompt_tok_s": prompt_tokens / elapsed if elapsed > 0 else 0.0,
        "gen_tok_s": gen_tokens / elapsed if elapsed > 0 else 0.0,
        "running": int(trace.running[last]),
        "waiting": int(trace.waiting[last]),
        "preemptions": int(trace.preempted_per_pass[in_window].sum()),
        "kv_usage": float(trace.kv_usage[last]),
        "prefix_cache_hit_rate": prefix_cache_hit_rate(trace, at_s),
    }


def prefix_cache_hit_rate(trace: Trace, at_s: float) -> float | None:
    """vLLM's "Prefix cache hit rate" at `at_s`: tokens found over tokens looked up, every lookup so far (vLLM
    keeps the last 1,000 requests' lookups; these runs have no more). None with caching off or no lookup yet."""
    if not trace.config.enable_prefix_caching:
        return None
    done = trace.pass_end <= at_s
    queries = int(trace.lookup_queries[done].sum())
    return int(trace.lookup_hits[done].sum()) / queries if queries else None


def log_times(makespan_s: float, interval_s: float = LOG_STATS_INTERVAL_S) -> list[float]:
    """When the stats line is printed during a run: every interval, and once at the end for the partial last one."""
    times = np.arange(interval_s, makespan_s, interval_s).tolist()
    if not times or times[-1] < makespan_s:
        times.append(float(makespan_s))
    return times


def periodic_log(trace: Trace, interval_s: float = LOG_STATS_INTERVAL_S) -> list[tuple[float, str]]:
    """Every stats line of the run as (time, line), each over the time since the line before it."""
    lines, since = [], 0.0
    for at in log_times(trace.makespan_s, interval_s):
        lines.append((at, periodic_log_line(trace, at, interval_s, since_s=since)))
        since = at
    return lines


def periodic_log_line(trace: Trace, at_s: float, interval_s: float = LOG_STATS_INTERVAL_S,
                      since_s: float | None = None) -> str:
    """The `Engine 000: Avg prompt throughput ... GPU KV cache usage` line vLLM logs at `at_s`."""
    s = periodic_stats(trace, at_s, interval_s, since_s)
    parts = [
        f"Avg prompt throughput: {s['prompt_tok_s']:.1f} tokens/s",
        f"Avg generation throughput: {s['gen_tok_s']:.1f} tokens/s",
        f"Running: {s['running']} reqs",
        f"Waiting: {s['waiting']} reqs",
    ]
    if s["preemptions"] > 0:
        parts.append(f"Preemptions: {s['preemptions']}")
    parts.append(f"GPU KV cache usage: {100 * s['kv_usage']:.1f}%")
    if s.get("prefix_cache_hit_rate") is not None:
        parts.append(f"Prefix cache hit rate: {100 * s['prefix_cache_hit_rate']:.1f}%")
    return "INFO [loggers.py] Engine 000: " + ", ".join(parts)
