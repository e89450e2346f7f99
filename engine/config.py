"""RunConfig: one frozen, validated description of a run (scheduler settings, pool, workload, model, GPU).

Defaults are the course article's scenario. Each field's range, label and help are declared once, in
`engine/settings.py`; a bad value raises `ConfigError` naming the field and its allowed range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.presets import DEFAULT_GPU, DEFAULT_MODEL, GPUS, MODELS, GPUSpec, ModelSpec, largest_vllm_pool_gib
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
    def num_gpu_blocks(self) -> int:
        """vLLM's count: includes the reserved null block 0."""
        if self.num_gpu_blocks_override is not None:
            return self.num_gpu_blocks_override
        return int(self.pool_gib * GIB) // (self.block_size * self.model_spec.kv_bytes_per_token)

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
    if cfg.num_gpu_blocks < 2:
        raise ConfigError(
            f"pool_gib {cfg.pool_gib:g} holds {cfg.num_gpu_blocks} KV blocks of {cfg.block_size} tokens for "
            f"{cfg.model}; at least 2 are needed (block 0 is vLLM's null block)"
        )


def declared_max_tokens(cfg: RunConfig, workload: Workload) -> np.ndarray:
    """What each client declares as max_tokens: the multiple of its real output, rounded up."""
    return np.ceil(cfg.declared_multiple * workload.output_len - 1e-9).astype(np.int64)


def check_servable(cfg: RunConfig, workload: Workload) -> None:
    """Refuse up front a pool that cannot hold the largest request alone (vLLM would hang, not fail)."""
    max_len = cfg.effective_max_model_len
    lengths = workload.prompt_len + workload.output_len
    longest = int(lengths.max(initial=0))
    if longest > max_len:
        i = int(np.argmax(lengths))
        raise ConfigError(
            f"request {i} needs {longest:,} tokens (prompt + output), more than max_model_len {max_len:,}"
        )
    bs = cfg.block_size
    kv = cfg.model_spec.kv_bytes_per_token
    # (blocks grow with tokens: the most blocks any request needs is the blocks of the most tokens)
    if cfg.allocation == "reserve":
        declared = declared_max_tokens(cfg, workload)
        need_blocks = cfg.blocks_for(int((workload.prompt_len + declared).max(initial=0)))
        what = "reserve prompt + declared max_tokens for its largest request"
    else:
        # The last sampled token is never fed back, so a request peaks at prompt + output - 1 tokens of KV.
        need_blocks = cfg.blocks_for(max(longest - 1, 0))
        what = "hold its largest request"
    if need_blocks > cfg.usable_blocks:
        if cfg.num_gpu_blocks_override is not None:
            fix = f"num_gpu_blocks_override must be at least {need_blocks + 1:,}"
        else:
            min_gib = (need_blocks + 1) * bs * kv / GIB
            fix = f"pool_gib must be at least {math.ceil(min_gib * 100) / 100:.2f}"
        raise ConfigError(
            f"the KV cache pool ({cfg.usable_blocks:,} usable blocks of {bs} tokens) is too small to {what} "
            f"({need_blocks:,} blocks); {fix}"
        )


def pool_beyond_gpu(cfg: RunConfig) -> str | None:
    """One line saying the pool cannot fit beside the weights on the chosen GPU, or None when it can.

    Not an error: the course's sweeps go past what a real GPU holds to show where throughput stops growing.
    """
    pool = cfg.num_gpu_blocks * cfg.block_size * cfg.model_spec.kv_bytes_per_token / GIB
    largest = largest_vllm_pool_gib(cfg.model_spec, cfg.gpu_spec)
    if round(pool, 1) <= round(largest, 1):  # the largest is an estimate: within its shown precision it fits
        return None
    return (
        f"a {pool:,.1f} GiB KV cache pool does not fit beside {cfg.model}'s {cfg.model_spec.weight_bytes / GIB:.1f} GiB "
        f"of weights on an {cfg.gpu} ({cfg.gpu_spec.memory_gib:g} GiB): vLLM would get at most about {largest:.1f} GiB "
        "there; simulated anyway"
    )
