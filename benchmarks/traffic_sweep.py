"""A 12-point request-rate sweep (the explorable's throughput / latency curve): time and the table.

    python benchmarks/traffic_sweep.py [--repeats N]

Goal (issue 12): the whole sweep, every point simulated and summarised (TTFT/TPOT/ITL/E2EL percentiles),
in under 100 ms warm on the default settings.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import RunConfig  # noqa: E402
from engine.rate_sweep import default_rates, sweep_rates  # noqa: E402


def sweep(cfg: RunConfig) -> list[dict]:
    """What the explorable's curve does on a change of settings: find the rates, run all twelve."""
    return sweep_rates(cfg, default_rates(cfg))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    cfg = RunConfig()
    rows = sweep(cfg)  # compile / warm
    times, cpu = [], []
    for _ in range(args.repeats):
        t, c = time.perf_counter(), time.process_time()
        sweep(cfg)
        times.append(time.perf_counter() - t)
        c1 = time.process_time()
        sweep_rates(cfg, default_rates(cfg), workers=1)  # one thread: its CPU time is the work itself
        cpu.append(time.process_time() - c1)
    print(f"{'rate':>7} {'req/s':>6} {'tok/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'TPOT p99':>9} "
          f"{'passes':>7}")
    for s in rows:
        print(f"{s['request_rate']:>7.2f} {s['request_throughput']:>6.2f} {s['throughput_tok_s']:>7,.0f} {s['ttft_ms_p50']:>9,.1f} "
              f"{s['ttft_ms_p99']:>9,.1f} {s['tpot_ms_p50']:>9.1f} {s['tpot_ms_p99']:>9.1f} {s['passes']:>7,}")
    med, best = statistics.median(times), min(times)
    print(f"\n12-point request-rate sweep (256 requests each, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}): wall median {med * 1e3:.1f} ms, best {best * 1e3:.1f} ms over {args.repeats} "
          f"repeats (goal < 100 ms); the same sweep on one thread costs {statistics.median(cpu) * 1e3:.1f} ms of CPU")


if __name__ == "__main__":
    main()
