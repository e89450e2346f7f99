"""Live GPU check: one command whose every stage is guarded and saved the moment it is known.

    python benchmarks/live_gpu.py                  # on a CUDA machine: within 8 minutes on an H100/H200
    python benchmarks/live_gpu.py --budget-s 300   # a shorter slot: stages that do not fit are skipped
    python benchmarks/live_gpu.py --smoke          # a CPU dry run: tiny model, Triton interpreter, seconds

Stages, in order (STAGES): the environment; device-to-device copy bandwidth; the kernel check (every Triton
kernel against its torch reference); decode passes at batch 1, 8, 64 and 256 over a 1,536-token context
against the bandwidth roofline; the article's default scenario live; a calibration of the cost model fitted
on that run alone; then held-out runs the fit never saw, each predicted by it (the memory wall: a 2 GiB pool
with 512 slots; static batching; 64 slots). Every live run reports GPU-clock and wall-clock tokens/s, the
host time per pass, and its decode-only, mixed and prefill-only passes against the roofline.

The JSON report (--out) is rewritten atomically after every stage, so a killed run leaves a valid file with
every finished stage. Exit status: 0 when no stage failed (skipped ones included), else 10 + the index of
the first failed stage in STAGES; the last line says which. Imports only torch, triton, numba, numpy and
safetensors (through engine/), never the web packages.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

_STARTED = time.monotonic()  # the budget counts from here: torch's import and CUDA start-up included

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from engine import RunConfig, Workload, simulate  # noqa: E402
from engine.presets import GPUS, MODELS, GPUSpec, gpu_preset_for_device  # noqa: E402
from benchmarks.live_gpu_summary import print_summary  # noqa: E402

STAGES = ("environment", "copy_bandwidth", "kernel_check", "decode_roofline", "default_run", "calibration",
          "held_out_memory_wall", "held_out_static_batching", "held_out_64_slots")
EXIT_BASE = 10  # exit status of a failed stage: EXIT_BASE + its index in STAGES
HELD_OUT = STAGES[6:]
GB = 1e9
DEFAULT_BUDGET_S = 480.0
RESERVE_S = 5.0  # kept back for tearing down the last run, the summary and the final JSON write

# Seconds a stage is expected to take, to skip what cannot fit. No GPU has run this script yet: the GPU
# figures are generous guesses (a cold Triton cache compiles every kernel on first use), and the live runs
# are sized from the scheduler's own passes priced by the cost model, then by the default run's measured
# setup time and wall clock once it has run.
GUESS_S = {
    "gpu": {"copy_bandwidth": 10, "kernel_check": 90, "decode_roofline": 90, "calibration": 2, "live_setup": 60,
            "host_per_pass": 3e-3, "slowdown": 1.5},
    "smoke": {"copy_bandwidth": 1, "kernel_check": 10, "decode_roofline": 5, "calibration": 1, "live_setup": 5,
              "host_per_pass": 5e-3, "slowdown": 1.5},
}
ESTIMATE_MARGIN = 1.2  # on estimates made from measured figures


class StageFailed(Exception):
    """A stage finished with a wrong answer (or partly); `result` keeps what it measured."""

    def __init__(self, message: str, result: dict | None = None) -> None:
        super().__init__(message)
        self.result = result


class StageSkipped(Exception):
    """A stage that cannot run here (a missing package, a CPU run); not a failure."""


class StageCut(Exception):
    """A stage stopped at the time budget; not a failure."""


class Interrupted(BaseException):
    """SIGTERM (a time limit's kill): the stage running is recorded, the rest skipped, the summary printed."""


# -- the report file -------------------------------------------------------------------------------------
def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class Report:
    """The JSON file: rewritten whole after every change, via a temporary file and an atomic rename."""

    def __init__(self, path: Path, header: dict, started: float) -> None:
        self.path = path
        self.started = started
        self.data: dict[str, Any] = {**header, "stages": {}, "in_progress": None, "exit_status": None,
                                     "failed_stage": None}

    def save(self) -> None:
        self.data["elapsed_s"] = time.monotonic() - self.started
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(_jsonable(self.data), indent=1) + "\n")
        os.replace(tmp, self.path)

    def status(self, stage: str) -> str | None:
        entry = self.data["stages"].get(stage)
        return entry["status"] if entry else None


# -- what the stages share -------------------------------------------------------------------------------
@dataclass
class Context:
    args: argparse.Namespace
    report: Report
    deadline: float
    guess: dict[str, float]
    torch: Any = None
    device: Any = None
    dtype: Any = None
    dtype_name: str = "bf16"
    preset: str = "Qwen3-8B"
    spec: Any = None  # the live model's ModelSpec, priced at the run's element size
    gpu: GPUSpec = GPUS["H100 SXM"]  # the preset that prices predictions
    datasheet: GPUSpec | None = None  # this device's datasheet preset, if it has one
    copy_bw: float | None = None
    default_trace: Any = None
    setup_s: float | None = None  # the default run's time outside its pass loop
    wall_ratio: float | None = None  # the default run's wall time over the preset's predicted time
    fits: dict[str, GPUSpec] = field(default_factory=dict)
    stop: str | None = None  # why the remaining stages are skipped (an interrupt)

    @property
    def smoke(self) -> bool:
        return self.args.smoke

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def run_stage(ctx: Context, name: str, fn: Callable[[Context], dict], estimate: Callable[[Context], float],
              needs: tuple[str, ...] = ()) -> None:
    """Run one stage unless an earlier one it needs did not succeed or it does not fit the time left;
    record its outcome (ok / failed / skipped / cut) and save the report either way."""
    report = ctx.report
    entry: dict[str, Any]
    missing = [n for n in needs if report.status(n) != "ok"]
    if ctx.stop or missing:
        entry = {"status": "skipped", "reason": ctx.stop or f"needs {', '.join(missing)}"}
    else:
        sizing: dict[str, Any] = {}
        try:
            need_s = float(estimate(ctx))
        except Exception as exc:  # noqa: BLE001  (sizing a run must not stop the benchmark: run it)
            need_s, sizing = 0.0, {"estimate_error": one_line(exc)}
        if need_s > ctx.remaining():
            entry = {"status": "skipped", "reason": f"time budget: needs ~{need_s:.0f} s, "
                                                    f"{max(0.0, ctx.remaining()):.0f} s left"}
        else:
            entry = {**_guarded(ctx, name, fn), "estimate_s": need_s, **sizing}
    report.data["stages"][name] = entry
    report.data["in_progress"] = None
    report.save()
    note = entry.get("reason") or entry.get("error") or ""
    print(f"[{name}] {entry['status']}" + (f" in {entry['seconds']:.1f} s" if "seconds" in entry else "")
          + (f": {note}" if note else ""))


def _guarded(ctx: Context, name: str, fn: Callable[[Context], dict]) -> dict[str, Any]:
    ctx.report.data["in_progress"] = name
    ctx.report.save()
    print(f"[{name}] started ({max(0.0, ctx.remaining()):.0f} s of budget left)")
    start = time.monotonic()
    try:
        if ctx.args.fail_stage == name:
            raise RuntimeError("failure injected by --fail-stage")
        entry = {"status": "ok", "result": fn(ctx)}
    except StageFailed as exc:
        entry = {"status": "failed", "error": str(exc), "result": exc.result}
    except StageSkipped as exc:
        entry = {"status": "skipped", "reason": str(exc)}
    except StageCut as exc:
        entry = {"status": "cut", "reason": str(exc)}
    except (Interrupted, KeyboardInterrupt) as exc:
        ctx.stop = f"interrupted ({exc or 'SIGINT'}) during {name}"
        entry = {"status": "failed", "error": ctx.stop}
    except BaseException as exc:  # noqa: BLE001  (a Triton compile error, an OOM, a bug: keep the rest going)
        entry = {"status": "failed", "error": one_line(exc), "traceback": traceback.format_exc(limit=8)}
        _release_memory(ctx)
    entry["seconds"] = time.monotonic() - start
    return entry


def _release_memory(ctx: Context) -> None:
    """Hand cached GPU memory back after a failure, so the next stage starts clean. A CUDA error that
    poisoned the context makes this raise too: then the next stages fail on their own, each recorded."""
    if ctx.torch is not None and ctx.device is not None and ctx.device.type == "cuda":
        try:
            ctx.torch.cuda.synchronize()
            ctx.torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001
            pass


# -- stage: environment ----------------------------------------------------------------------------------
def stage_environment(ctx: Context) -> dict:
    try:
        import torch
    except ImportError:
        raise StageFailed("torch is not installed; nothing can run") from None
    from engine.live.device import live_available

    ctx.torch = torch
    info = versions(torch)
    ok, why = live_available()
    if not ok and not ctx.smoke:
        raise StageFailed(f"no CUDA device ({why}); nothing to measure. `--smoke` runs a CPU dry run", info)
    ctx.device = torch.device("cpu" if ctx.smoke else "cuda")
    ctx.preset, ctx.dtype_name = ("tiny", "fp32") if ctx.smoke else ("Qwen3-8B", "bf16")
    ctx.dtype = torch.float32 if ctx.smoke else torch.bfloat16
    ctx.spec = replace(MODELS[ctx.preset], dtype_bytes=torch.empty((), dtype=ctx.dtype).element_size())
    ctx.datasheet = None if ctx.smoke else gpu_preset_for_device(info.get("device", ""))
    ctx.gpu = ctx.datasheet or GPUS["H100 SXM"]
    info.update(device_type=ctx.device.type, model_preset=ctx.preset, dtype=ctx.dtype_name,
                datasheet_preset=ctx.datasheet.name if ctx.datasheet else None, predictions_priced_as=ctx.gpu.name,
                triton_interpret=os.environ.get("TRITON_INTERPRET") == "1")
    print(f"  device {info.get('device', 'CPU')} (datasheet preset {info['datasheet_preset']}); torch "
          f"{info['torch']}, triton {info['triton']}; {ctx.preset} {ctx.dtype_name}")
    return info


def versions(torch) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(device=props.name, sms=props.multi_processor_count, memory_gib=round(props.total_memory / 2**30, 1))
    try:
        import inspect

        from torch.nn.attention.varlen import varlen_attn

        info["varlen_attn_block_table"] = "block_table" in inspect.signature(varlen_attn).parameters
    except Exception:  # noqa: BLE001  (absent in older torch builds)
        info["varlen_attn_block_table"] = False
    return info


# -- stage: copy bandwidth -------------------------------------------------------------------------------
def stage_copy_bandwidth(ctx: Context) -> dict:
    torch, device = ctx.torch, ctx.device
    nbytes, repeats = ((1 << 24) if ctx.smoke else (4 << 30)), ctx.args.repeats
    bw = copy_bandwidth(torch, device, nbytes, repeats)
    ctx.copy_bw = bw
    sheet = ctx.datasheet.datasheet_bandwidth if ctx.datasheet else None
    print(f"  {bw / GB:,.0f} GB/s device-to-device (read + write, median of {repeats})"
          + (f" = {100 * bw / sheet:.0f}% of the {ctx.datasheet.name} datasheet" if sheet else ""))
    return {"gb_s": bw / GB, "bytes": nbytes, "repeats": repeats, "pct_datasheet": 100 * bw / sheet if sheet else None}


def copy_bandwidth(torch, device, nbytes: int, repeats: int) -> float:
    """Median device-to-device copy rate, counting bytes read plus bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(repeats + 3):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - t
        if i >= 3:  # the first copies ramp the clocks up
            times.append(seconds)
    del src, dst
    if device.type == "cuda":
        torch.cuda.empty_cache()  # else the 2 x 4 GiB stay cached and count as used when sizing the KV below
    return 2 * nbytes / statistics.median(times)


# -- stage: kernel check ---------------------------------------------------------------------------------
def stage_kernel_check(ctx: Context) -> dict:
    """Every Triton kernel of the live model against its torch reference (benchmarks/live_gpu_kernels.py)."""
    if ctx.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise StageSkipped("a CPU run checks Triton kernels only under TRITON_INTERPRET=1")
    from engine.live.backend import triton_importable

    if not triton_importable():
        raise StageSkipped("triton is not importable here: live runs use the torch ops")
    from benchmarks.live_gpu_kernels import kernel_errors, tolerance

    limit = tolerance(ctx.dtype)
    errors = kernel_errors(ctx.spec, ctx.device, ctx.dtype, short=ctx.device.type != "cuda")
    bad = {k: v for k, v in errors.items() if not isinstance(v, float) or v > limit}
    print("  max error / output scale: " + ", ".join(
        f"{k} {v:.1e}" if isinstance(v, float) else f"{k} {v}" for k, v in errors.items()))
    result = {"max_rel_error": errors, "tolerance": limit, "ok": not bad}
    if bad:
        raise StageFailed(f"{', '.join(bad)} off by more than {limit:.0e} (or failed to run)", result)
    return result


# -- stage: decode roofline ------------------------------------------------------------------------------
def stage_decode_roofline(ctx: Context) -> dict:
    batches = [1, 2, 4, 8] if ctx.smoke else [1, 8, 64, 256]
    rows = decode_passes(ctx, batches, ctx.args.ctx or (64 if ctx.smoke else 1536), ctx.args.repeats)
    bw = ctx.copy_bw
    for row in rows:
        if "gpu_ms" not in row:
            print(f"  B={row['batch']:>3}: {row.get('error') or row.get('skipped')}")
            continue
        row["pct_copy_bw"] = 100 * row["achieved_gb_s"] * GB / bw if bw else None
        row["pct_datasheet"] = (100 * row["achieved_gb_s"] * GB / ctx.datasheet.datasheet_bandwidth
                                if ctx.datasheet else None)
        print(f"  B={row['batch']:>3}: {row['gpu_ms']:.2f} ms GPU, {row['wall_ms']:.2f} ms wall, "
              f"{row['achieved_gb_s']:,.0f} GB/s" + (f" = {row['pct_copy_bw']:.0f}% of copy" if bw else ""))
    result = {"rows": rows, "copy_bandwidth_source": "measured" if bw else None}
    failed = [r["batch"] for r in rows if "error" in r]
    if failed:
        raise StageFailed(f"batch {', '.join(map(str, failed))} failed", result)
    if any("skipped" in r for r in rows):
        result["partial"] = True
    return result


def decode_passes(ctx: Context, batches: list[int], seq_len: int, repeats: int) -> list[dict]:
    """Median GPU and wall time of a whole decode pass (graph replay + lm_head + argmax) per batch size;
    each size guarded on its own, and the sizes left when the budget runs short are skipped."""
    from engine.live.backend import TORCH, choose_kernels
    from engine.live.kv_cache import PagedKVCache
    from engine.live.qwen3 import build_model
    from engine.live.runner import ModelRunner, PassInput

    torch, device, dtype, spec = ctx.torch, ctx.device, ctx.dtype, ctx.spec
    block = 16
    embedding = spec.vocab_size * spec.hidden_size
    # Every weight is read once per pass except the embedding (B rows); a tied lm_head reads it whole.
    weight_bytes = (spec.num_params - (0 if spec.tie_word_embeddings else embedding)) * spec.dtype_bytes
    per_seq = -(-(seq_len + 1) // block)
    rows: list[dict] = []
    if device.type == "cuda":  # drop batch sizes whose KV would not fit beside the weights
        room = torch.cuda.mem_get_info(device)[0] - spec.weight_bytes - (6 << 30)
        fits = [b for b in batches if b * per_seq * block * spec.kv_bytes_per_token <= room] or batches[:1]
        rows += [{"batch": b, "skipped": "KV does not fit beside the weights"} for b in batches if b not in fits]
        batches = fits
    num_blocks = max(batches) * per_seq + 1
    model = build_model(spec, device, dtype)
    cache = PagedKVCache(spec, num_blocks, block, device, dtype)
    cache.kv.normal_(0, 1)  # attention over real-looking keys, not zeros
    graphs = device.type == "cuda"
    runner = ModelRunner(model, cache, max_num_seqs=max(batches), max_model_len=seq_len + block,
                         kernels=choose_kernels(device) if graphs else TORCH, use_cuda_graphs=False)
    if graphs:
        runner.prepare_static_decode(sorted(batches))
        runner.warm_up()
    # Each sequence's pages scattered over the pool, as a long-running server leaves them.
    pages = (np.random.default_rng(0).permutation(num_blocks - 1) + 1).tolist()
    per_batch_s = None
    for b in batches:
        if per_batch_s is not None and per_batch_s > ctx.remaining():
            rows.append({"batch": b, "skipped": "time budget"})
            continue
        start = time.monotonic()
        try:
            tables = [pages[i * per_seq:(i + 1) * per_seq] for i in range(b)]
            batch = PassInput([np.array([7])] * b, [seq_len - 1] * b, tables, [True] * b)
            for _ in range(3):
                runner.execute(batch)
            results = [runner.execute(batch) for _ in range(repeats)]
        except Exception as exc:  # noqa: BLE001  (an OOM at batch 256 keeps batches 1 to 64)
            rows.append({"batch": b, "error": one_line(exc)})
            _release_memory(ctx)
            continue
        per_batch_s = 2 * (time.monotonic() - start)  # the next size costs more; a rough bound
        gpu = statistics.median(r.gpu_seconds for r in results)
        wall = statistics.median(r.wall_seconds for r in results)
        nbytes = weight_bytes + b * seq_len * spec.kv_bytes_per_token
        rows.append({"batch": b, "ctx": seq_len, "gpu_ms": 1e3 * gpu, "wall_ms": 1e3 * wall, "tok_s": b / wall,
                     "bytes": nbytes, "achieved_gb_s": nbytes / gpu / GB, "graph": results[0].used_graph})
    del runner, cache, model
    _release_memory(ctx)
    return sorted(rows, key=lambda r: r["batch"])


# -- live runs -------------------------------------------------------------------------------------------
def run_configs(smoke: bool, gpu_name: str) -> dict[str, RunConfig]:
    """The default run and the held-out runs: the article's settings on a GPU, small analogues in a smoke run."""
    if smoke:
        workload = Workload(np.array([30, 12, 50, 8, 22, 40, 17, 9]), np.array([6, 9, 3, 12, 5, 7, 4, 8]))
        base = RunConfig(requests=8, max_num_seqs=4, max_num_batched_tokens=64, num_gpu_blocks_override=16,
                         workload=workload)
        return {"default_run": base,
                "held_out_memory_wall": base.replace(num_gpu_blocks_override=8, max_num_seqs=8),
                "held_out_static_batching": base.replace(allocation="reserve", unit="request"),
                "held_out_64_slots": base.replace(max_num_seqs=2)}
    base = RunConfig(gpu=gpu_name)  # the article's default scenario, priced for this GPU's preset
    return {"default_run": base,
            "held_out_memory_wall": base.replace(pool_gib=2.0, max_num_seqs=512),
            "held_out_static_batching": base.replace(max_num_seqs=64, allocation="reserve", unit="request"),
            "held_out_64_slots": base.replace(max_num_seqs=64)}


def settings(cfg: RunConfig) -> dict:
    return {"max_num_seqs": cfg.max_num_seqs, "num_gpu_blocks": cfg.num_gpu_blocks, "pool_gib": cfg.pool_gib,
            "allocation": cfg.allocation, "unit": cfg.unit, "requests": cfg.requests,
            "max_num_batched_tokens": cfg.max_num_batched_tokens}


def estimate_live_s(ctx: Context, cfg: RunConfig) -> float:
    """Setup plus the pass loop, priced from the scheduler's passes: by the wall-clock fit once there is
    one, else by the preset scaled as the default run was (or by a guess before it ran)."""
    from benchmarks.live_gpu_evaluate import schedule_costs
    from engine.cost_model import roofline_seconds

    pass_bytes, pass_flops = schedule_costs(cfg, ctx.spec)
    if "wall" in ctx.fits:
        loop = float(roofline_seconds(pass_bytes, pass_flops, ctx.fits["wall"]).sum()) * ESTIMATE_MARGIN
    elif ctx.wall_ratio is not None:
        loop = float(roofline_seconds(pass_bytes, pass_flops, ctx.gpu).sum()) * ctx.wall_ratio * ESTIMATE_MARGIN
    else:
        loop = (float(roofline_seconds(pass_bytes, pass_flops, ctx.gpu).sum()) * ctx.guess["slowdown"]
                + len(pass_bytes) * ctx.guess["host_per_pass"])
    setup = ctx.setup_s * ESTIMATE_MARGIN if ctx.setup_s is not None else ctx.guess["live_setup"]
    return setup + loop


def live_run(ctx: Context, cfg: RunConfig):
    """run_live with a timer that cancels it at the budget's end; returns (trace, seconds it took)."""
    from engine.live.errors import LiveCancelled
    from engine.live.executor import run_live

    cancel = threading.Event()
    timer = threading.Timer(max(0.0, ctx.remaining()), cancel.set)
    timer.daemon = True
    timer.start()
    start = time.monotonic()
    try:
        trace = run_live(cfg, model_preset=ctx.preset, device=ctx.device.type, dtype=ctx.dtype_name, cancel=cancel)
    except LiveCancelled as exc:
        raise StageCut(f"stopped at the time budget ({exc})") from None
    finally:
        timer.cancel()
    return trace, time.monotonic() - start


def roofline_constants(ctx: Context) -> tuple[float, float, str]:
    """Bandwidth and FLOP/s of the roofline: the measured copy rate when there is one, else the datasheet."""
    sheet = ctx.datasheet or ctx.gpu
    if ctx.copy_bw:
        return ctx.copy_bw, sheet.datasheet_flops, "measured copy bandwidth"
    return sheet.datasheet_bandwidth, sheet.datasheet_flops, f"{sheet.name} datasheet"


def describe_run(ctx: Context, cfg: RunConfig, trace, run_s: float) -> dict:
    """A live run's figures: both clocks, host time, the preset's prediction, each pass kind vs the roofline."""
    from benchmarks.live_gpu_evaluate import by_pass_kind, score

    live, passes = trace.live, trace.live.passes
    summary = trace.summary()
    loop_s = float(np.sum(passes.wall_ms)) / 1e3
    bw, flops, source = roofline_constants(ctx)
    out = trace.output_tokens
    return {
        "settings": settings(cfg),
        "passes": trace.num_passes,
        "preemptions": summary["preemptions"],
        "recomputed_tokens": summary["recomputed_tokens"],
        "output_tokens": out,
        "trace_digest": trace.digest,
        "digest_matches_simulator": trace.digest == simulate(cfg).digest,
        "gpu_tok_s": live.measured_tok_s,
        "wall_tok_s": live.wall_tok_s,
        "gpu_ms_per_pass": live.gpu_ms_per_pass,
        "wall_ms_per_pass": live.wall_ms_per_pass,
        "host_ms_per_pass": live.host_ms_per_pass,
        "run_s": run_s,
        "setup_s": run_s - loop_s,
        "cuda_graph_passes": live.cuda_graph_passes,
        "attention": live.attention,
        "kernels": live.kernels,
        "predicted_by_preset": {"gpu": cfg.gpu, **score(passes.predicted_ms / 1e3, passes.gpu_ms / 1e3, out)},
        "roofline": {"bandwidth_gb_s": bw / GB, "tflop_s": flops / 1e12, "bandwidth_from": source},
        "pass_kinds": by_pass_kind(passes, bw, flops),
    }


def calibrated_scores(ctx: Context, trace) -> dict:
    """The fitted presets' predictions for this run, each on the clock it was fitted to."""
    from benchmarks.live_gpu_evaluate import score
    from engine.cost_model import roofline_seconds
    from engine.live.calibrate import CLOCKS

    passes = trace.live.passes
    return {clock: {"preset": fit.name, **score(roofline_seconds(passes.pass_bytes, passes.pass_flops, fit),
                                                np.asarray(getattr(passes, CLOCKS[clock])) / 1e3, trace.output_tokens)}
            for clock, fit in ctx.fits.items()}


def print_run(run: dict) -> None:
    kinds = run["pass_kinds"]
    print(f"  {run['passes']:,} passes ({run['preemptions']} preemptions): {run['gpu_tok_s']:,.0f} tok/s GPU clock, "
          f"{run['wall_tok_s']:,.0f} wall clock, host {run['host_ms_per_pass']:.2f} ms/pass, setup "
          f"{run['setup_s']:.0f} s; preset predicts {run['predicted_by_preset']['predicted_tok_s']:,.0f}; "
          f"schedule {'matches' if run['digest_matches_simulator'] else 'DIFFERS FROM'} the simulator's")
    for kind, k in kinds.items():
        print(f"  {kind} passes: {k['passes']:,}, {k['pct_of_roofline'] or 0:.0f}% of roofline, "
              f"{k['pct_of_gpu_time'] or 0:.0f}% of GPU time, {k['cuda_graph_passes']:,} in CUDA graphs")


def stage_default_run(ctx: Context) -> dict:
    cfg = run_configs(ctx.smoke, ctx.gpu.name)["default_run"]
    trace, run_s = live_run(ctx, cfg)
    run = describe_run(ctx, cfg, trace, run_s)
    ctx.default_trace, ctx.setup_s = trace, run["setup_s"]
    ctx.wall_ratio = float(np.sum(trace.live.passes.wall_ms) / np.sum(trace.live.passes.predicted_ms))
    print_run(run)
    if not run["digest_matches_simulator"]:
        raise StageFailed("the live schedule differs from the simulator's", run)
    return run


def stage_calibration(ctx: Context) -> dict:
    """Fit on the default run only (both clocks); score in sample here, out of sample on the held-out runs."""
    from engine.live.calibrate import calibrate_from_trace, fit_pass_times

    trace = ctx.default_trace
    fits = {clock: calibrate_from_trace(trace, clock=clock) for clock in ("gpu", "wall")}
    result: dict[str, Any] = {}
    for clock, fit in fits.items():
        result[clock] = {"preset": fit.name, "overhead_ms": 1e3 * fit.pass_overhead_s,
                         "bandwidth_gb_s": fit.effective_bandwidth / GB, "tflop_s": fit.effective_flops / 1e12,
                         "fit_rms_pct": 100 * fit.extra["rms_rel_error"]}
    ctx.fits = fits
    result["in_sample"] = calibrated_scores(ctx, trace)
    # Eager mixed passes (launch gaps) can inflate the fitted overhead; the same fit on decode-only passes
    # alone says by how much.
    passes = trace.live.passes
    decode = np.asarray(passes.pass_kind) == 0
    if decode.sum() >= 3:
        fit = fit_pass_times(passes.pass_bytes[decode], passes.pass_flops[decode], passes.gpu_ms[decode] / 1e3,
                             fits["gpu"])
        result["gpu_decode_only"] = {"overhead_ms": 1e3 * fit.overhead_s, "bandwidth_gb_s": fit.bandwidth / GB,
                                     "fit_rms_pct": 100 * fit.rms_rel_error, "passes": fit.num_passes}
    g = result["gpu"]
    print(f"  GPU clock: {g['overhead_ms']:.2f} ms + bytes / {g['bandwidth_gb_s']:,.0f} GB/s "
          f"(max with FLOPs / {g['tflop_s']:,.0f} TFLOP/s); in-sample throughput error "
          f"{result['in_sample']['gpu']['throughput_error_pct']:+.1f}%")
    return result


def held_out_stage(name: str) -> Callable[[Context], dict]:
    def stage(ctx: Context) -> dict:
        cfg = run_configs(ctx.smoke, ctx.gpu.name)[name]
        trace, run_s = live_run(ctx, cfg)
        run = describe_run(ctx, cfg, trace, run_s)
        if ctx.fits:
            run["out_of_sample"] = calibrated_scores(ctx, trace)
        print_run(run)
        for clock, s in run.get("out_of_sample", {}).items():
            print(f"  calibrated ({clock} clock) predicts {s['predicted_tok_s']:,.0f} tok/s vs "
                  f"{s['measured_tok_s']:,.0f} measured ({s['throughput_error_pct']:+.1f}%), pass error p50 "
                  f"{s['p50_pass_error_pct']:.1f}% p90 {s['p90_pass_error_pct']:.1f}%")
        if not run["digest_matches_simulator"]:
            raise StageFailed("the live schedule differs from the simulator's", run)
        return run

    return stage


# -- main ------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="exit status: 0 no stage failed; 2 bad arguments; "
                                 + "; ".join(f"{EXIT_BASE + i} {s} failed" for i, s in enumerate(STAGES)))
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU: checks the script, measures nothing")
    ap.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                    help="finish within this many seconds, skipping stages that do not fit "
                    f"(default {DEFAULT_BUDGET_S:.0f})")
    ap.add_argument("--ctx", type=int, default=None, help="decode context length (default 1536; smoke 64)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (default 20; smoke 3)")
    ap.add_argument("--out", default=None, help="the JSON report (default $OUT/live_gpu.json, else artifacts/)")
    ap.add_argument("--fail-stage", choices=STAGES, default=None, help=argparse.SUPPRESS)  # tests only
    args = ap.parse_args(argv)
    for flag, value in (("--budget-s", args.budget_s), ("--ctx", args.ctx), ("--repeats", args.repeats)):
        if value is not None and not (value > 0 and np.isfinite(value)):
            ap.error(f"{flag} must be a positive number; got {value}")
    args.repeats = args.repeats or (3 if args.smoke else 20)
    if args.out is None:
        base = Path(os.environ["OUT"]) if os.environ.get("OUT") else ROOT / "artifacts"
        args.out = str(base / "live_gpu.json")
    return args


def main(argv: list[str] | None = None, started: float | None = None) -> int:
    """Run every stage; returns the exit status. `started` is when the budget began (default: now)."""
    started = time.monotonic() if started is None else started
    for stream in (sys.stdout, sys.stderr):  # every line out at once: a killed run keeps what it printed
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    args = parse_args(argv)
    if args.smoke:  # read when @triton.jit decorates, so before any kernel module is imported
        os.environ.setdefault("TRITON_INTERPRET", "1")
    path = Path(args.out)
    header = {"benchmark": "benchmarks/live_gpu.py", "argv": sys.argv[1:] if argv is None else list(argv),
              "smoke": args.smoke, "budget_s": args.budget_s,
              "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "stage_order": list(STAGES)}
    report = Report(path, header, started)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        report.save()
    except OSError as exc:
        print(f"live_gpu: cannot write {path} ({exc.strerror or exc})", file=sys.stderr)
        return 2
    ctx = Context(args=args, report=report, deadline=started + args.budget_s - RESERVE_S,
                  guess=GUESS_S["smoke" if args.smoke else "gpu"])

    def on_sigterm(signum, frame):
        raise Interrupted("SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_sigterm) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        fixed = ctx.guess
        run_stage(ctx, "environment", stage_environment, lambda c: 0.0)
        run_stage(ctx, "copy_bandwidth", stage_copy_bandwidth, lambda c: fixed["copy_bandwidth"], ("environment",))
        run_stage(ctx, "kernel_check", stage_kernel_check, lambda c: fixed["kernel_check"], ("environment",))
        run_stage(ctx, "decode_roofline", stage_decode_roofline, lambda c: fixed["decode_roofline"], ("environment",))
        configs = run_configs(args.smoke, ctx.gpu.name)
        run_stage(ctx, "default_run", stage_default_run, lambda c: estimate_live_s(c, configs["default_run"]),
                  ("environment",))
        run_stage(ctx, "calibration", stage_calibration, lambda c: fixed["calibration"], ("default_run",))
        for name in HELD_OUT:
            run_stage(ctx, name, held_out_stage(name), lambda c, n=name: estimate_live_s(c, configs[n]),
                      ("environment",))
    except (Interrupted, KeyboardInterrupt) as exc:  # between two stages: the next one is the casualty
        why = f"interrupted ({exc or 'SIGINT'})"
        left = [n for n in STAGES if n not in report.data["stages"]]
        if left:
            report.data["stages"][left[0]] = {"status": "failed", "error": why}
            report.data["stages"].update({n: {"status": "skipped", "reason": why} for n in left[1:]})
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    failed = next((n for n in STAGES if report.status(n) == "failed"), None)
    exit_status = EXIT_BASE + STAGES.index(failed) if failed else 0
    report.data.update(exit_status=exit_status, failed_stage=failed, in_progress=None)
    report.save()
    print_summary(report.data, str(path))
    return exit_status


if __name__ == "__main__":
    sys.exit(main(started=_STARTED))
