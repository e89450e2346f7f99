"""The live executor: the engine's one loop (`engine.simulate.serve`) with the GPU as its clock.

`run_live(cfg)` builds a Qwen3-shaped model over a paged KV pool of `cfg.num_gpu_blocks` blocks and hands
`serve` a `LiveExecutor`: each pass's plan (with the page tables the scheduler owns) becomes one forward
pass, timed on the GPU. The schedule, and its `trace_digest`, is therefore the simulator's; only the pass
durations differ. torch is imported inside functions: the app imports this module without torch.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Callable

import numpy as np

from engine.config import RunConfig
from engine.cost_model import cost_vector, pass_bytes_and_flops, plan_seconds
from engine.live.device import check_memory, device_name, live_available, oom_message, resolve_device, \
    resolve_dtype
from engine.live.errors import LiveCancelled, LiveError
from engine.live.memory_probe import MemoryProbe
from engine.live.stats import PASS_KINDS, LivePasses, LiveStats, pass_kind
from engine.presets import MODELS, ModelSpec
from engine.scheduler import Scheduler, StepOutcome, StepPlan
from engine.simulate import serve
from engine.trace import Trace
from engine.workload import Workload

ProgressFn = Callable[[int, int, int], None]  # (pass index, finished requests, total requests)

__all__ = ["run_live", "live_available", "LiveExecutor", "PASS_KINDS", "pass_kind"]


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


def prompt_tokens(cfg: RunConfig, prompt_len: np.ndarray, vocab_size: int,
                  workload: Workload | None = None) -> list[list[int]]:
    """Each request's prompt: token ids drawn from the run's seed, so reruns feed the model the same text.

    Requests of one prefix group start with the same text (their shared prefix), so the pages prefix caching
    hands from one to another hold the keys and values of exactly the tokens the receiver has. In a tree of
    groups a group's text is its parent's up to where it leaves it, then its own.
    """
    rng = np.random.default_rng(cfg.seed)
    tokens = [rng.integers(0, vocab_size, size=int(n)).tolist() for n in prompt_len]
    workload = workload if workload is not None else cfg.build_workload()  # the served one: refusals left out
    if workload.has_shared_prefixes:
        group_rng = np.random.default_rng([cfg.seed, 1])
        texts: dict[int, list[int]] = {}

        def text_of(g: int) -> list[int]:
            if g not in texts:
                members = workload.prefix_group == g
                longest = int(workload.prefix_len[members].max(initial=0))
                head: list[int] = []
                if workload.group_parent is not None:  # its children leave its text where they start
                    longest = max(longest, int(workload.group_start[workload.group_parent == g].max(initial=0)))
                    if workload.group_parent[g] >= 0:
                        head = text_of(int(workload.group_parent[g]))[:int(workload.group_start[g])]
                texts[g] = head + group_rng.integers(0, vocab_size, size=max(0, longest - len(head))).tolist()
            return texts[g]

        for r, (g, shared) in enumerate(zip(workload.prefix_group.tolist(), workload.prefix_len.tolist())):
            if g >= 0 and shared > 0:
                tokens[r][:shared] = text_of(g)[:shared]
    return tokens


class LiveExecutor:
    """Runs each planned pass on the model, keeps every request's token history, and times each pass."""

    def __init__(self, cfg: RunConfig, spec: ModelSpec, runner, cancel: threading.Event | None,
                 progress: ProgressFn | None, workload: Workload | None = None) -> None:
        self.runner = runner
        self.cancel = cancel
        self.progress = progress
        workload = workload if workload is not None else cfg.build_workload()
        self.tokens = prompt_tokens(cfg, workload.prompt_len, spec.vocab_size, workload)
        self.finished = 0
        self.spec = spec
        self.cost = cost_vector(spec, cfg.gpu_spec)
        self.loop_start = time.perf_counter()
        self.rows: list[tuple] = []
        self.results: dict[int, object] = {}  # each executed pass's runner result until the pass completes

    def execute(self, plan: StepPlan) -> float:
        from engine.live.runner import pass_input_from_plan

        if self.cancel is not None and self.cancel.is_set():
            raise LiveCancelled(f"live run cancelled after {plan.index} passes")
        batch = pass_input_from_plan(plan, self.tokens)
        result = self.runner.execute(batch)
        if len(result.sampled) != int(plan.samples.sum()):
            raise LiveError(f"pass {plan.index}: the model sampled {len(result.sampled)} tokens, "
                            f"the scheduler expected {int(plan.samples.sum())}")
        for r, token in zip(plan.request_ids[plan.samples].tolist(), result.sampled):
            self.tokens[r].append(token)
        # Kept per pass: with async scheduling the next pass runs before this one's output is processed.
        self.results[plan.index] = result
        return result.gpu_seconds

    def wait(self, seconds: float) -> None:
        """Idle until the next request arrives, on the real clock (a cancel ends the wait at once). The
        run's clock is the passes' measured times plus these waits, so arrivals keep their spacing."""
        if self.cancel is not None:
            if self.cancel.wait(seconds):
                raise LiveCancelled("live run cancelled while waiting for the next request")
        else:
            time.sleep(seconds)
        self.loop_start = time.perf_counter()  # the wait is idle time, not the next pass's host loop

    def completed(self, plan: StepPlan, outcome: StepOutcome) -> None:
        # The whole host loop since the last pass ended (schedule, stage, run, sync, complete): what a user
        # waits for. The pricing and the progress report below are the benchmark's, so they are left out.
        wall = time.perf_counter() - self.loop_start
        for r in outcome.finished.tolist():
            self.tokens[r] = []  # done: its history is no longer needed
        result = self.results.pop(plan.index)
        self.rows.append((result.gpu_seconds, wall, result.wall_seconds, pass_kind(plan.new_tokens),
                          result.used_graph, plan_seconds(self.cost, plan),
                          *pass_bytes_and_flops(self.spec, plan.new_tokens, plan.computed_before)))
        self.finished += len(outcome.finished)
        if self.progress is not None:
            self.progress(plan.index, self.finished, len(self.tokens))
        self.loop_start = time.perf_counter()

    def passes(self) -> LivePasses:
        cols = list(zip(*self.rows)) if self.rows else [()] * 8
        ms = [1e3 * np.asarray(c, dtype=np.float64) for c in (cols[0], cols[1], cols[2], cols[5])]
        return LivePasses(gpu_ms=ms[0], wall_ms=ms[1], runner_wall_ms=ms[2],
                          pass_kind=np.asarray(cols[3], dtype=np.int8), graph_pass=np.asarray(cols[4], dtype=bool),
                          predicted_ms=ms[3], pass_bytes=np.asarray(cols[6], dtype=np.float64),
                          pass_flops=np.asarray(cols[7], dtype=np.float64))


def check_live_settings(cfg: RunConfig) -> None:
    """Refuse what one GPU and this model cannot run for real: a tensor-parallel group, an fp8 cache."""
    if cfg.tensor_parallel_size > 1:
        raise LiveError(f"live GPU mode runs on one GPU; tensor_parallel_size {cfg.tensor_parallel_size} is "
                        "simulated only")
    if cfg.kv_cache_dtype != "auto":
        raise LiveError(f"live GPU mode keeps the KV cache in the model's dtype; kv_cache_dtype "
                        f"{cfg.kv_cache_dtype} is simulated only")


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
    check_live_settings(cfg)
    from engine.live.weights import weights_dir_from_env

    weights_dir = weights_dir or weights_dir_from_env()
    torch_device = resolve_device(torch, device)
    dtype_name, torch_dtype = resolve_dtype(torch, torch_device, dtype)
    spec = live_model_spec(cfg, model_preset, weights_dir)
    # Price passes with the shapes and element size actually run, so predicted and measured compare.
    spec = replace(spec, dtype_bytes=torch.empty((), dtype=torch_dtype).element_size())
    scheduler = Scheduler(cfg)  # validates the workload against the pool before anything is allocated
    check_memory(torch, cfg, spec, torch_device)
    stage = ["starting"]  # updated as setup proceeds, so an out-of-memory error can say what it was doing
    runner = executor = None
    probe = MemoryProbe.before_model(torch, torch_device)  # what vLLM's start-up profile measures (None on a CPU)
    try:
        runner, fallback = _start(torch, cfg, spec, torch_device, torch_dtype, weights_dir, cuda_graphs, stage)
        kernels = runner.kernels
        stage[0] = "serving the workload"
        executor = LiveExecutor(cfg, spec, runner, cancel, progress, scheduler.workload)
        probe and probe.serving_starts()
        serve(scheduler, executor)
        passes = executor.passes()
        memory = probe and probe.after_serving(runner.model, spec.name, device_name(torch, torch_device),
                                               int(scheduler.trace().n_tokens.max(initial=0)))
        oom = None
    except torch.cuda.OutOfMemoryError:
        oom = stage[0]
    finally:
        runner = executor = None  # release the model and the pool even when an exception keeps this frame
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if oom is not None:  # raised outside the except block, so the failed pass's tensors are already released
        raise LiveError(oom_message(cfg, spec, oom))
    live = LiveStats.measure(
        passes, scheduler.workload.total_output_tokens, device=device_name(torch, torch_device),
        model_preset=spec.name, dtype=dtype_name, weights=weights_dir or f"random N(0, 0.02), seed {cfg.seed}",
        attention=kernels.attention, kernels=fallback or kernels.layer_ops, predicted_gpu=cfg.gpu, live_spec=spec,
        memory=memory,
    )
    return scheduler.trace(measured=True, live=live)


def _start(torch, cfg: RunConfig, spec: ModelSpec, device, torch_dtype, weights_dir, cuda_graphs: bool,
           stage: list[str]):
    """The model, its KV pool and a warmed-up runner; and why the Triton kernels were dropped, if they were."""
    from engine.live.backend import TORCH, choose_kernels
    from engine.live.kv_cache import PagedKVCache
    from engine.live.qwen3 import build_model

    stage[0] = "building the model"
    model = build_model(spec, device, torch_dtype, seed=cfg.seed)
    if weights_dir:
        from engine.live.weights import load_weights

        stage[0] = "loading weights"
        load_weights(model, weights_dir)
    stage[0] = "allocating the KV cache pool"
    kv_cache = PagedKVCache(spec, cfg.num_gpu_blocks, cfg.block_size, device, torch_dtype)
    kernels = choose_kernels(device)
    stage[0] = "capturing CUDA graphs" if cuda_graphs and kernels.triton else "warming up"
    try:
        return start_runner(model, kv_cache, cfg, device, kernels, cuda_graphs), None
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:  # noqa: BLE001  (Triton compile/launch errors have no common base class)
        if kernels is TORCH:
            raise
        # A kernel that fails to compile or launch on this GPU (a driver or Triton version the project
        # never met) costs speed, not the run: the torch ops compute the same numbers.
        first_line = (str(exc).strip().splitlines() or [""])[0][:200]
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        why = f"Triton kernels failed here ({type(exc).__name__}: {first_line}); ran torch ops"
        return start_runner(model, kv_cache, cfg, device, TORCH, cuda_graphs), why


def start_runner(model, kv_cache, cfg: RunConfig, device, kernels, cuda_graphs: bool):
    """A runner for this run's limits, warmed up on a GPU before anything is timed."""
    from engine.live.runner import ModelRunner

    runner = ModelRunner(model, kv_cache, max_num_seqs=cfg.max_num_seqs, max_model_len=cfg.effective_max_model_len,
                         kernels=kernels, use_cuda_graphs=cuda_graphs and kernels.triton)
    if device.type == "cuda":
        runner.warm_up()
    return runner
