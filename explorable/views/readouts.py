"""The readouts: six large numbers (seven with prefix caching on) from the run's summary, each with its change against the setting before.

`readouts(summary, previous, cfg)` is pure (what the numbers are and which way is better); `Readouts`
renders them as one HTML pane whose elements carry stable data attributes for tests and styling:
`[data-readout=<key>] .readout-value[data-value]`.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

import panel as pn

from engine import RunConfig
from engine.latency import good_requests
from explorable.views.assets import keep_flags_whole, stylesheet
from explorable.views.state_view import StateView
from explorable.patches.text_updates import TextHTML


@dataclass(frozen=True)
class Readout:
    key: str
    label: str
    value: float
    text: str  # the large number
    beside: str  # small text beside it (the cap, a share)
    delta: str  # change against the previous setting, '' when there is none
    verdict: str  # 'better', 'worse', 'same' or ''


@dataclass(frozen=True)
class Change:
    """How a readout says its change against the setting before: the number format (Python's `{:,.<decimals>f}`,
    without the comma where `comma` is false), the unit after it, and which way is better (None: neither)."""
    decimals: int
    comma: bool
    unit: str
    higher_is_better: bool | None

    def number(self, x: float) -> str:
        return format(x, f"{',' if self.comma else ''}.{self.decimals}f")


# Each readout's change, declared once: the page's readouts and the static build's script (which says the change
# between any two of its states from their summaries, in the same formats) both read it.
CHANGES: dict[str, Change] = {
    "throughput_tok_s": Change(0, True, " tok/s", True),
    "throughput_per_gpu_tok_s": Change(0, True, " tok/s", True),
    "peak_batch": Change(0, True, "", None),
    "mean_batch": Change(1, True, "", None),
    "preemptions": Change(0, True, "", False),
    "recomputed_prompt_tokens": Change(0, True, "", False),
    "live_cache_fraction": Change(1, False, " pts", True),  # the fraction in percent: a change in points
    "refused_requests": Change(0, True, "", False),
    "prefix_cache_hit_tokens": Change(0, True, "", True),
    "ttft_ms_p50": Change(1, True, " ms", False), "ttft_ms_p99": Change(1, True, " ms", False),
    "tpot_ms_p50": Change(1, True, " ms", False), "tpot_ms_p99": Change(1, True, " ms", False),
    "goodput_req_s": Change(2, True, " req/s", True),
}
# Readouts whose value is the summary's times this (the rest show the summary's own number).
PERCENT = {"live_cache_fraction": 100}


def _delta(key: str, now: float, before: float | None) -> tuple[str, str]:
    if before is None:
        return "", ""
    c, change = CHANGES[key], now - before
    if abs(change) < 1e-9 or c.number(abs(change)) == c.number(0):
        return "no change", "same"
    sign = "+" if change > 0 else "\u2212"
    text = f"{sign}{c.number(abs(change))}{c.unit}"
    if c.higher_is_better is None:
        return text, ""
    return text, "better" if (change > 0) == c.higher_is_better else "worse"


def readouts(summary: dict, previous: dict | None, cfg: RunConfig, measured: bool = False) -> list[Readout]:
    """The six readouts, in the order the article refers to them (the largest batch is the second).
    For a measured run the baseline is the simulation of the same setting, and throughput names it."""
    prompt_total = int(cfg.build_workload().prompt_len.sum())
    prev = previous or {}

    def get(key):
        return prev.get(key) if previous else None

    rows = []

    def add(key, label, value, text, beside):
        before = get(key)
        if before is not None:
            before *= PERCENT.get(key, 1)
        delta, verdict = _delta(key, value, before)
        rows.append(Readout(key, label, float(value), text, beside, delta, verdict))

    tput = summary["throughput_tok_s"]
    predicted = f"simulated {prev['throughput_tok_s']:,.0f}" if measured and previous else ""
    gpus = cfg.num_gpus
    node = f"{gpus} GPUs together" if gpus > 1 else ""
    add("throughput_tok_s", "output tokens/s", tput, f"{tput:,.0f}", predicted or node)
    if gpus > 1:  # sharding buys concurrency and costs GPUs: both figures, side by side
        each = summary["throughput_per_gpu_tok_s"]
        add("throughput_per_gpu_tok_s", "output tokens/s per GPU", each, f"{each:,.0f}", f"of {gpus} GPUs")
    add("peak_batch", "largest batch", summary["peak_batch"], f"{summary['peak_batch']:,}",
        f"of {cfg.max_num_seqs:,} slots")
    add("mean_batch", "mean batch per pass", summary["mean_batch"], f"{summary['mean_batch']:.1f}", "")
    add("preemptions", "preemptions", summary["preemptions"], f"{summary['preemptions']:,}", "")
    rec = summary["recomputed_prompt_tokens"]
    add("recomputed_prompt_tokens", "prompt tokens recomputed", rec, f"{rec:,}",
        f"{100 * rec / prompt_total:.1f}% of {prompt_total:,}")
    live = PERCENT["live_cache_fraction"] * summary["live_cache_fraction"]
    add("live_cache_fraction", "held cache holding a token", live, f"{live:.1f}%", "")
    refused = summary.get("refused_requests", 0)
    if cfg.max_model_len is not None or refused:
        add("refused_requests", "requests refused", refused, f"{refused:,}",
            f"longer than --max-model-len {cfg.effective_max_model_len:,}")
    if cfg.enable_prefix_caching and "prefix_cache_hit_tokens" in summary:
        hits, again = summary["prefix_cache_hit_tokens"], summary["prefix_cache_readmission_hit_tokens"]
        rate = 100 * summary["prefix_cache_hit_rate"]
        add("prefix_cache_hit_tokens", "prompt tokens served from cache", hits, f"{hits:,}",
            f"hit rate {rate:.1f}%; {again:,} on readmission after an eviction")
    return rows


def traffic_readouts(summary: dict, previous: dict | None, goodput: float, previous_goodput: float | None,
                     slo: dict[str, float], measured: bool = False) -> list[Readout]:
    """What a user waiting on the server sees, for traffic that arrives over time: TTFT and TPOT at the median
    and at p99 (lower is better), and goodput, the requests per second that met both SLO targets. A measured
    run names the simulation of the same setting beside each figure."""
    rows = []
    for key, label in (("ttft_ms_p50", "TTFT p50"), ("ttft_ms_p99", "TTFT p99"), ("tpot_ms_p50", "TPOT p50"),
                       ("tpot_ms_p99", "TPOT p99")):
        value = summary[key]
        target = slo["ttft" if key.startswith("ttft") else "tpot"]
        beside = f"target {target:,.0f} ms" + (", missed" if value > target else "")
        if measured and previous:
            beside = f"simulated {_ms(previous[key])}; " + beside
        delta, verdict = _delta(key, value, previous.get(key) if previous else None)
        rows.append(Readout(key, label, float(value), _ms(value), beside, delta, verdict))
    share = goodput / summary["request_throughput"] if summary["request_throughput"] else 0.0
    delta, verdict = _delta("goodput_req_s", goodput, previous_goodput)
    rows.append(Readout("goodput_req_s", "goodput (req/s meeting both targets)", goodput, f"{goodput:,.2f}",
                        f"{100 * share:.0f}% of {summary['request_throughput']:,.2f} req/s served", delta, verdict))
    return rows


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms"


def delta_cell(r: Readout) -> str:
    """A readout's change against the setting before (the static build swaps just these cells in)."""
    return f'<div class="readout-delta {r.verdict}">{html.escape(r.delta) or "&nbsp;"}</div>'


def render(rows: list[Readout], stale: bool, measured: bool) -> str:
    cards = []
    for r in rows:
        cards.append(
            f'<div class="readout" data-readout="{r.key}">'
            f'<div class="readout-label">{html.escape(r.label)}</div>'
            f'<div class="readout-main"><span class="readout-value" data-value="{r.value:.6g}">{r.text}</span>'
            f'<span class="readout-beside">{keep_flags_whole(html.escape(r.beside))}</span></div>'
            f"{delta_cell(r)}</div>"
        )
    classes = "readouts" + (" stale" if stale else "") + (" measured" if measured else "")
    return f'<div class="{classes}">{"".join(cards)}</div>'


# A pane whose text a screen reader says when it changes, politely (after what it is saying), whole.
LIVE_REGION = {"aria-live": "polite", "aria-atomic": "true"}

# The compact results bar's four (explorable.page.layout keeps it in sight beside the controls on a narrow
# screen): the figures the course's experiments turn on, by their readout keys, with short labels.
BAR_LABELS = {"throughput_tok_s": "tok/s", "peak_batch": "largest batch", "preemptions": "preemptions",
              "recomputed_prompt_tokens": "recomputed"}


def bar_html(rows: list[Readout], stale: bool, measured: bool) -> str:
    """The results bar: the four figures of BAR_LABELS as the readouts show them, in one compact row.
    Its elements carry `data-result`, not `data-readout`: the readout cards stay the one place of each figure."""
    cells = []
    for r in rows:
        if r.key not in BAR_LABELS:
            continue
        cap = f'<small>/{r.beside.split()[1]}</small>' if r.key == "peak_batch" and r.beside else ""
        cells.append(f'<div data-result="{r.key}"><b>{r.text}{cap}</b>{html.escape(BAR_LABELS[r.key])}</div>')
    classes = "results" + (" stale" if stale else "") + (" measured" if measured else "")
    return f'<div class="{classes}" role="group" aria-label="results">{"".join(cells)}</div>'


class Readouts(StateView):
    """Large numbers with deltas; greyed out while the controls describe a setting that cannot run."""

    watches = ("trace", "run_error", "slo_ttft_ms", "slo_tpot_ms")

    def build(self) -> None:
        # Each pane is a polite live region: its text is replaced once per update, when the whole update has
        # arrived, so a screen reader says the new figures once (label, number, what is beside it, change).
        live = dict(html_attributes=LIVE_REGION)
        self.pane = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()],
                             css_classes=["readouts-pane", "run-readouts"], margin=(4, 10), **live)
        self.error = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()], visible=False,
                              css_classes=["run-error"], margin=(0, 10), **live)
        self.traffic = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()],
                                css_classes=["readouts-pane", "traffic-readouts"], margin=(0, 10), visible=False,
                                **live)
        # The compact bar, placed by the page beside the controls (it repeats figures the cards say: not live).
        self.bar = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()], css_classes=["results-bar"],
                            margin=0)
        self._previous_goodput: tuple | None = None  # (trace, goodput) of the run before, for the delta

    def refresh(self) -> None:
        s = self.state
        if s.trace is None:
            return
        rows = readouts(s.summary, s.previous_summary, s.config, measured=s.trace.measured)
        with pn.io.hold():
            self.pane.object = render(rows, stale=bool(s.run_error), measured=s.trace.measured)
            self.bar.object = bar_html(rows, stale=bool(s.run_error), measured=s.trace.measured)
            self.error.object = (
                f'<div class="notice error" data-notice="run-error"><b>This setting cannot run.</b> '
                f"{html.escape(s.run_error)}. The numbers below are from the last setting that could.</div>"
            )
            self.error.visible = bool(s.run_error)
            self._update_traffic()

    def _update_traffic(self) -> None:
        s = self.state
        arriving = s.trace.arrives_over_time
        self.traffic.visible = arriving
        if not arriving:
            return
        good = float(good_requests(s.trace.timing(), s.slo_targets).sum()) / s.trace.makespan_s
        before = self._previous_goodput
        previous = s.previous_summary if s.previous_summary and "ttft_ms_p50" in s.previous_summary else None
        rows = traffic_readouts(s.summary, previous, good,
                                before[1] if before and before[0] is not s.trace else None, s.slo_targets,
                                measured=s.trace.measured)
        self._previous_goodput = (s.trace, good)
        self.traffic.object = render(rows, stale=bool(s.run_error), measured=s.trace.measured)

    def __panel__(self):
        return pn.Column(self.error, self.pane, self.traffic, sizing_mode="stretch_width", margin=0)
