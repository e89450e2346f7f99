"""The log lines vLLM would print for this run, in a terminal: the startup capacity line once, then the
stats line every 10 s of the run, plus a one-sentence reading of what those fields say together.
The lines themselves come from `engine.logs`; this module only lays them out.
"""
from __future__ import annotations

import html

from engine import Trace
from engine.config import largest_pool_gib, pool_beyond_gpu
from engine.logs import (memory_log_lines, periodic_log, periodic_stats, prefix_caching_note, refusal_log_lines,
                         serve_command, serve_command_notes, startup_error, startup_log_line)
from engine.memory import profile_for
from engine.presets import GPU_MEMORY_UTILIZATION
from explorable.state import runs
from explorable.views.assets import stylesheet
from explorable.state.control_specs import PRODUCTION_NAMES
from explorable.patches.text_updates import TextHTML
from explorable.state.view_data import derived
from explorable.views.state_view import StateView

MAX_PERIODIC_LINES = 60  # a 10-minute run; longer ones show their first and last lines


def log_lines(trace: Trace) -> list[tuple[float | None, str]]:
    """(time in s or None for startup, line) in the order vLLM prints them.

    Each stats line covers the time since the one before, so their preemptions add up to the run's. A run
    too long to show whole keeps its first and last lines and one `#` line that accounts for the rest.
    """
    cfg = trace.config
    refusal = startup_error(cfg)
    lines: list[tuple[float | None, str]] = [(None, line) for line in memory_log_lines(cfg)]
    lines += [(None, refusal)] if refusal else []
    lines.append((None, startup_log_line(cfg)))
    # Refused requests are answered as they come, before the scheduler sees them: at 0 s here.
    lines += [(0.0, line) for line in refusal_log_lines(cfg)]
    periodic = periodic_log(trace)
    if len(periodic) > MAX_PERIODIC_LINES:
        half = MAX_PERIODIC_LINES // 2
        hidden = periodic[half:-half]
        since, until = periodic[half - 1][0], hidden[-1][0]
        preempted = periodic_stats(trace, until, since_s=since)["preemptions"]  # the hidden windows, joined
        gap = (f"# {len(hidden)} lines not shown (+{since:,.0f} s to +{until:,.0f} s)"
               + (f"; between them, Preemptions: {preempted}" if preempted else ""))
        periodic = periodic[:half] + [(until, gap)] + periodic[-half:]
    return lines + periodic


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
    if line.startswith("#"):  # our comment, not a line vLLM prints
        return f'<div class="log-note">{html.escape(line)}</div>'
    stamp = "startup" if at is None else f"+{at:,.0f} s"
    body = html.escape(line)
    body = body.replace("INFO", '<span class="lvl">INFO</span>', 1)
    body = body.replace("ERROR", '<span class="lvl preempt">ERROR</span>', 1)
    if "Preemptions:" in body:
        head, _, tail = body.partition("Preemptions:")
        count, sep, rest = tail.partition(",")
        body = f'{head}<span class="preempt">Preemptions:{count}</span>{sep}{rest}'
    return f'<div class="log-line"><span class="stamp">{stamp}</span>{body}</div>'


def log_html(trace: Trace) -> str:
    """The terminal's HTML for a run: command, notes, log lines and the reading (shared by every session)."""
    cfg = trace.config
    command = serve_command(cfg)
    notes = serve_command_notes(cfg) + [prefix_caching_note(cfg)]
    if cfg.allocation == "reserve" or cfg.unit == "request":
        modes = [f"{label} is {PRODUCTION_NAMES[value]}" for label, value in
                 (("reserving up front", cfg.allocation), ("the per-request unit", cfg.unit))
                 if value in ("reserve", "request")]
        notes.append("# vLLM has no such mode (" + "; ".join(modes) + "): these are the lines vLLM's logger "
                     "would print for this schedule")
    if pool_beyond_gpu(cfg):
        p = profile_for(cfg, GPU_MEMORY_UTILIZATION)
        gib = 2**30
        notes.append(f"# no {cfg.gpu} holds this pool beside {cfg.model}'s weights: vLLM would size it at most "
                     f"about {largest_pool_gib(cfg):.1f} GiB there ({GPU_MEMORY_UTILIZATION} x "
                     f"{p.total_memory / gib:.2f} GiB by its default --gpu-memory-utilization, less "
                     f"{p.weights_memory / gib:.1f} GiB of weights, {p.activation_peak / gib:.1f} GiB of activations "
                     f"and {p.non_torch_memory / gib:.1f} GiB outside PyTorch)")
    note = "".join(f'<div class="log-note">{html.escape(n)}</div>' for n in notes)
    lines = "".join(_line_html(at, line) for at, line in log_lines(trace))
    machine = f"{runs.where_measured(trace)}, measured" if trace.measured else f"an {cfg.gpu}"
    return (
        f'<div class="terminal" data-log="vllm"><div class="terminal-bar"><span></span><span></span><span></span>'
        f'<b>vLLM log, {cfg.kv_cache_gib:,.1f} GiB of KV cache{_per_gpu(cfg)} on {html.escape(machine)}</b></div>'
        f'<div class="terminal-body" tabindex="0" role="region" aria-label="vLLM log lines"><div class="cmd">{html.escape(command)}</div>{note}{lines}</div></div>'
        f'<p class="log-reading">{html.escape(reading(trace, trace.summary()))}</p>'
    )


def _per_gpu(cfg) -> str:
    return f" per GPU, {cfg.tensor_parallel_size} GPUs" if cfg.tensor_parallel_size > 1 else ""


class LogView(StateView):
    """A terminal showing the startup line and the periodic stats lines for the current run."""

    def build(self) -> None:
        self.pane = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()],
                             css_classes=["log-pane"], margin=(0, 10))

    def refresh(self) -> None:
        trace = self.state.trace
        if trace is None:
            return
        self.pane.object = derived("logs", trace, log_html)

    def __panel__(self):
        return self.pane
