"""The log lines vLLM would print for this run, in a terminal: the startup capacity line once, then the
stats line every 10 s of the run, plus a one-sentence reading of what those fields say together.
The lines themselves come from `engine.logs`; this module only lays them out.
"""
from __future__ import annotations

import html

import numpy as np
import panel as pn
import param

from engine import Trace
from engine.logs import LOG_STATS_INTERVAL_S, periodic_log_line, serve_command, startup_error, startup_log_line
from explorable import runs
from explorable.assets import stylesheet
from explorable.state import ExplorableState

MAX_PERIODIC_LINES = 60  # a 10-minute run; longer ones show their first and last lines


def log_lines(trace: Trace) -> list[tuple[float | None, str]]:
    """(time in s or None for startup, line) in the order vLLM prints them."""
    refusal = startup_error(trace.config)
    lines: list[tuple[float | None, str]] = [(None, refusal)] if refusal else []
    lines.append((None, startup_log_line(trace.config)))
    times = np.arange(LOG_STATS_INTERVAL_S, trace.makespan_s, LOG_STATS_INTERVAL_S).tolist()
    if not times or times[-1] < trace.makespan_s:
        times.append(trace.makespan_s)  # the last partial interval, flushed at the end of the run
    if len(times) > MAX_PERIODIC_LINES:
        half = MAX_PERIODIC_LINES // 2
        times = times[:half] + times[-half:]
    lines += [(t, periodic_log_line(trace, t)) for t in times]
    return lines


def reading(trace: Trace, summary: dict) -> str:
    """What the three fields (Running, Waiting, Preemptions) diagnose, in one sentence."""
    cap = trace.config.max_num_seqs
    peak = summary["peak_batch"]
    full = float(trace.kv_usage.max()) if trace.num_passes else 0.0
    if summary["preemptions"] > 0:
        return ("Preemptions appear in the log: the scheduler admits more sequences than the cache can carry, and "
                "every eviction throws a prefill away. A higher --max-num-seqs cannot help; a lower one or a "
                "bigger pool can.")
    if peak < cap and full >= 0.9:
        return (f"Running never reaches --max-num-seqs ({peak} of {cap}) while the cache is nearly full: memory "
                "sets the batch here, not the cap.")
    if peak >= cap and full < 0.9:
        return (f"Running sits at --max-num-seqs ({cap}) with cache to spare: this is the rare case where the cap "
                "really binds and raising it would help.")
    if peak >= cap:
        return f"Running reaches --max-num-seqs ({cap}) just as the cache fills: cap and memory agree."
    return f"Running peaks at {peak} of {cap} slots without filling the cache: the queue ran dry first."


def _line_html(at: float | None, line: str) -> str:
    stamp = "startup" if at is None else f"+{at:,.0f} s"
    body = html.escape(line)
    body = body.replace("INFO", '<span class="lvl">INFO</span>', 1)
    body = body.replace("ERROR", '<span class="lvl preempt">ERROR</span>', 1)
    if "Preemptions:" in body:
        head, _, tail = body.partition("Preemptions:")
        count, sep, rest = tail.partition(",")
        body = f'{head}<span class="preempt">Preemptions:{count}</span>{sep}{rest}'
    return f'<div class="log-line"><span class="stamp">{stamp}</span>{body}</div>'


class LogView(pn.viewable.Viewer):
    """A terminal showing the startup line and the periodic stats lines for the current run."""

    state = param.ClassSelector(class_=ExplorableState)

    def __init__(self, **params):
        super().__init__(**params)
        self.pane = pn.pane.HTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()],
                                 css_classes=["log-pane"], margin=(0, 10))
        self.state.param.watch(self._update, "trace")
        self._update()

    def _update(self, *_):
        trace = self.state.trace
        if trace is None:
            return
        cfg = trace.config
        command = serve_command(cfg)
        note = ""
        if cfg.allocation == "reserve" or cfg.unit == "request":
            note = ('<div class="log-note"># vLLM has no reserve-up-front or per-request mode: these are the lines '
                    "its logger would print for this schedule.</div>")
        lines = "".join(_line_html(at, line) for at, line in log_lines(trace))
        machine = f"{runs.where_measured(trace)}, measured" if trace.measured else f"an {cfg.gpu}"
        self.pane.object = (
            f'<div class="terminal" data-log="vllm"><div class="terminal-bar"><span></span><span></span><span></span>'
            f'<b>vLLM log, {cfg.pool_gib:g} GiB of KV cache on {html.escape(machine)}</b></div>'
            f'<div class="terminal-body"><div class="cmd">{html.escape(command)}</div>{note}{lines}</div></div>'
            f'<p class="log-reading">{html.escape(reading(trace, self.state.summary))}</p>'
        )

    def __panel__(self):
        return self.pane
