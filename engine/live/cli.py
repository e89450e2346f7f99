"""`python -m engine live ...`: run the config on a real model, print measured against predicted.

engine/cli.py parses the flags and calls `live_main(cfg, args)`. Every expected failure (no CUDA, out
of memory, a bad preset or weights directory) is one line on stderr and exit status 2.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from engine.config import ConfigError, RunConfig
from engine.live.errors import LiveCancelled, LiveError
from engine.presets import MODELS
from engine.trace import SUMMARY_KEYS, Trace
from engine.workload import WorkloadError

def live_summary(trace: Trace) -> dict[str, Any]:
    """The simulator's summary keys (makespan and throughput from measured time) plus the live figures."""
    out = {**trace.summary(), **trace.live.summary()}
    out["measured_vs_predicted"] = (out["measured_tok_s"] / out["predicted_tok_s"]) if out["predicted_tok_s"] else 0.0
    return out


def _calibrate(trace: Trace, path: str) -> dict[str, Any]:
    from engine.cost_model import roofline_seconds
    from engine.live.calibrate import calibrate_from_trace, save_gpu_spec
    from engine.presets import register_gpu

    spec = calibrate_from_trace(trace)
    save_gpu_spec(spec, path)
    register_gpu(spec)
    passes = trace.live.passes
    repredicted = float(roofline_seconds(passes.pass_bytes, passes.pass_flops, spec).sum())
    return {**_measured_memory(trace, spec),
        "calibrated_gpu": spec.name,
        "calibrated_overhead_ms": 1e3 * spec.pass_overhead_s,
        "calibrated_bandwidth_gb_s": spec.effective_bandwidth / 1e9,
        "calibrated_tflop_s": spec.effective_flops / 1e12,
        "calibrated_rms_rel_error": spec.extra.get("rms_rel_error"),
        "recalibrated_predicted_tok_s": trace.output_tokens / repredicted if repredicted > 0 else 0.0,
        "calibration_file": path,
    }


def _measured_memory(trace: Trace, spec) -> dict[str, Any]:
    """With memory measured on the GPU: the pool vLLM's start-up arithmetic gives from those figures (engine/memory.py)
    at the run's --gpu-memory-utilization (vLLM's default if unset), for the model measured."""
    measured = spec.extra.get("memory")
    if not measured or measured.get("model") not in MODELS:
        return {}
    from engine.presets import GPU_MEMORY_UTILIZATION

    cfg = trace.config
    sized = cfg.replace(gpu=spec.name, model=measured["model"], tensor_parallel_size=1, kv_cache_dtype="auto",
                        gpu_memory_utilization=cfg.gpu_memory_utilization or GPU_MEMORY_UTILIZATION)
    profile = sized.memory_profile
    return {"calibrated_memory_profile": profile.as_dict(),
            "calibrated_kv_cache_tokens": profile.num_gpu_blocks * sized.block_size}


def _table(summary: dict[str, Any]) -> str:
    clock = "on the host clock" if str(summary["device"]).startswith("CPU") else "GPU (CUDA events)"
    rows = [
        ("device", summary["device"]),
        ("model (live)", f"{summary['model_preset']}, {summary['dtype']}, {summary['weights']}"),
        ("attention", f"{summary['attention']}; CUDA-graph passes {summary['cuda_graph_passes']:,}"),
        ("other kernels", summary.get("kernels", "torch ops")),
        ("passes", f"{summary['passes']:,}"),
        ("finished requests", f"{summary['finished_requests']:,}"),
        ("preemptions", f"{summary['preemptions']:,}"),
        ("time per pass", f"{summary['gpu_ms_per_pass']:.2f} ms {clock}; wall {summary['wall_ms_per_pass']:.2f} ms "
                          f"(host {summary['host_ms_per_pass']:.2f} ms: scheduling, staging, sync)"),
        ("measured throughput", f"{summary['measured_tok_s']:,.1f} tok/s (wall clock {summary['wall_tok_s']:,.1f})"),
        (f"predicted ({summary['predicted_gpu']})", f"{summary['predicted_tok_s']:,.1f} tok/s"),
        ("measured / predicted", f"{summary['measured_vs_predicted']:.3f}"),
        ("makespan (sum of passes)", f"{summary['makespan_s']:.3f} s"),
        ("trace digest", summary["trace_digest"]),
    ]
    if "calibrated_gpu" in summary:
        rows += [
            ("calibrated preset", f"{summary['calibrated_gpu']} -> {summary['calibration_file']}"),
            ("  overhead", f"{summary['calibrated_overhead_ms']:.3f} ms"),
            ("  bandwidth", f"{summary['calibrated_bandwidth_gb_s']:,.1f} GB/s"),
            ("  compute", f"{summary['calibrated_tflop_s']:,.3f} TFLOP/s"),
            ("  re-predicted", f"{summary['recalibrated_predicted_tok_s']:,.1f} tok/s "
                               f"(fit rms error {100 * summary['calibrated_rms_rel_error']:.1f}%)"),
        ]
    if "calibrated_memory_profile" in summary:
        p = summary["calibrated_memory_profile"]
        rows.append(("  GPU KV cache size", f"{summary['calibrated_kv_cache_tokens']:,} tokens at "
                                            f"--gpu-memory-utilization {p['gpu_memory_utilization']:g} "
                                            f"({p['source']})"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def live_main(cfg: RunConfig, args: Any) -> int:
    """Run live, print a table (or JSON with --json); 0 on success, 2 on any expected failure."""
    from engine.live.executor import run_live

    try:
        trace = run_live(cfg, model_preset=getattr(args, "model_preset", None),
                         device=getattr(args, "device", "cuda") or "cuda", dtype=getattr(args, "dtype", None))
        summary = live_summary(trace)
        if getattr(args, "calibrate_out", None):
            summary.update(_calibrate(trace, args.calibrate_out))
        if getattr(args, "trace_out", None):
            trace.write_schedule(args.trace_out)
    except (LiveError, ConfigError, WorkloadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except LiveCancelled as exc:
        print(f"cancelled: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.strerror or exc} ({exc.filename})", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of host memory; lower pool_gib or pick a smaller --model-preset", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 2
    except Exception as exc:  # a CUDA or Triton failure: still one line, never a traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"error: live run failed: {type(exc).__name__}: {first}", file=sys.stderr)
        return 2
    if getattr(args, "json", False):
        print(json.dumps(summary, indent=2))
    else:
        if trace.arrives_over_time:  # measured latency, laid out as vllm bench serve prints it
            from engine.bench_report import bench_block

            print(bench_block(trace))
            print()
        print(_table(summary))
    return 0


__all__ = ["live_main", "live_summary", "SUMMARY_KEYS"]
