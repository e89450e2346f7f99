"""Each chart in words: what a sighted reader sees in the lanes, the strips, the throughput curves and the
request-rate curves, with the numbers the readouts show (same figures, same formatting), for a reader who
cannot see the canvas. Pure functions of a run or of a curve's data, shared by every session as view data
(explorable.state.view_data), so the static build gets them in its state files as it gets the charts' data.
Each chart's data as a table, on demand, is explorable.views.data_tables.
"""
from __future__ import annotations

import html

import numpy as np

from engine import Event, Trace

FULL = 0.95  # KV cache use from which the strip reads as full (vLLM's own log rounds 95% and more to "full" too)


def _s(seconds: float) -> str:
    return f"{seconds:,.1f} s"


def _first_time(trace: Trace, mask: np.ndarray) -> float | None:
    hits = np.flatnonzero(mask)
    return float(trace.pass_start[hits[0]]) if len(hits) else None


def lanes_in_words(trace: Trace, thrashing: bool) -> str:
    """The lane chart: who waited, when the batch peaked and at what size, when the cache filled, how many
    requests were preempted and when, and whether the scheduler thrashed (`thrashing`: its lost work is drawn
    magenta, explorable.views.lanes.is_thrashing)."""
    s = trace.summary()
    cfg = trace.config
    n = trace.workload.num_requests
    peak, passes = s["peak_batch"], trace.num_passes
    said = [f"{n:,} lanes, one per request, from 0 to {_s(s['makespan_s'])}, when the last request finished."]
    if passes:
        at = _first_time(trace, trace.n_seqs == peak)
        said.append(f"The batch peaked at {peak:,} running requests (of {cfg.max_num_seqs:,} slots) at {_s(at)}.")
        full = _first_time(trace, trace.kv_usage >= FULL)
        use = 100 * float(trace.kv_usage.max())
        said.append(f"The KV cache filled ({FULL:.0%} used) at {_s(full)}." if full is not None else
                    f"The KV cache never filled: at most {use:.1f}% used.")
    preempted = trace.preemptions_per_request
    if s["preemptions"]:
        times = trace.pass_start[trace.event_pass[trace.event_kind == Event.PREEMPT]]
        colour = "magenta: the scheduler thrashes" if thrashing else "amber"
        said.append(f"{int((preempted > 0).sum()):,} requests were preempted, {s['preemptions']:,} preemptions in "
                    f"all, from {_s(float(times.min()))} to {_s(float(times.max()))}; their lost and redone work "
                    f"is drawn {colour}, and {s['recomputed_prompt_tokens']:,} prompt tokens were recomputed.")
    else:
        said.append("No request was preempted: every lane runs teal, with no work lost.")
    if s.get("prefix_cache_hit_tokens"):
        said.append(f"{s['prefix_cache_hit_tokens']:,} prompt tokens came from the prefix cache (light teal).")
    return " ".join(said)


def strips_in_words(trace: Trace) -> str:
    """The two strips under the lanes: batch size against the --max-num-seqs line, and KV cache use."""
    s = trace.summary()
    cfg = trace.config
    if not trace.num_passes:
        return "No pass ran."
    peak = s["peak_batch"]
    at = _first_time(trace, trace.n_seqs == peak)
    cap = ("reaching --max-num-seqs" if peak >= cfg.max_num_seqs else
           f"below --max-num-seqs {cfg.max_num_seqs:,}")
    kind = "reserved" if cfg.allocation == "reserve" else "used"
    use = 100 * float(trace.kv_usage.max())
    full = _first_time(trace, trace.kv_usage >= FULL)
    cache = (f"KV cache {kind}: {FULL:.0%} by {_s(full)}, at most {use:.1f}%" if full is not None else
             f"KV cache {kind}: at most {use:.1f}%")
    return (f"Batch size per pass: largest {peak:,} at {_s(at)}, {cap}; {s['mean_batch']:.1f} on average "
            f"over {trace.num_passes:,} passes. {cache}; held cache holding a token: "
            f"{100 * s['live_cache_fraction']:.1f}%.")


def curve_in_words(what: str, unit: str, data: dict[str, np.ndarray], current: float, fmt: str = "{:g}") -> str:
    """A throughput curve: where its peak is and where the reader stands on it."""
    x, y = np.asarray(data["x"], dtype=np.float64), np.asarray(data["y"], dtype=np.float64)
    ok = np.isfinite(y)
    if not ok.any():
        return f"Throughput against {what}: no setting along it can run."
    best = int(np.nanargmax(np.where(ok, y, -np.inf)))
    here = y[x == current]
    said = (f"Throughput against {what}, everything else as set: highest {y[best]:,.0f} tok/s at "
            f"{fmt.format(x[best])}{unit}")
    if len(here) and np.isfinite(here[0]):
        gap = (y[best] - here[0]) / y[best] if y[best] > 0 else 0.0
        where = "the highest" if gap < 0.005 else f"{100 * gap:.0f}% below the highest"
        said += f"; where you are, at {fmt.format(current)}{unit}: {here[0]:,.0f} tok/s, {where}"
    lowest = int(np.nanargmin(np.where(ok, y, np.inf)))
    said += f"; lowest {y[lowest]:,.0f} tok/s at {fmt.format(x[lowest])}{unit}."
    return said


def traffic_in_words(data: dict[str, np.ndarray], rate: float | None, slo: dict[str, float]) -> str:
    """The request-rate curves: up to which rate the server keeps up (serves what is offered), what it serves
    at most, and the p99 latencies at the reader's rate against the SLO targets."""
    rates, served = np.asarray(data["rate"]), np.asarray(data["served"])
    keeping = served >= 0.95 * rates
    knee = (f"keeps up with the offered rate up to about {rates[keeping].max():,.2f} req/s" if keeping.any() else
            "never keeps up with the offered rate")
    said = (f"Requests served against the offered rate, at {len(rates)} rates from {rates.min():,.2f} to "
            f"{rates.max():,.2f} req/s: the server {knee} and serves at most {np.nanmax(served):,.2f} req/s.")
    if rate is not None and len(rates):
        i = int(np.argmin(np.abs(np.log(rates / rate))))
        near = (f"At the point nearest your rate ({rates[i]:,.2f} req/s)" if abs(np.log(rates[i] / rate)) < 0.1 else
                f"Your rate, {rate:,.2f} req/s, lies beyond these rates; at the nearest, {rates[i]:,.2f} req/s")
        said += (f" {near}: p99 TTFT {data['ttft'][i]:,.0f} ms (target {slo['ttft']:,.0f} ms), p99 TPOT "
                 f"{data['tpot'][i]:,.1f} ms (target {slo['tpot']:,.0f} ms).")
    return said


def words_html(kind: str, text: str) -> str:
    """A chart's text alternative as the page shows it, under the chart."""
    return f'<p class="in-words" data-words="{kind}"><span class="in-words-head">In words:</span> {html.escape(text)}</p>'
