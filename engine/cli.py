"""`python -m engine run | sweep | live | diagnose`: the figures a course author quotes, from the command line.

Every `run` flag is a RunConfig field (declared once, in engine/settings.py) plus the output options. Bad input prints one line on
stderr and exits 2; nothing here prints a traceback for a user's mistake. Output paths are checked before
any work, and output files are written whole or not at all (engine/outputs.py).
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from typing import Any, Iterator, Sequence

from engine.config import ConfigError, RunConfig, pool_beyond_gpu
from engine.diagnose import LogError, diagnose, parse_log
from engine.logs import memory_log_lines, periodic_log_line, refusal_log_lines, startup_error, startup_log_line
from engine.outputs import check_output_path
from engine.settings import SETTINGS
from engine.simulate import SimulationError, simulate
from engine.versions import VERSIONS, settings_for
from engine.bench_report import bench_block, latency_table_columns
from engine.workload import WorkloadError, load_workload

_DEFAULTS = RunConfig()
# The settings a --vllm-version sets (each release sets the same ones).
VERSIONED = tuple(next(iter(VERSIONS.values())).settings)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message}"[:500], file=sys.stderr)
        raise SystemExit(2)


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Every flag's help ends with its default (a help text that already says "(default: ...)" keeps its words)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        return text if "(default:" in text else super()._get_help_string(action)


def _add_run_flags(p: argparse.ArgumentParser, trace_out: bool = True) -> None:
    """One flag per RunConfig field, from its declaration in engine/settings.py, then the output options."""
    for s in SETTINGS.values():
        default = getattr(_DEFAULTS, s.name)
        if s.name in _TRAFFIC_FLAGS:
            p.add_argument(s.flag, default=None, help=s.help, **_TRAFFIC_FLAGS[s.name])
        elif s.name == "requests":  # None: not given (with --workload, given means sample the file to it)
            p.add_argument(s.flag, type=int, default=None, help=s.help)
        elif s.kind is bool:
            # --x / --no-x, as vLLM spells its switches (--enable-prefix-caching / --no-enable-prefix-caching).
            # A setting a vLLM version sets is None until given: --vllm-version then says it.
            p.add_argument(s.flag, action=argparse.BooleanOptionalAction,
                           default=None if s.name in VERSIONED else default, help=s.help)
        elif s.kind is str and s.choices and not callable(s.choices):
            p.add_argument(s.flag, choices=s.allowed(), default=default, help=s.help)
        else:
            listed = f" (one of: {', '.join(map(str, s.allowed()))})" if callable(s.choices) else ""
            p.add_argument(s.flag, type=None if s.kind is str else s.kind, default=default, help=s.help + listed)
    if trace_out:
        p.add_argument("--trace-out", default=None, help="write the per-pass schedule as JSON to this file (default: none written)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


# Traffic flags read as vllm bench serve's: --request-rate alone turns arrivals on ("inf": all at once), and
# --goodput takes its targets as separate words. None means "not given", resolved in traffic_values().
_TRAFFIC_FLAGS: dict[str, dict[str, Any]] = {
    "arrival": {"choices": SETTINGS["arrival"].allowed()},
    "request_rate": {"type": str},
    "goodput": {"nargs": "+", "metavar": "NAME:MS"},
}


def traffic_values(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    """arrival, request_rate and goodput as RunConfig takes them, from the flags (or sweep overrides)."""
    values = {name: overrides.get(name, getattr(args, name)) for name in _TRAFFIC_FLAGS}
    rate, arrival = values["request_rate"], values["arrival"]
    if isinstance(rate, str):
        if rate.strip().lower() in ("inf", "infinity"):
            if arrival == "rate":
                raise ConfigError("request_rate inf means all at once; it cannot go with arrival rate")
            rate, arrival = None, arrival or "all-at-once"
        else:
            rate = SETTINGS["request_rate"].parse(rate)
    if arrival is None:
        if rate is not None:
            arrival = "rate"
        elif args.workload and load_workload(args.workload).arrival_s is not None:
            arrival = "workload"  # the file says when its requests come
        else:
            arrival = _DEFAULTS.arrival
    goodput = values["goodput"]
    if isinstance(goodput, list):
        goodput = " ".join(goodput)
    return {"arrival": arrival, "request_rate": _DEFAULTS.request_rate if rate is None else rate, "goodput": goodput}


def request_values(args: argparse.Namespace, **overrides: Any) -> dict[str, Any]:
    """requests and workload_sample: --requests given with --workload samples the file to that many requests."""
    requests = overrides.get("requests", args.requests)
    sample = overrides.get("workload_sample", args.workload_sample)
    if requests is not None and args.workload and sample is None:
        sample = requests
    return {"requests": _DEFAULTS.requests if requests is None else requests, "workload_sample": sample}


def config_from_args(args: argparse.Namespace, **overrides: Any) -> RunConfig:
    plain = {name: getattr(args, name) for name in SETTINGS if name not in _TRAFFIC_FLAGS}
    values = {**plain, **overrides}
    # --vllm-version's defaults, for its settings not given as flags (a sweep's value is checked first)
    SETTINGS["vllm_version"].check(values["vllm_version"])
    values.update(settings_for(values["vllm_version"], **{k: values[k] for k in VERSIONED}))
    return RunConfig(**{**values, **traffic_values(args, **overrides), **request_values(args, **overrides)})


def format_summary(summary: dict[str, Any]) -> str:
    rows = [
        ("output tokens/s", f"{summary['throughput_tok_s']:,.0f}"),
        ("largest batch", f"{summary['peak_batch']}"),
        ("mean batch", f"{summary['mean_batch']:.1f}"),
        ("preemptions", f"{summary['preemptions']:,}"),
        ("prompt tokens recomputed", f"{summary['recomputed_prompt_tokens']:,}"),
        ("all tokens recomputed", f"{summary['recomputed_tokens']:,}"),
        ("held cache holding a token", f"{100 * summary['live_cache_fraction']:.1f}%"),
        ("passes", f"{summary['passes']:,}"),
        ("makespan", f"{summary['makespan_s']:.2f} s"),
        ("finished requests", f"{summary['finished_requests']}"),
        ("GPU KV cache size", f"{summary['kv_cache_tokens']:,} tokens"),
        ("maximum concurrency", f"{summary['max_concurrency']:.2f}x"),
    ]
    if summary.get("num_gpus", 1) > 1:
        rows.append(("output tokens/s per GPU", f"{summary['throughput_per_gpu_tok_s']:,.0f} "
                                                f"(of {summary['num_gpus']} GPUs)"))
    if summary.get("refused_requests"):
        rows.append(("refused requests", f"{summary['refused_requests']:,} (longer than --max-model-len "
                                         f"{summary['max_model_len']:,})"))
    rows += [
        ("trace digest", summary["trace_digest"]),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    check_output_path(args.trace_out, "--trace-out")
    trace = simulate(cfg)
    if warning := pool_beyond_gpu(cfg):  # only for a run that happens: bad input gets its one error line
        print(f"warning: {warning}", file=sys.stderr)
    if refusal := startup_error(cfg):  # vLLM would not start; the run shows what the rest would do
        print("warning: vLLM would refuse to start: " + refusal.split("] ", 1)[-1], file=sys.stderr)
    summary = trace.summary()
    if args.trace_out:
        try:
            trace.write_schedule(args.trace_out)
        except OSError as exc:
            raise ConfigError(f"trace_out: cannot write {args.trace_out!r} ({exc.strerror})") from None
    if args.json:
        print(json.dumps(summary))
    else:
        print(bench_block(trace))
        print()
        print(format_summary(summary))
        print()
        for line in [*memory_log_lines(cfg), *refusal_log_lines(cfg), startup_log_line(cfg)]:
            print(line)
        print(periodic_log_line(trace, min(10.0, trace.makespan_s)))
    return 0


_SWEEPABLE = [name for name in SETTINGS if name != "workload"]
_MEMORY_SETTINGS = ("pool_gib", "gpu_memory_utilization", "kv_cache_dtype", "tensor_parallel_size", "max_model_len",
                    "num_gpu_blocks_override")


def _cmd_sweep(args: argparse.Namespace) -> int:
    name = args.param.replace("-", "_")
    if name not in _SWEEPABLE:
        raise ConfigError(f"--param must be one of: {', '.join(_SWEEPABLE)}; got {args.param!r}")
    texts = [v.strip() for v in args.values.split(",") if v.strip()]
    if not texts:
        raise ConfigError("--values needs at least one value, e.g. --values 1,8,32,64")
    if len(texts) > 64:
        raise ConfigError(f"--values takes at most 64 values, got {len(texts)}")
    rows, over_time = [], False
    for text in texts:
        # request_rate stays text here: "inf" is vLLM's all at once, resolved with the other traffic flags.
        value = text if name in _TRAFFIC_FLAGS else SETTINGS[name].parse(text)
        extra = {"arrival": "rate"} if name == "burstiness" and args.arrival is None else {}  # bursts of traffic
        cfg = config_from_args(args, **{name: value, **extra})
        shown = "inf" if name == "request_rate" and cfg.arrival == "all-at-once" else getattr(cfg, name)
        rows.append({name: shown, **simulate(cfg).summary()})
        over_time |= cfg.arrival != "all-at-once"
        if warning := pool_beyond_gpu(cfg):
            print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(rows))
        return 0
    if over_time:  # traffic over time: what a rate sweep of vllm bench serve reports
        cols, heads = latency_table_columns(name, rows)
    else:
        cols = [name, "throughput_tok_s", "peak_batch", "mean_batch", "preemptions", "recomputed_prompt_tokens",
                "live_cache_fraction"]
        heads = [name, "tok/s", "peak", "mean", "preempt", "prompt recomputed", "held live"]
        if name in _MEMORY_SETTINGS:  # what the fix changes: the pool, and with TP the GPUs it costs
            cols += ["kv_cache_tokens", "max_concurrency", "throughput_per_gpu_tok_s"]
            heads += ["KV cache tokens", "max concurrency", "tok/s per GPU"]

    def cell(col: str, row: dict) -> str:
        v = row[col]
        if col in ("throughput_tok_s", "throughput_per_gpu_tok_s"):
            return f"{v:,.0f}"
        if col in ("mean_batch",):
            return f"{v:.1f}"
        if col == "live_cache_fraction":
            return f"{100 * v:.1f}%"
        if col == "request_throughput" or col == "goodput_req_s":
            return "-" if v is None else f"{v:.2f}"
        if col.endswith(("_p50", "_p90", "_p99", "_mean")):
            return f"{v:,.1f}"
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    table = [heads] + [[cell(c, r) for c in cols] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(cols))]
    for r in table:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))
    return 0


def _cmd_live(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    # Everything that can be refused is refused before a model is built or a pass is run.
    check_output_path(args.trace_out, "--trace-out")
    check_output_path(args.calibrate_out, "--calibrate-out")
    try:
        from engine.live.cli import live_main
        from engine.live.errors import LiveError
        from engine.live.weights import read_spec, weights_dir_from_env
    except ImportError as exc:  # torch (the `live` extra) missing, or the live package broken
        print(f"live: live GPU mode is unavailable ({exc}); install the extra: pip install -e '.[live]'",
              file=sys.stderr)
        return 2
    weights_dir = weights_dir_from_env()
    if weights_dir:
        try:
            read_spec(weights_dir)  # engine/live/weights.py validates the checkpoint's config.json
        except LiveError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return live_main(cfg, args)


MAX_LOG_BYTES = 256 << 20  # a day of a busy server's log is far less; a device or a runaway pipe stops here
MAX_LOG_LINE = 64 << 10  # vLLM prints nothing longer; the rest of a longer line is skipped


def _log_lines(fh) -> Iterator[str]:
    """Lines of a binary stream, each cut at MAX_LOG_LINE, decoded leniently; at most MAX_LOG_BYTES read."""
    total = 0
    while True:
        chunk = fh.readline(MAX_LOG_LINE)
        if not chunk:
            return
        total += len(chunk)
        if total > MAX_LOG_BYTES:
            raise LogError(f"more than {MAX_LOG_BYTES >> 20} MiB of log; give its last part (e.g. tail -n 10000)")
        line = chunk
        while not chunk.endswith(b"\n"):  # the rest of an over-long line: skipped, still counted
            chunk = fh.readline(MAX_LOG_LINE)
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_LOG_BYTES:
                raise LogError(f"more than {MAX_LOG_BYTES >> 20} MiB of log; give its last part (e.g. tail -n 10000)")
        yield line.decode("utf-8", errors="replace")


def _read_log(path: str | None):
    if path is None or path == "-":
        return parse_log(_log_lines(sys.stdin.buffer))
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise LogError(f"{path[:80]!r} is not a regular file")
        with open(path, "rb") as fh:
            return parse_log(_log_lines(fh))
    except OSError as exc:
        raise LogError(f"cannot read {path[:80]!r} ({exc.strerror})") from None


def _cmd_diagnose(args: argparse.Namespace) -> int:
    if args.max_num_seqs is not None and args.max_num_seqs < 1:
        raise LogError(f"--max-num-seqs must be at least 1, got {args.max_num_seqs}")
    result = diagnose(_read_log(args.file), args.max_num_seqs)
    if args.json:
        print(json.dumps(result.as_json()))
        return 0
    print(f"{result.title}" + (f" ({result.case})" if result.case else ""))
    print(result.why)
    if result.fixes:
        print("Fixes:")
        for fix in result.fixes:
            print(f"  - {fix}")
    flags = [f"--{k.replace('_', '-')} {v}" for k, v in result.reproduce.items() if k != "pool_gib"]
    if flags:
        print("Reproduce it here: python -m engine run " + " ".join(flags))
    return 0


def _add_diagnose(sub) -> None:
    diag = sub.add_parser("diagnose", help="read vLLM's log lines and name the case: memory-cap, slot-cap or "
                                           "past-the-wall", formatter_class=_Help,
                          description="Read vLLM's start-up 'GPU KV cache size' / 'Maximum concurrency' lines and its "
                                      "periodic stats lines (Running, Waiting, Preemptions, GPU KV cache usage) from "
                                      "FILE or stdin, and say which of the course's three cases the server is in, "
                                      "why, and what to change.")
    diag.add_argument("--max-num-seqs", type=int, default=None,
                      help="the server's --max-num-seqs (default: as the log names it, else unknown)")
    diag.add_argument("--json", action="store_true", help="print the diagnosis as JSON (case, numbers, fixes)")
    diag.add_argument("file", nargs="?", default=None, metavar="FILE", help="a log file (default: stdin)")
    diag.set_defaults(func=_cmd_diagnose)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m engine", description=__doc__.splitlines()[0], formatter_class=_Help)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="simulate one configuration and print its summary", formatter_class=_Help)
    _add_run_flags(run)
    run.set_defaults(func=_cmd_run)
    # A sweep is many runs: it has no single schedule to write, so it takes no --trace-out (argparse refuses it).
    sweep = sub.add_parser("sweep", help="simulate one setting at several values and print a table",
                           formatter_class=_Help)
    _add_run_flags(sweep, trace_out=False)
    sweep.add_argument("--param", required=True, help="RunConfig field to vary, e.g. max_num_seqs or pool-gib")
    sweep.add_argument("--values", required=True, help="comma-separated values, at most 64")
    sweep.set_defaults(func=_cmd_sweep)
    live = sub.add_parser("live", help="run the same scheduler on a real torch model (GPU)", formatter_class=_Help)
    _add_run_flags(live)
    live.add_argument("--model-preset", default=None, help="torch model shapes (default: --model)")
    live.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="where the forward passes run")
    live.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default=None,
                      help="weights and activations (default: bf16 on CUDA, fp32 on CPU)")
    live.add_argument("--calibrate-out", default=None,
                      help="fit the cost model to the measured passes; save it as JSON to this file")
    live.set_defaults(func=_cmd_live)
    _add_diagnose(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader that went away (`| head`) is handled below
        return rc
    except (ConfigError, WorkloadError, SimulationError, LogError) as exc:
        print(f"error: {exc}"[:500], file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader closed the pipe (`python -m engine run | head`): stop quietly, as `cat` would. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
