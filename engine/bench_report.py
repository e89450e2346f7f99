"""A run's latency figures laid out as `vllm bench serve` prints them, and the sweep table's latency columns."""
from __future__ import annotations

from typing import Any

from engine.trace import Trace

WIDTH = 50


def _rule(title: str, fill: str = "-") -> str:
    return f"{title:{fill}^{WIDTH}}"


def _row(label: str, value: Any) -> str:
    text = f"{value:.2f}" if isinstance(value, float) else str(value)
    return f"{label:<40} {text:<10}".rstrip()


def bench_block(trace: Trace) -> str:
    """The result block of `vllm bench serve` (same labels and widths; P90 added beside P99)."""
    cfg, s, w = trace.config, trace.summary(), trace.workload
    duration = s["makespan_s"]
    if cfg.arrival == "rate":
        kind = "Poisson process" if cfg.burstiness == 1.0 else "Gamma distribution"
        head = [f"Traffic request rate: {float(cfg.request_rate)}", f"Burstiness factor: {float(cfg.burstiness)} ({kind})"]
    elif cfg.arrival == "workload":
        head = ["Traffic request rate: as the workload file's arrival times"]
    else:
        head = ["Traffic request rate: inf"]
    lines = head + [
        _rule(" Serving Benchmark Result ", "="),
        _row("Successful requests:", s["finished_requests"]),
        _row("Benchmark duration (s):", duration),
        _row("Total input tokens:", w.total_prompt_tokens),
        _row("Total generated tokens:", trace.output_tokens),
        _row("Request throughput (req/s):", s["request_throughput"]),
    ]
    if s["goodput_req_s"] is not None:
        lines.append(_row("Request goodput (req/s):", s["goodput_req_s"]))
    total = (w.total_prompt_tokens + trace.output_tokens) / duration if duration > 0 else 0.0
    lines += [_row("Output token throughput (tok/s):", s["throughput_tok_s"]),
              _row("Total Token throughput (tok/s):", total)]
    for key, name, title in (("ttft", "TTFT", "Time to First Token"),
                             ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
                             ("itl", "ITL", "Inter-token Latency"), ("e2el", "E2EL", "End-to-end Latency")):
        lines += [_rule(title), _row(f"Mean {name} (ms):", s[f"{key}_ms_mean"]),
                  _row(f"Median {name} (ms):", s[f"{key}_ms_p50"]), _row(f"P90 {name} (ms):", s[f"{key}_ms_p90"]),
                  _row(f"P99 {name} (ms):", s[f"{key}_ms_p99"])]
    lines.append("=" * WIDTH)
    return "\n".join(lines)


def latency_table_columns(name: str, rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Columns (summary keys) and headings of a sweep under traffic: throughput, then latency percentiles."""
    cols = [name, "request_throughput", "throughput_tok_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99",
            "itl_ms_p99", "e2el_ms_p99", "preemptions"]
    heads = [name, "req/s", "tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "ITL p99 ms",
             "E2EL p99 ms", "preempt"]
    if any(r["goodput_req_s"] is not None for r in rows):
        cols.append("goodput_req_s")
        heads.append("goodput req/s")
    return cols, heads
