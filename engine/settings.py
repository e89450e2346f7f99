"""Every RunConfig field as a person meets it, declared once: its kind, allowed range, label and help.

`RunConfig` validates against this table, `engine/cli.py` builds its flags from it and the explorable its
controls; a front end that offers a narrower range (a slider) states it here, beside the field (`ui`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from engine.presets import GPUS, MODELS
from engine.versions import VERSIONS
from engine.workload import MAX_REQUEST_TOKENS, MAX_WORKLOAD_REQUESTS, Workload

ALLOCATIONS = ("on-demand", "reserve")
ARRIVALS = ("all-at-once", "rate", "workload")
UNITS = ("pass", "request")
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# vLLM's --kv-cache-dtype values for these GPUs: auto is the model's dtype; every fp8 kind stores 1 byte.
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")
TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)
# The page's --max-model-len choices (None: the model's own context length).
MAX_MODEL_LEN_CHOICES = (None, 32768, 16384, 8192, 4096, 2048)
TRUE_WORDS, FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class ConfigError(ValueError):
    """A setting outside its allowed range; the message names the setting and the range."""


def parse_bool(text: str) -> bool:
    """true/false, yes/no, on/off or 1/0 (any case); anything else is a ValueError."""
    word = text.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise ValueError(f"{text!r} is not true or false")


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type  # int, float, str or bool
    label: str  # the explorable's control label
    help: str  # the CLI flag's help
    doc: str = ""  # the explorable's explanation of the control, where it has one
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False  # lo itself is not allowed
    choices: tuple | Callable[[], tuple] = ()  # allowed values; a callable for registries that grow at run time
    choice_labels: tuple = ()  # how a front end names each choice, in the same order
    ui: tuple | None = None  # the explorable's narrower range (lo, hi, step) or choices
    optional: bool = False  # None is allowed (and is the default)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def allowed(self) -> tuple:
        return self.choices() if callable(self.choices) else self.choices

    def parse(self, text: str) -> Any:
        """A value of this setting from text (a CLI value); ConfigError when it is not one."""
        try:
            return parse_bool(text) if self.kind is bool else self.kind(text)
        except ValueError:
            raise ConfigError(f"{self.name}: {text!r} is not a valid {self.kind.__name__}") from None

    def check(self, value: Any) -> None:
        """Raise ConfigError naming this setting and its range unless `value` is allowed."""
        if value is None and self.optional:
            return
        if self.kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise ConfigError(f"{self.name} must be true or false, got {value!r}")
        elif self.choices:
            if value not in self.allowed():
                raise ConfigError(f"{self.name} must be one of {', '.join(map(str, self.allowed()))}; got {value!r}")
        elif self.kind is int:
            self._check_int(value)
        elif self.kind is float:
            self._check_float(value)
        elif not isinstance(value, (str, Workload)):  # free text: a file path (or, from code, the data itself)
            raise ConfigError(f"{self.name} must be a file path or a Workload")

    def _check_int(self, value: Any) -> None:
        lo, hi = int(self.lo), int(self.hi)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ConfigError(f"{self.name} must be an integer in {lo:,}..{hi:,}, got {value!r}")
        if not lo <= value <= hi:
            raise ConfigError(f"{self.name} must be in {lo:,}..{hi:,}, got {value:,}")

    def _check_float(self, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ConfigError(f"{self.name} must be a number in {self.lo:g}..{self.hi:g}, got {value!r}")
        v = float(value)
        if not math.isfinite(v) or v > self.hi or v < self.lo or (self.lo_open and v <= self.lo):
            raise ConfigError(f"{self.name} must be in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}], "
                              f"got {value!r}")


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("max_num_seqs", int, "--max-num-seqs",
            "vLLM --max-num-seqs: the most sequences running at once (admission cap)",
            "vLLM's cap on running sequences. It only stops admission; nothing tries to reach it.",
            1, 4096, ui=(1, 1024, None)),
    Setting("pool_gib", float, "KV cache pool (GiB)", "KV cache pool in GiB",
            "GPU memory left for the KV cache after the weights. 16 GiB holds 116,496 tokens of Qwen3-8B.",
            0.0, 1024.0, lo_open=True, ui=(1.0, 80.0, 0.5)),
    Setting("allocation", str, "KV cache allocation",
            "on-demand (vLLM: blocks as tokens arrive, may preempt) or reserve (Orca: prompt + declared max_tokens "
            "at admission, never preempts)",
            "On demand: blocks as tokens arrive, evict when out (vLLM; TensorRT-LLM's MAX_UTILIZATION). Reserve: "
            "prompt + declared max_tokens at admission, never evict (Orca; TensorRT-LLM's default, "
            "GUARANTEED_NO_EVICT).", choices=ALLOCATIONS, choice_labels=("on demand", "reserve up front")),
    Setting("declared_multiple", float, "declared max_tokens (x real output)",
            "declared max_tokens = K x real output length (read only with --allocation reserve)",
            "What clients ask for, as a multiple of what they really generate. Read only when reserving.",
            1.0, 64.0, ui=(1.0, 8.0, 0.5)),
    Setting("unit", str, "scheduling unit", "scheduling unit: per pass (continuous) or per request (static batching)",
            "Every pass: refill a slot the moment it frees (continuous batching). Every request: run a batch until "
            "its last member finishes (static batching; TensorRT-LLM's legacy STATIC_BATCH).",
            choices=UNITS, choice_labels=("per pass", "per request")),
    Setting("spread", float, "output-length spread (longest / shortest)",
            "output-length max/min ratio, total held constant",
            "1x: every request generates 256 tokens. 16x: from about 50 to about 780. Total output is fixed.",
            1.0, 64.0, ui=(1.0, 32.0, 0.5)),
    Setting("max_num_batched_tokens", int, "--max-num-batched-tokens",
            "vLLM --max-num-batched-tokens: token budget of one pass (chunked prefill)",
            "Token budget of one pass (chunked prefill). Must be at least --max-num-seqs.",
            1, 1 << 20, ui=(1024, 65536, 256)),
    Setting("block_size", int, "--block-size", "tokens per KV cache block (vLLM --block-size)", choices=BLOCK_SIZES),
    Setting("requests", int, "requests",
            "requests in the generated workload, all queued at 0 s; given with --workload, the most requests a file "
            "is sampled to (as --workload-sample) (default: 256)",
            "How many requests the two numbers describe, all queued at 0 s.",
            lo=1, hi=MAX_WORKLOAD_REQUESTS, ui=(1, 1024, None)),
    Setting("seed", int, "seed", "seed of the generated workload's order (same seed, same bits)", lo=0, hi=2**32 - 1),
    Setting("model", str, "model", "the model whose shapes price the run", choices=lambda: tuple(MODELS),
            ui=tuple(m for m in MODELS if m != "tiny")),  # tiny exists for CPU tests, not for readers
    Setting("gpu", str, "GPU", "the GPU whose constants price the run", choices=lambda: tuple(GPUS)),
    Setting("num_gpu_blocks_override", int, "--num-gpu-blocks-override",
            "total KV blocks incl. the null block (vLLM's meaning); overrides --pool-gib", lo=2, hi=1 << 26,
            optional=True),
    Setting("max_model_len", int, "--max-model-len", "vLLM --max-model-len: longest prompt + output one request may "
            "have; longer requests are refused (default: the model's own limit)",
            "The longest request (prompt + output) the server accepts; longer ones are refused with an error. "
            "It divides straight into the start-up line's Maximum concurrency.", lo=2, hi=1 << 24, optional=True,
            ui=MAX_MODEL_LEN_CHOICES, choice_labels=("the model's own",) + tuple(f"{n:,}" for n in
                                                                                  MAX_MODEL_LEN_CHOICES[1:])),
    Setting("scheduler_reserve_full_isl", bool, "admit only if the whole prompt fits (vLLM v0.33 gate)",
            "v0.33's admission gate: the whole prompt must fit in free blocks",
            "vLLM v0.33's scheduler_reserve_full_isl. Off reproduces v0.11, which checks the first chunk only."),
    Setting("async_scheduling", bool, "async scheduling (vLLM 0.14+ default)",
            "vLLM's --async-scheduling: plan pass N+1 while pass N runs, against output placeholders; a finished "
            "request's blocks come back one pass later",
            "vLLM's AsyncScheduler (on by default since 0.14): the next pass is planned while this one runs, so the "
            "host's share of a pass is hidden, and a finished request's blocks come back one pass later."),
    Setting("vllm_version", str, "vLLM version",
            "the vLLM release whose scheduling defaults to start from: " + "; ".join(
                f"{v.key}: {v.label}" for v in VERSIONS.values()) + " (--async-scheduling and "
            "--scheduler-reserve-full-isl given beside it win)",
            "Which vLLM the page mirrors. 0.11 is the article's synchronous engine (every figure of the course); "
            "0.34's defaults add async scheduling and the full-prompt admission gate.",
            choices=tuple(VERSIONS), choice_labels=tuple(v.label for v in VERSIONS.values())),
    Setting("arrival", str, "traffic",
            "how requests arrive: all at once at 0 s, at --request-rate (a seeded gamma process, as vllm bench serve "
            "draws it), or at the workload file's times (default: rate when --request-rate is given, workload when "
            "the file has times, else all-at-once)",
            "All at once: every request is queued at 0 s (an offline batch). Arriving: requests come at a rate, "
            "with random gaps, and the batch is whatever traffic has supplied.",
            choices=ARRIVALS, choice_labels=("all at once", "arriving at a rate", "from file")),
    Setting("request_rate", float, "request rate (req/s)",
            "vllm bench serve --request-rate: mean requests per second (default: inf, all at once)",
            "Mean requests per second. Gaps are drawn at random around 1 / rate.",
            0.0, 1e6, lo_open=True, ui=(0.25, 64.0, None)),
    Setting("burstiness", float, "burstiness",
            "vllm bench serve --burstiness: shape of the gamma-distributed gaps (1 = Poisson; lower = burstier)",
            "1 is a Poisson process. Lower bunches requests into bursts; higher spaces them evenly.",
            0.0, 1000.0, lo_open=True, ui=(0.1, 10.0, None)),
    Setting("goodput", str, "SLO targets",
            "vllm bench serve --goodput: SLO targets, e.g. ttft:500 tpot:50 e2el:10000 (ms); goodput counts the "
            "requests per second that meet every one (default: none)", optional=True),
    Setting("enable_prefix_caching", bool, "prefix caching (vLLM V1's default)",
            "vLLM --enable-prefix-caching: reuse the KV blocks of prompt prefixes already computed (full blocks, "
            "looked up at admission; off by default here so the article's figures hold)",
            "Keeps every full block's KV under a hash of its tokens after its request lets go of it, until the "
            "block is reused: a request whose prompt starts the same way (a shared system prompt, or its own "
            "prompt after a preemption) starts from those blocks instead of computing them."),
    Setting("system_prompt_len", int, "shared system prompt (tokens)",
            "tokens every generated prompt starts with in common, a system prompt (prompt lengths unchanged; "
            "ignored with --workload)",
            "The same opening tokens in every prompt. Only prefix caching can tell: without it each request computes "
            "them again.", 0, MAX_REQUEST_TOKENS, ui=(0, 4096, 64)),
    Setting("samples_per_prompt", int, "samples per prompt (n)",
            "vLLM's n: consecutive generated requests in runs of this many share one whole prompt "
            "(ignored with --workload)", lo=1, hi=MAX_WORKLOAD_REQUESTS),
    Setting("turns", int, "conversation turns",
            "generated requests form conversations of this many turns, each turn's prompt extending the previous "
            "one's prompt and answer (ignored with --workload)", lo=1, hi=64, ui=(1, 8, 1)),
    Setting("workload", str, "workload file",
            "workload file, its layout read from its content: CSV prompt_len,output_len[,arrival_s]"
            "[,prefix_group,prefix_len] or the same as JSON, Azure's TIMESTAMP,ContextTokens,GeneratedTokens, "
            "BurstGPT's Timestamp,Model,Request tokens,Response tokens,..., or Mooncake's JSONL (timestamp, "
            "input_length, output_length, hash_ids); at most 32 MiB and 100,000 rows, a longer file sampled (see "
            "--workload-sample) (default: generated from --requests, --spread, --seed)", optional=True),
    Setting("workload_sample", int, "requests sampled from the file",
            "serve a window of this many consecutive requests of --workload, its start drawn from --seed (default: "
            "every row of a file of at most 4,096; 1,024 of a longer one)",
            lo=1, hi=MAX_WORKLOAD_REQUESTS, optional=True),
    Setting("output_p50", int, "p50 of completion tokens",
            "the two-number workload: median output length; with --output-p99, outputs follow the log-normal "
            "through the two (ignores --spread; default: none)",
            "The median completion_tokens of your responses.", 1, MAX_REQUEST_TOKENS, optional=True,
            ui=(1, 32768, None)),
    Setting("output_p99", int, "p99 of completion tokens",
            "the two-number workload: 99th percentile of output length (with --output-p50)",
            "The 99th percentile of completion_tokens.", 1, MAX_REQUEST_TOKENS, optional=True, ui=(1, 32768, None)),
    Setting("prompt_p50", int, "p50 of prompt tokens",
            "the two-number workload: median prompt length; with --prompt-p99, prompts follow the log-normal "
            "through the two (default: the calibration workload's prompts)",
            "The median prompt_tokens (optional).", 1, MAX_REQUEST_TOKENS, optional=True, ui=(1, 32768, None)),
    Setting("prompt_p99", int, "p99 of prompt tokens",
            "the two-number workload: 99th percentile of prompt length (with --prompt-p50)",
            "The 99th percentile of prompt_tokens (optional).", 1, MAX_REQUEST_TOKENS, optional=True,
            ui=(1, 32768, None)),
    Setting("gpu_memory_utilization", float, "--gpu-memory-utilization",
            "vLLM --gpu-memory-utilization: share of the GPU's memory vLLM may use; the KV cache pool is what is "
            "left of it after the weights and the start-up profile's activations (overrides --pool-gib; default: "
            "none, the pool is --pool-gib)",
            "The share of each GPU's memory vLLM may take. The pool is what is left after the weights, the "
            "activation peak of a profiling pass at --max-num-batched-tokens and memory outside PyTorch.",
            0.0, 1.0, lo_open=True, optional=True, ui=(0.2, 0.99, 0.01)),
    Setting("kv_cache_dtype", str, "--kv-cache-dtype",
            "vLLM --kv-cache-dtype: auto (the model's dtype) or fp8 (1 byte per value: twice the blocks in the same "
            "memory, half the KV bytes a pass reads)",
            "fp8 stores each key and value in one byte instead of two: twice the tokens in the same memory, half "
            "the bytes a pass reads. It costs a little accuracy (scales per tensor; check your evals).",
            choices=KV_CACHE_DTYPES, choice_labels=("auto (bf16)", "fp8", "fp8_e4m3", "fp8_e5m2"),
            ui=KV_CACHE_DTYPES[:2]),
    Setting("tensor_parallel_size", int, "--tensor-parallel-size",
            "vLLM --tensor-parallel-size: GPUs that split each layer's weights and KV heads (at most the model's KV "
            "heads and one node's GPUs); the pool is per GPU",
            "Splits every layer's weights and KV heads across this many GPUs: each holds a share, so more of its "
            "memory is left for the cache, and every layer pays two all-reduces over NVLink.",
            choices=TENSOR_PARALLEL_SIZES, choice_labels=("1 GPU", "2 GPUs", "4 GPUs", "8 GPUs")),
)}
