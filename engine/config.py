"""RunConfig: one frozen, validated description of a run (scheduler settings, pool, workload, model, GPU).

Defaults are the course article's scenario. Each field's range, label and help are declared once, in
`engine/settings.py`; a bad value raises `ConfigError` naming the field and its allowed range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine import memory
from engine.presets import DEFAULT_GPU, DEFAULT_MODEL, GPUS, MODELS, GPUSpec, ModelSpec
from engine.settings import ALLOCATIONS, BLOCK_SIZES, SETTINGS, UNITS, ConfigError  # noqa: F401  (re-exported)
from engine.quantile_workload import two_number_workload
from engine.traffic import gamma_arrivals, parse_goodput
from engine.workload import Workload, generate_workload, load_workload, read_only, share_prefixes
from kernels.scheduler_core import cdiv

GIB = 1 << 30


@dataclass(frozen=True)
class RunConfig:
    max_num_seqs: int = 256
    pool_gib: float = 16.0
    allocation: str = "on-demand"
    declared_multiple: float = 4.0
    unit: str = "pass"
    spread: float = 16.0
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    requests: int = 256
    seed: int = 1  # the draw the article's figures were calibrated on (tests/engine/test_calibration.py)
    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    num_gpu_blocks_override: int | None = None
    scheduler_reserve_full_isl: bool = False
    # vLLM's AsyncScheduler behind a batch queue of two (its default since 0.14); off: the article's synchronous engine.
    async_scheduling: bool = False
    vllm_version: str = "0.11"  # the release whose defaults the run started from (engine/versions.py)
    # A workload file (CSV/JSON) or an in-memory Workload; None generates one from requests/spread/seed.
    workload: str | Workload | None = None
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    arrival: str = "all-at-once"  # the article's experiment; "rate" and "workload" spread requests over time
    request_rate: float = 4.0  # read only with arrival="rate"
    burstiness: float = 1.0
    goodput: str | None = None  # SLO targets, "ttft:MS tpot:MS e2el:MS" (vLLM's --goodput)
    enable_prefix_caching: bool = False  # vLLM V1 turns it on; off here so the article's figures stay
    system_prompt_len: int = 0  # generated workloads: tokens every prompt shares
    samples_per_prompt: int = 1  # generated workloads: vLLM's n
    turns: int = 1  # generated workloads: turns per conversation
    workload_sample: int | None = None  # requests served of a workload file (a seeded window); None: see workload_formats
    # The two-number workload (engine/quantile_workload.py): outputs (and optionally prompts) from p50 and p99.
    output_p50: int | None = None
    output_p99: int | None = None
    prompt_p50: int | None = None
    prompt_p99: int | None = None
    # The course's fixes for the memory wall (besides max_model_len): size the pool as vLLM does from the GPU's
    # memory (None: pool_gib says it), quantize the cache, shard the model (engine/memory.py, cost_model.py).
    gpu_memory_utilization: float | None = None
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        _validate(self)

    # -- derived quantities -------------------------------------------------------------------------
    @property
    def model_spec(self) -> ModelSpec:
        return MODELS[self.model]

    @property
    def gpu_spec(self) -> GPUSpec:
        return GPUS[self.gpu]

    @property
    def effective_max_model_len(self) -> int:
        return self.max_model_len or self.model_spec.max_model_len

    @property
    def served_max_model_len(self) -> int:
        """The --max-model-len vLLM would serve with. Unset, it is the model's context length, unless the
        pool cannot hold one such request: vLLM then refuses to start and advises lowering it to what fits,
        so we take that advice (usable blocks x block size)."""
        if self.max_model_len is not None:
            return self.max_model_len
        return min(self.model_spec.max_model_len, self.usable_blocks * self.block_size)

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes of one cached key or value element: the model's dtype, or 1 for any fp8 --kv-cache-dtype."""
        return self.model_spec.dtype_bytes if self.kv_cache_dtype == "auto" else 1

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token takes on one GPU: its share of the KV heads, every layer, at the cache's dtype."""
        return memory.page_size_bytes(self.model_spec, 1, self.kv_dtype_bytes, self.tensor_parallel_size) * \
            self.model_spec.num_layers

    @property
    def num_gpus(self) -> int:
        return self.tensor_parallel_size

    @property
    def memory_profile(self) -> memory.MemoryProfile:
        """vLLM's start-up memory profile of one GPU, at --gpu-memory-utilization (vLLM's default if unset)."""
        return memory.profile_for(self)

    @property
    def pool_source(self) -> str:
        """What sized the pool: "override", "utilization" or "pool_gib"."""
        if self.num_gpu_blocks_override is not None:
            return "override"
        return "pool_gib" if self.gpu_memory_utilization is None else "utilization"

    @property
    def num_gpu_blocks(self) -> int:
        """vLLM's count: includes the reserved null block 0. Every GPU of a tensor-parallel group holds this
        many blocks of its own KV heads, so one block still holds block_size tokens."""
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        if self.gpu_memory_utilization is not None:
            return self.memory_profile.num_gpu_blocks
        return int(self.pool_gib * GIB) // (self.block_size * self.kv_bytes_per_token)

    @property
    def kv_cache_gib(self) -> float:
        """The pool's memory on each GPU (GiB)."""
        return self.num_gpu_blocks * self.block_size * self.kv_bytes_per_token / GIB

    @property
    def usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    def blocks_for(self, tokens):
        """KV blocks that hold `tokens` tokens (an int or an array)."""
        return cdiv(tokens, self.block_size)

    @property
    def two_number_workload(self) -> bool:
        """Do output lengths come from a p50 and a p99 (not the spread, nor a file)?"""
        return self.workload is None and self.output_p50 is not None

    def build_workload(self) -> Workload:
        if isinstance(self.workload, Workload):
            return self.workload
        if isinstance(self.workload, str):
            return load_workload(self.workload, sample=self.workload_sample, seed=self.seed)
        if self.two_number_workload:
            base = two_number_workload(self.requests, self.seed, self.output_p50, self.output_p99, self.prompt_p50,
                                       self.prompt_p99)
        else:
            base = generate_workload(self.requests, self.spread, self.seed)
        return share_prefixes(base, self.system_prompt_len, self.samples_per_prompt, self.turns)

    def arrival_times(self, workload: Workload) -> np.ndarray:
        """Each request's arrival (s), float64; empty when all arrive at once (the core's fast case)."""
        if self.arrival == "rate":
            return gamma_arrivals(workload.num_requests, self.request_rate, self.burstiness, self.seed)
        if self.arrival == "workload":
            if workload.arrival_s is None:
                raise ConfigError("arrival 'workload' needs a workload file with arrival times (an arrival_s or "
                                  "TIMESTAMP column)")
            return workload.arrival_s  # float64, read-only (Workload checked it)
        return read_only(np.zeros(0, dtype=np.float64))

    @property
    def slo_targets(self) -> dict[str, float]:
        """The goodput targets in ms, by metric name (empty without --goodput)."""
        return parse_goodput(self.goodput) if self.goodput is not None else {}

    def replace(self, **changes: Any) -> "RunConfig":
        return replace(self, **changes)


def _validate(cfg: RunConfig) -> None:
    for setting in SETTINGS.values():
        setting.check(getattr(cfg, setting.name))
    # vLLM's own check (SchedulerConfig): the per-pass token budget must cover one token per sequence.
    if cfg.max_num_batched_tokens < cfg.max_num_seqs:
        raise ConfigError(
            f"max_num_batched_tokens ({cfg.max_num_batched_tokens:,}) must be greater than or equal to "
            f"max_num_seqs ({cfg.max_num_seqs:,})"
        )
    if cfg.goodput is not None:
        parse_goodput(cfg.goodput)
    if (cfg.system_prompt_len > 0) + (cfg.samples_per_prompt > 1) + (cfg.turns > 1) > 1:
        raise ConfigError("system_prompt_len, samples_per_prompt and turns do not combine (a generated request "
                          "belongs to one prefix group); set at most one of them")
    for what in ("output", "prompt"):
        p50, p99 = getattr(cfg, f"{what}_p50"), getattr(cfg, f"{what}_p99")
        if (p50 is None) != (p99 is None):
            raise ConfigError(f"{what}_p50 and {what}_p99 go together (the log-normal through both); give both or "
                              "neither")
        if p50 is not None and p99 < p50:
            raise ConfigError(f"{what}_p99 ({p99:,}) must be at least {what}_p50 ({p50:,})")
    if cfg.prompt_p50 is not None and cfg.output_p50 is None:
        raise ConfigError("prompt_p50 and prompt_p99 shape the two-number workload: give output_p50 and output_p99 "
                          "too")
    _validate_parallelism(cfg)
    if cfg.pool_source == "utilization" and (refusal := memory.startup_memory_error(cfg.memory_profile)):
        raise ConfigError(f"gpu_memory_utilization {cfg.gpu_memory_utilization:g} on an {cfg.gpu}: {refusal}")
    if cfg.num_gpu_blocks < 2:
        sized = (f"gpu_memory_utilization {cfg.gpu_memory_utilization:g} leaves"
                 if cfg.pool_source == "utilization" else f"pool_gib {cfg.pool_gib:g} holds")
        raise ConfigError(
            f"{sized} {cfg.num_gpu_blocks} KV blocks of {cfg.block_size} tokens for "
            f"{cfg.model}; at least 2 are needed (block 0 is vLLM's null block)"
        )


def _validate_parallelism(cfg: RunConfig) -> None:
    """--tensor-parallel-size within one node and the model's heads (vLLM's ModelConfig.verify_with_parallel_config
    wants the query heads divisible; we also keep whole KV heads on every GPU, not replicas)."""
    tp, spec, gpu = cfg.tensor_parallel_size, cfg.model_spec, cfg.gpu_spec
    if tp > gpu.gpus_per_node:
        raise ConfigError(f"tensor_parallel_size {tp} is more than the {gpu.gpus_per_node} GPUs of one {cfg.gpu} node")
    if tp > spec.num_kv_heads or spec.num_q_heads % tp or spec.num_kv_heads % tp:
        raise ConfigError(f"tensor_parallel_size {tp} does not divide {cfg.model}'s {spec.num_kv_heads} KV heads "
                          f"({spec.num_q_heads} query heads); it must be at most {spec.num_kv_heads}")


def declared_max_tokens(cfg: RunConfig, workload: Workload) -> np.ndarray:
    """What each client declares as max_tokens: the multiple of its real output, rounded up."""
    return np.ceil(cfg.declared_multiple * workload.output_len - 1e-9).astype(np.int64)


def refused_requests(cfg: RunConfig, workload: Workload) -> np.ndarray:
    """Ids of the requests vLLM refuses: prompt + max_tokens beyond --max-model-len.

    vLLM's OpenAI server checks each request as it comes (OpenAIServing._validate_input,
    vllm/entrypoints/openai/serving_engine.py, v0.11) and answers HTTP 400 with `refusal_message`; the
    request never reaches the scheduler. Clients here send max_tokens = what they generate, as `vllm bench
    serve` does (it sets max_tokens to each request's output length).
    """
    return np.flatnonzero(workload.prompt_len + workload.output_len > cfg.effective_max_model_len)


def refusal_message(cfg: RunConfig, workload: Workload, request: int) -> str:
    """vLLM's error for refused request `request` (its 400 response's message, v0.11 wording)."""
    prompt, output = int(workload.prompt_len[request]), int(workload.output_len[request])
    return (f"This model's maximum context length is {cfg.effective_max_model_len} tokens. However, you requested "
            f"{prompt + output} tokens ({prompt} in the messages, {output} in the completion). Please reduce the "
            "length of the messages or completion.")


def served_requests(cfg: RunConfig, workload: Workload) -> tuple[Workload, np.ndarray, int]:
    """The workload the scheduler sees, its arrival times, and how many requests vLLM refused.

    Refused requests still arrive (the others keep their times) but never join the queue; the rest are
    renumbered in order. With nothing refused the workload is returned as it is.
    """
    arrivals = cfg.arrival_times(workload)
    refused = refused_requests(cfg, workload)
    if refused.size == 0:
        return workload, arrivals, 0
    if refused.size == workload.num_requests:
        raise ConfigError(f"every request is refused: {refusal_message(cfg, workload, int(refused[0]))}")
    keep = np.ones(workload.num_requests, dtype=bool)
    keep[refused] = False

    def subset(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else read_only(np.ascontiguousarray(a[keep]))

    # Per-request arrays lose the refused rows; the prefix tree (per group) is kept whole.
    served = Workload(subset(workload.prompt_len), subset(workload.output_len), subset(workload.arrival_s),
                      subset(workload.prefix_group), subset(workload.prefix_len), workload.group_parent,
                      workload.group_start)
    return served, (subset(arrivals) if arrivals.size else arrivals), int(refused.size)


def check_servable(cfg: RunConfig, workload: Workload) -> None:
    """Refuse up front a pool that cannot hold the largest request it serves alone (vLLM would hang, not fail),
    or a workload of nothing but refused requests."""
    served, _, _ = served_requests(cfg, workload)
    lengths = served.prompt_len + served.output_len
    longest = int(lengths.max(initial=0))
    bs = cfg.block_size
    kv = cfg.kv_bytes_per_token
    # (blocks grow with tokens: the most blocks any request needs is the blocks of the most tokens)
    if cfg.allocation == "reserve":
        declared = declared_max_tokens(cfg, served)
        need_blocks = cfg.blocks_for(int((served.prompt_len + declared).max(initial=0)))
        what = "reserve prompt + declared max_tokens for its largest request"
    else:
        # The last sampled token is never fed back, so a request peaks at prompt + output - 1 tokens of KV.
        need_blocks = cfg.blocks_for(max(longest - 1, 0))
        what = "hold its largest request"
    if need_blocks > cfg.usable_blocks:
        raise ConfigError(
            f"the KV cache pool ({cfg.usable_blocks:,} usable blocks of {bs} tokens) is too small to {what} "
            f"({need_blocks:,} blocks); {_pool_fix(cfg, need_blocks + 1, bs * kv)}"
        )


def _pool_fix(cfg: RunConfig, blocks: int, block_bytes: int) -> str:
    """What to set for a pool of at least `blocks` blocks, in the terms of whatever sized this one."""
    if cfg.pool_source == "override":
        return f"num_gpu_blocks_override must be at least {blocks:,}"
    if cfg.pool_source == "utilization":
        profile = cfg.memory_profile
        needed = (blocks * block_bytes + profile.requested_memory - profile.available_kv_cache_memory) / \
            profile.total_memory
        return f"gpu_memory_utilization must be at least {math.ceil(needed * 100) / 100:.2f}"
    return f"pool_gib must be at least {math.ceil(blocks * block_bytes / GIB * 100) / 100:.2f}"


def pool_beyond_gpu(cfg: RunConfig) -> str | None:
    """One line saying the pool cannot fit beside the weights on the chosen GPU, or None when it can.

    Not an error: the course's sweeps go past what a real GPU holds to show where throughput stops growing.
    """
    if cfg.pool_source == "utilization":  # sized from the GPU's memory: it fits by construction
        return None
    pool = cfg.kv_cache_gib
    largest = largest_pool_gib(cfg)
    if round(pool, 1) <= round(largest, 1):  # the largest is an estimate: within its shown precision it fits
        return None
    weights = cfg.model_spec.weight_bytes / cfg.tensor_parallel_size / GIB
    each = " per GPU" if cfg.tensor_parallel_size > 1 else ""
    return (
        f"a {pool:,.1f} GiB KV cache pool{each} does not fit beside {cfg.model}'s {weights:.1f} GiB of weights{each} "
        f"on an {cfg.gpu} ({cfg.gpu_spec.memory_gib:g} GiB): vLLM would get at most about {largest:.1f} GiB there; "
        "simulated anyway"
    )


def largest_pool_gib(cfg: RunConfig) -> float:
    """The KV cache (GiB per GPU) vLLM's default --gpu-memory-utilization leaves with this run's other settings."""
    return max(memory.profile_for(cfg, memory.GPU_MEMORY_UTILIZATION).available_kv_cache_memory, 0) / GIB
