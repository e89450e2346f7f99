"""The live executor: the project's scheduler drives a real torch model, one measured pass at a time.

`run_live(cfg)` is `simulate_stepwise(cfg)` with the roofline clock replaced by forward passes of a
Qwen3-shaped model over a paged KV pool of `cfg.num_gpu_blocks` blocks, so the schedule (and its
`trace_digest`) is the simulator's and only the pass durations differ. torch is imported inside
functions: the app imports this module to ask `live_available()` on machines without torch.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from typing import Callable

import numpy as np

from engine.config import RunConfig
from engine.cost_model import pass_bytes_and_flops, pass_seconds
from engine.live.errors import LiveCancelled, LiveError
from engine.presets import MODELS, ModelSpec
from engine.trace import Trace

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
MAX_PASSES = 2_000_000  # as the simulator: only stops a bug from hanging a server thread
# A pass as the runner sees it: every sequence runs one token (decode-only: the CUDA-graph path), some do
# and some do not (prompts joining decodes: eager), none does, or nobody runs (a pass that only preempted).
PASS_KINDS = ("decode", "mixed", "prefill", "empty")
_GIB = float(1 << 30)

ProgressFn = Callable[[int, int, int], None]


def live_available() -> tuple[bool, str]:
    """(True, device name) when torch sees a CUDA device; otherwise (False, why not)."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed on the server (pip install 'continuous-batching-explorable[live]')"
    if torch.version.cuda is None:
        return False, f"this torch build ({torch.__version__}) has no CUDA support"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device on the server"
    return True, torch.cuda.get_device_name(0)


def live_model_spec(cfg: RunConfig, model_preset: str | None, weights_dir: str | None) -> ModelSpec:
    """The shapes the live model is built with: a checkpoint's config.json, else a live preset."""
    if weights_dir:
        from engine.live.weights import read_spec

        return read_spec(weights_dir)
    from engine.live.qwen3 import LIVE_PRESETS

    name = model_preset or cfg.model
    if name not in LIVE_PRESETS:
        hint = "" if model_preset else f" (the run's model {cfg.model!r} is not one; pass --model-preset)"
        raise LiveError(f"live model preset must be one of {', '.join(LIVE_PRESETS)}{hint}; got {name!r}")
    return MODELS[name]


def prompt_tokens(cfg: RunConfig, prompt_len: np.ndarray, vocab_size: int) -> list[list[int]]:
    """Each request's prompt: token ids drawn from the run's seed, so reruns feed the model the same text."""
    rng = np.random.default_rng(cfg.seed)
    return [rng.integers(0, vocab_size, size=int(n)).tolist() for n in prompt_len]


def run_live(cfg: RunConfig, model_preset: str | None = None, device: str = "cuda", dtype: str | None = None,
             progress: ProgressFn | None = None, cancel: threading.Event | None = None,
             weights_dir: str | None = None, cuda_graphs: bool = True) -> Trace:
    """Serve the config's workload with real forward passes; returns a measured Trace.

    weights_dir (or the CB_LIVE_WEIGHTS_DIR environment variable) loads a Qwen3 safetensors checkpoint;
    without one the weights are seeded random (throughput depends only on shapes).
    """
    try:
        import torch
    except ImportError:
        raise LiveError(live_available()[1]) from None
    from engine.live.weights import weights_dir_from_env

    weights_dir = weights_dir or weights_dir_from_env()
    torch_device = _resolve_device(torch, device)
    dtype_name = dtype or ("bf16" if torch_device.type == "cuda" else "fp32")
    if dtype_name not in DTYPES:
        raise LiveError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype_name!r}")
    torch_dtype = getattr(torch, DTYPES[dtype_name])
    spec = live_model_spec(cfg, model_preset, weights_dir)
    # Price passes with the shapes and element size actually run, so predicted and measured compare.
    spec = replace(spec, dtype_bytes=torch.empty((), dtype=torch_dtype).element_size())

    from engine.scheduler import Scheduler

    scheduler = Scheduler(cfg)  # validates the workload against the pool before anything is allocated
    _check_memory(torch, cfg, spec, torch_device)
    oom_stage = None
    stage = ["starting"]  # _serve updates it, so an out-of-memory error can say what it was doing
    try:
        return _serve(torch, cfg, spec, scheduler, torch_device, torch_dtype, dtype_name, weights_dir,
                      progress, cancel, cuda_graphs, stage)
    except torch.cuda.OutOfMemoryError:
        oom_stage = stage[0]
    finally:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    # Raised outside the except block so the failed pass's tensors are already released.
    raise LiveError(_oom_message(cfg, spec, oom_stage))


def _serve(torch, cfg, spec, scheduler, device, torch_dtype, dtype_name, weights_dir, progress, cancel,
           cuda_graphs, stage: list[str]) -> Trace:
    from engine.live.kv_cache import PagedKVCache
    from engine.live.qwen3 import build_model

    model = kv_cache = runner = None
    try:
        stage[0] = "building the model"
        model = build_model(spec, device, torch_dtype, seed=cfg.seed)
        if weights_dir:
            from engine.live.weights import load_weights

            stage[0] = "loading weights"
            load_weights(model, weights_dir)
        stage[0] = "allocating the KV cache pool"
        kv_cache = PagedKVCache(spec, cfg.num_gpu_blocks, cfg.block_size, device, torch_dtype)
        use_triton = device.type == "cuda" and _triton_importable()
        stage[0] = "capturing CUDA graphs" if cuda_graphs and use_triton else "warming up"
        runner, fallback = _start_runner(torch, model, kv_cache, cfg, device, use_triton, cuda_graphs)
        runner.fallback = fallback
        stage[0] = "serving the workload"
        return _serve_loop(torch, cfg, spec, scheduler, runner, device, dtype_name, weights_dir, progress, cancel)
    finally:
        # Drop the frame's references even when an exception (cancel, OOM) keeps this frame alive.
        model = kv_cache = runner = None


def _start_runner(torch, model, kv_cache, cfg: RunConfig, device, use_triton: bool, cuda_graphs: bool):
    """A warmed-up runner, and why the Triton kernels were dropped if they were. A kernel that fails to
    compile or launch on this GPU (a driver or Triton version the project never met) costs speed, not the
    run: the torch ops compute the same numbers."""
    from engine.live.runner import ModelRunner

    def start(triton: bool):
        runner = ModelRunner(model, kv_cache, max_num_seqs=cfg.max_num_seqs,
                             max_model_len=cfg.effective_max_model_len, use_triton=triton,
                             use_cuda_graphs=cuda_graphs and triton)
        if device.type == "cuda":
            runner.warm_up()
        return runner

    if not use_triton:
        return start(False), None
    try:
        return start(True), None
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:  # noqa: BLE001  (Triton compile/launch errors have no common base class)
        first_line = (str(exc).strip().splitlines() or [""])[0][:200]
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        return start(False), f"Triton kernels failed here ({type(exc).__name__}: {first_line}); ran torch ops"


def _serve_loop(torch, cfg, spec, scheduler, runner, device, dtype_name, weights_dir, progress, cancel) -> Trace:
    from engine.live.block_manager import BlockManager
    from engine.live.runner import pass_input_from_plan
    from engine.trace import TraceBuilder

    workload = scheduler.workload
    total = workload.num_requests
    tokens = prompt_tokens(cfg, workload.prompt_len, spec.vocab_size)
    blocks = BlockManager(cfg.num_gpu_blocks)
    builder = TraceBuilder()
    gpu_s, wall_s, runner_s, predicted_s, pass_bytes, pass_flops, kinds, graphed = [], [], [], [], [], [], [], []
    finished = 0
    while not scheduler.finished:
        pass_start = time.perf_counter()  # the whole host loop, not just the runner: what a user waits for
        if cancel is not None and cancel.is_set():
            raise LiveCancelled(f"live run cancelled after {scheduler.num_passes} passes")
        if scheduler.num_passes >= MAX_PASSES:
            raise LiveError(f"run stopped after {MAX_PASSES:,} passes with requests unfinished")
        plan = scheduler.schedule()
        blocks.after_schedule(plan, scheduler.req, scheduler.state)
        batch = pass_input_from_plan(plan, tokens, blocks)
        result = runner.execute(batch)
        outcome = scheduler.complete(plan)
        if len(result.sampled) != outcome.sampled:
            raise LiveError(f"pass {plan.index}: the model sampled {len(result.sampled)} tokens, "
                            f"the scheduler expected {outcome.sampled}")
        samplers = [int(r) for r, samples in zip(plan.request_ids, batch.sample) if samples]
        for r, token in zip(samplers, result.sampled):
            tokens[r].append(token)
        blocks.after_complete(outcome, scheduler.state)
        for r in outcome.finished:
            tokens[int(r)] = []  # done: its history is no longer needed
        finished += len(outcome.finished)
        builder.add(plan, outcome, result.gpu_seconds)
        wall_s.append(time.perf_counter() - pass_start)  # the pricing below is the benchmark's, not serving
        gpu_s.append(result.gpu_seconds)
        runner_s.append(result.wall_seconds)
        graphed.append(result.used_graph)
        kinds.append(pass_kind(plan.new_tokens))
        predicted_s.append(pass_seconds(spec, cfg.gpu_spec, plan.new_tokens, plan.computed_before))
        b, f = pass_bytes_and_flops(spec, plan.new_tokens, plan.computed_before)
        pass_bytes.append(b)
        pass_flops.append(f)
        if progress is not None:
            progress(plan.index, finished, total)

    output_tokens = int(workload.output_len.sum())
    measured = float(np.sum(gpu_s))
    wall = float(np.sum(wall_s))
    extra = {
        "device": _device_name(torch, device),
        "model_preset": spec.name,
        "dtype": dtype_name,
        "weights": weights_dir or f"random N(0, 0.02), seed {cfg.seed}",
        "attention": ("triton split-KV paged decode, one-launch paged prefill" if runner.use_triton
                      else "gather + SDPA"),
        "kernels": ("fused Triton norms, rotary, SwiGLU" if runner.use_triton
                    else getattr(runner, "fallback", None) or "torch ops"),
        "cuda_graph_passes": int(np.sum(graphed)),
        "measured_tok_s": output_tokens / measured if measured > 0 else 0.0,
        "wall_tok_s": output_tokens / wall if wall > 0 else 0.0,
        "predicted_tok_s": output_tokens / float(np.sum(predicted_s)) if predicted_s else 0.0,
        "predicted_gpu": cfg.gpu,
        "gpu_ms_per_pass": 1e3 * measured / max(1, len(gpu_s)),
        "wall_ms_per_pass": 1e3 * wall / max(1, len(wall_s)),
        "host_ms_per_pass": 1e3 * (wall - measured) / max(1, len(wall_s)),
        "gpu_ms": 1e3 * np.asarray(gpu_s),
        "wall_ms": 1e3 * np.asarray(wall_s),  # per pass: schedule, stage, run, sync, complete
        "runner_wall_ms": 1e3 * np.asarray(runner_s),  # per pass: the runner's part of it
        "pass_kind": np.asarray(kinds, dtype=np.int8),  # PASS_KINDS codes
        "graph_pass": np.asarray(graphed, dtype=bool),
        "predicted_ms": 1e3 * np.asarray(predicted_s),
        "pass_bytes": np.asarray(pass_bytes),
        "pass_flops": np.asarray(pass_flops),
        "live_spec": spec,
    }
    return builder.build(scheduler, measured=True, extra=extra)


def pass_kind(new_tokens: np.ndarray) -> int:
    """Index into PASS_KINDS of a pass that runs new_tokens[i] tokens for each scheduled sequence. A
    1-token chunk counts as a decode, as the runner batches it with them."""
    singles = int(np.count_nonzero(np.asarray(new_tokens) == 1))
    if len(new_tokens) == 0:
        return PASS_KINDS.index("empty")
    if singles == len(new_tokens):
        return PASS_KINDS.index("decode")
    return PASS_KINDS.index("mixed" if singles else "prefill")


def _resolve_device(torch, device: str):
    if device not in ("cuda", "cpu") and not device.startswith("cuda:"):
        raise LiveError(f"device must be cuda or cpu; got {device!r}")
    if device.startswith("cuda"):
        ok, why = live_available()
        if not ok:
            raise LiveError(f"--device cuda asked for, but {why}; use --device cpu with --model-preset tiny")
    return torch.device(device)


def _triton_importable() -> bool:
    try:
        import kernels.fused_ops_triton  # noqa: F401  (triton present and the kernel modules load)
        import kernels.paged_decode_triton  # noqa: F401
    except ImportError:
        return False
    return True


def _device_name(torch, device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({os.cpu_count()} cores, torch {torch.__version__})"


def _footprint(cfg: RunConfig, spec: ModelSpec) -> tuple[float, float, float]:
    """Bytes of weights, KV pool and a rough activation peak (a full token budget through the MLP)."""
    from engine.live.kv_cache import kv_pool_bytes
    from engine.live.weights import count_params

    weights = count_params(spec) * spec.dtype_bytes
    pool = kv_pool_bytes(spec, cfg.num_gpu_blocks, cfg.block_size, spec.dtype_bytes)
    act = cfg.max_num_batched_tokens * (3 * spec.intermediate_size + 6 * spec.hidden_size) * spec.dtype_bytes
    act += cfg.max_num_seqs * spec.vocab_size * 4
    return float(weights), float(pool), float(act)


def _check_memory(torch, cfg: RunConfig, spec: ModelSpec, device) -> None:
    """Refuse up front what cannot fit, rather than fail half-allocated."""
    weights, pool, act = _footprint(cfg, spec)
    need = weights + pool + act
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        where = f"the GPU has {free / _GIB:.1f} GiB free"
    else:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8
        where = f"80% of this machine's memory is {free / _GIB:.1f} GiB"
    if need > free:
        raise LiveError(
            f"{spec.name} needs about {need / _GIB:.1f} GiB (weights {weights / _GIB:.1f} + KV pool "
            f"{pool / _GIB:.1f} + activations {act / _GIB:.1f}) but {where}; lower {_pool_setting(cfg)} "
            f"or max_num_batched_tokens, or pick a smaller --model-preset"
        )


def _pool_setting(cfg: RunConfig) -> str:
    if cfg.num_gpu_blocks_override is not None:
        return f"num_gpu_blocks_override (now {cfg.num_gpu_blocks_override:,})"
    return f"pool_gib (now {cfg.pool_gib:g})"


def _oom_message(cfg: RunConfig, spec: ModelSpec, stage: str) -> str:
    weights, pool, act = _footprint(cfg, spec)
    return (f"GPU out of memory while {stage} ({spec.name}: weights {weights / _GIB:.1f} GiB, KV pool "
            f"{pool / _GIB:.1f} GiB, activations ~{act / _GIB:.1f} GiB); lower {_pool_setting(cfg)}, "
            f"max_num_batched_tokens (now {cfg.max_num_batched_tokens}) or max_num_seqs (now {cfg.max_num_seqs})")
