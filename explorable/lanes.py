"""The lane chart: one lane per request over time, coloured by what its time was spent on.

`lane_segments(trace)` is the colour rule, stated once: grey while a request waits (before admission,
and between an eviction and its readmission); teal while it runs without waste; amber for a run that a
preemption throws away (it ends in EV_PREEMPT) and for the recompute after readmission (EV_RESUME up to
EV_CAUGHT_UP); magenta for those same stretches when the scheduler is thrashing (`is_thrashing`).
`LaneChart` draws them with one hbar glyph over one ColumnDataSource, built once per page.
"""
from __future__ import annotations

import html
import os

import numpy as np
import panel as pn
import param
from bokeh.models import (
    ColumnDataSource, CustomJS, CustomJSHover, FixedTicker, HoverTool, Legend, LegendItem, LinearColorMapper, Range1d,
)
from bokeh.plotting import figure

from engine import Event, Trace
from explorable import palette, runs
from explorable.assets import stylesheet
from explorable.state import ExplorableState

# A request evicted this many times is thrashing; so is a run that evicts this many sequences for every
# one its batch ever held at once (its whole resident set replaced by eviction three times over).
# vLLM's newest-out rule rarely evicts one request repeatedly when requests are similar, so at the
# memory wall (2 GiB, 512 slots) the second clause is the one that fires.
THRASH_PREEMPTIONS = 3

# Order of events inside one pass: evictions happen first, then admissions, then end-of-pass outcomes.
_EVENT_RANK = np.zeros(6, dtype=np.int64)
_EVENT_RANK[[Event.PREEMPT, Event.ADMIT, Event.RESUME, Event.CAUGHT_UP, Event.FIRST_TOKEN,
             Event.FINISH]] = range(6)

# Rendering backend: canvas is fastest for a few thousand rectangles and needs no GPU in the browser.
BACKEND = os.environ.get("EXPLORABLE_BACKEND", "canvas")


def is_thrashing(trace: Trace) -> np.ndarray:
    """Per request: is its lost work drawn as thrashing (magenta) rather than ordinary loss (amber)?"""
    per_request = trace.preemptions_per_request
    peak = int(trace.n_seqs.max()) if trace.num_passes else 0
    run_thrashes = peak > 0 and int(per_request.sum()) >= THRASH_PREEMPTIONS * peak
    return (per_request >= THRASH_PREEMPTIONS) | bool(run_thrashes)


def lane_segments(trace: Trace) -> dict[str, np.ndarray]:
    """Every coloured stretch of every lane: y (request id), left/right (s), state (palette code), + hover.

    A request arrives at t = 0; it runs from the start of the pass that admits it until the start of the
    pass that evicts it (that pass runs without it) or the end of the pass it finishes in.
    """
    n = trace.workload.num_requests
    start, end = trace.pass_start, trace.pass_end
    events = trace.events
    order = np.lexsort((_EVENT_RANK[events[:, 2]], events[:, 0]))
    thrash = is_thrashing(trace)

    ys: list[int] = []
    lefts: list[float] = []
    rights: list[float] = []
    states: list[int] = []
    waiting_since = np.zeros(n)  # everyone is queued at t = 0
    running_since = np.full(n, np.nan)
    admitted_at: list[list[float]] = [[] for _ in range(n)]
    preempted_at: list[list[float]] = [[] for _ in range(n)]

    def add(r: int, t0: float, t1: float, state: int) -> None:
        if t1 > t0:
            ys.append(r)
            lefts.append(t0)
            rights.append(t1)
            states.append(state)

    lost = np.where(thrash, palette.THRASH, palette.LOST)
    for p, r, kind in events[order].tolist():
        if kind == Event.ADMIT or kind == Event.RESUME:
            add(r, waiting_since[r], start[p], palette.WAITING)
            running_since[r] = start[p]
            admitted_at[r].append(start[p])
        elif kind == Event.CAUGHT_UP:  # the recompute since readmission was redone work
            add(r, running_since[r], end[p], lost[r])
            running_since[r] = end[p]
        elif kind == Event.PREEMPT:  # everything since (re)admission is thrown away
            add(r, running_since[r], start[p], lost[r])
            waiting_since[r] = start[p]
            preempted_at[r].append(start[p])
        elif kind == Event.FINISH:
            add(r, running_since[r], end[p], palette.CLEAN)

    y = np.asarray(ys, dtype=np.uint16)
    admitted_text = np.array([_times(a) for a in admitted_at], dtype=object)
    preempted_text = np.array([f"{_times(a)} ({len(a)} time{'s' if len(a) > 1 else ''})" if a else "never"
                               for a in preempted_at], dtype=object)
    return {
        "y": y,
        "left": np.asarray(lefts, dtype=np.float32),
        "right": np.asarray(rights, dtype=np.float32),
        "state": np.asarray(states, dtype=np.uint8),
        "prompt": trace.workload.prompt_len[y].astype(np.int32),
        "output": trace.workload.output_len[y].astype(np.int32),
        "admitted": admitted_text[y].tolist(),
        "preempted": preempted_text[y].tolist(),
    }


def _times(ts: list[float]) -> str:
    return ", ".join(f"{t:.2f}" for t in ts) + " s"


def state_counts(segments: dict[str, np.ndarray]) -> dict[str, int]:
    """How many segments of each colour (the tests and the chart's caption use it)."""
    counts = np.bincount(segments["state"], minlength=len(palette.LANE_LABELS))
    return {name: int(c) for name, c in zip(("waiting", "clean", "lost", "thrash"), counts)}


def _empty_segments() -> dict[str, list]:
    return {k: [] for k in ("y", "left", "right", "state", "prompt", "output", "admitted", "preempted")}


class LaneChart(pn.viewable.Viewer):
    """The hero chart. Its figure is built once; each run replaces the source's data and the ranges."""

    state = param.ClassSelector(class_=ExplorableState)
    x_range = param.ClassSelector(class_=Range1d, doc="shared with the strip charts below")

    def __init__(self, **params):
        params.setdefault("x_range", Range1d(0, 1))
        super().__init__(**params)
        self.source = ColumnDataSource(_empty_segments())
        self.marks = ColumnDataSource({**_empty_segments(), "mid": []})  # lost stretches, flagged
        self.figure = self._build()
        self.caption = pn.pane.HTML("", css_classes=["lane-caption"], sizing_mode="stretch_width",
                                    margin=(4, 10, 0, 10), stylesheets=[stylesheet()])
        self._pane = pn.Column(
            self.caption,
            pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"),
            css_classes=["lane-chart"], sizing_mode="stretch_width", margin=0,
        )
        self.state.param.watch(self._update, "trace")
        self._update()

    def _build(self):
        self.y_range = Range1d(255.5, -0.5)  # request 0 at the top, as a queue reads
        fig = figure(
            height=330, sizing_mode="stretch_width", x_range=self.x_range, y_range=self.y_range,
            tools="xbox_zoom", toolbar_location=None, output_backend=BACKEND,
            min_border_left=72, min_border_right=12, min_border_top=4, min_border_bottom=4,
        )
        # No toolbar (it would shift this plot's frame off the strips' below): drag to zoom into a stretch
        # of time, double-click to see the whole run again. The strips share the time range.
        fig.js_on_event("doubletap", CustomJS(args={"r": self.x_range},
                                              code="r.start = r.reset_start; r.end = r.reset_end"))
        mapper = LinearColorMapper(palette=list(palette.LANE_COLOURS), low=-0.5, high=len(palette.LANE_COLOURS) - 0.5)
        bars = fig.hbar(y="y", left="left", right="right", height=1.0, source=self.source,
                        fill_color={"field": "state", "transform": mapper}, line_color=None,
                        hover_fill_alpha=1.0, hover_line_color=palette.INK, hover_line_width=1)
        # Lost work is often a few passes long: far under a pixel on a 20 s axis. A fixed-size marker at
        # its middle keeps it visible at full scale; zoom in and the bar itself shows the real extent.
        marks = fig.scatter(x="mid", y="y", source=self.marks, marker="square", size=7,
                            fill_color={"field": "state", "transform": mapper}, line_color="white", line_width=0.6)
        labels = "[" + ",".join(f"'{t}'" for t in palette.LANE_LABELS) + "]"
        fig.add_tools(HoverTool(
            renderers=[bars, marks], point_policy="follow_mouse",
            tooltips=[
                ("request", "@y  (@state{custom})"),
                ("prompt / output", "@prompt{0,0} / @output{0,0} tokens"),
                ("this stretch", "@left{0.00} to @right{0.00} s"),
                ("admitted at", "@admitted"),
                ("preempted at", "@preempted"),
            ],
            formatters={"@state": CustomJSHover(code=f"return {labels}[value]")},
        ))
        # Legend swatches from empty renderers: the data renderer colours by a mapper, not by field.
        items = []
        for colour, label in zip(palette.LANE_COLOURS, palette.LANE_LABELS):
            swatch = fig.hbar(y=[np.nan], left=[0.0], right=[0.0], height=1.0, fill_color=colour, line_color=None)
            items.append(LegendItem(label=label, renderers=[swatch]))
        fig.add_layout(Legend(items=items, orientation="horizontal", location="top_left", border_line_alpha=0,
                              label_text_font_size="12px", label_text_color=palette.INK, glyph_width=18,
                              padding=2, spacing=14, margin=0, background_fill_alpha=0), "above")
        fig.yaxis.axis_label = "request (arrival order)"
        # A model, built once: assigning a new ticker on every run would make Bokeh re-walk the document.
        self.y_ticker = FixedTicker(ticks=[0, 64, 128, 192, 255])
        fig.yaxis.ticker = self.y_ticker
        fig.xaxis.visible = False  # the strips underneath carry the shared time axis
        fig.ygrid.grid_line_color = None
        fig.xgrid.grid_line_color = palette.RULE
        fig.xgrid.grid_line_alpha = 0.6
        fig.outline_line_color = None
        fig.yaxis.axis_line_color = None
        fig.yaxis.major_tick_line_color = None
        fig.yaxis.minor_tick_line_color = None
        fig.yaxis.axis_label_text_font_style = "normal"
        fig.yaxis.axis_label_text_color = palette.MUTED
        fig.yaxis.major_label_text_color = palette.MUTED
        return fig

    def _update(self, *_):
        trace = self.state.trace
        if trace is None:
            return
        segments = lane_segments(trace)
        n = trace.workload.num_requests
        counts = state_counts(segments)
        s = self.state.summary
        kind = f"measured on {html.escape(runs.where_measured(trace))}" if trace.measured else "simulated"
        lost = segments["state"] >= palette.LOST
        marks = {k: (v[lost] if isinstance(v, np.ndarray) else [x for x, keep in zip(v, lost) if keep])
                 for k, v in segments.items()}
        marks["mid"] = (marks["left"] + marks["right"]) / 2
        with pn.io.hold():
            self.source.data = segments
            self.marks.data = marks
            end = float(trace.makespan_s) or 1.0
            self.x_range.update(start=0.0, end=end, reset_start=0.0, reset_end=end)
            self.y_range.update(start=n - 0.5, end=-0.5)
            self.y_ticker.ticks = sorted({0, n // 4, n // 2, 3 * n // 4, n - 1})
            self.caption.object = (
                f'<div class="chart-title">Every request, over time <span class="muted">'
                f"({n} requests, all queued at 0 s, served to the last in "
                f'<b data-value="{s["makespan_s"]:.3f}">{s["makespan_s"]:.1f} s</b>, {kind})</span></div>'
            )
            self.caption.css_classes = ["lane-caption"] + [f"has-{k}" for k, c in counts.items() if c]

    def __panel__(self):
        return self._pane
