"""The lane chart: one lane per request over time, coloured by what its time was spent on.

`lane_segments(trace)` is the colour rule, stated once: grey while a request waits (before admission,
and between an eviction and its readmission); teal while it runs without waste; amber for a run that a
preemption throws away (it ends in EV_PREEMPT) and for the recompute after readmission (EV_RESUME up to
EV_CAUGHT_UP); magenta for those same stretches when the scheduler is thrashing (`is_thrashing`); with
prefix caching, light teal for the part of a (re)admission's prefill served from cache (`_cached_share`).
`LaneChart` draws them with one hbar glyph over one ColumnDataSource, built once per page.
"""
from __future__ import annotations

import html
import os

import numpy as np
import panel as pn
import param
from bokeh.models import (
    CDSView, ColumnDataSource, CustomJS, CustomJSFilter, CustomJSHover, CustomJSTransform, FixedTicker, HoverTool,
    LinearColorMapper, Range1d,
)
from bokeh.plotting import figure

from engine import Event, Trace
from explorable.views import palette
from explorable.views.data_tables import table_toggle
from explorable.views.in_words import lanes_in_words, words_html
from explorable.state import runs
from explorable.views.assets import stylesheet
from explorable.views.glyphs import without_unused_variants
from explorable.views.sources import set_data
from explorable.patches.text_updates import TextHTML
from explorable.state.time_grid import snap, time_quantum
from explorable.state.view_data import derived
from explorable.views.state_view import StateView

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


# What a screen can show: a lane chart is at most about 2,000 px wide, so a run with more segments than
# this has many narrower than a pixel; those are merged (see `thin_segments`) before they are sent.
MAX_SEGMENTS = 20_000
SCREEN_COLUMNS = 2_000
# A request's hover lists at most this many admission / eviction times (first ones and the last), with
# the count, so a request evicted hundreds of times does not send kilobytes of text.
MAX_LISTED_TIMES = 4


def _walk(trace: Trace) -> tuple[dict[str, np.ndarray], list[list[float]], list[list[float]]]:
    """The lanes' segments, and each request's admission and eviction times, from the trace's events."""
    n = trace.workload.num_requests
    start, end = trace.pass_start, trace.pass_end
    order = np.lexsort((_EVENT_RANK[trace.event_kind], trace.event_pass))
    thrash = is_thrashing(trace)

    ys: list[int] = []
    lefts: list[float] = []
    rights: list[float] = []
    states: list[int] = []
    waiting_since = trace.arrival_s.copy()  # blank before a request arrives (all at 0 s unless traffic)
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
    share = _cached_share(trace)[order].tolist()
    from_cache = np.zeros(n)  # share of the prefill stretch now open that came from cache

    def cached_part(r: int, t1: float) -> None:
        # Cached tokens cost no compute: the lane gives them their share of the stretch's width (tokens, not
        # time), so the computed part (teal, or amber when it is recompute) shrinks by what the cache refunded.
        if from_cache[r] > 0:
            split = running_since[r] + from_cache[r] * (t1 - running_since[r])
            add(r, running_since[r], split, palette.CACHED)
            running_since[r], from_cache[r] = split, 0.0

    passes, requests, kinds = (column[order].tolist() for column in
                               (trace.event_pass, trace.event_request, trace.event_kind))
    for p, r, kind, cached in zip(passes, requests, kinds, share):
        if kind == Event.ADMIT or kind == Event.RESUME:
            add(r, waiting_since[r], start[p], palette.WAITING)
            running_since[r] = start[p]
            from_cache[r] = cached
            admitted_at[r].append(start[p])
        elif kind == Event.FIRST_TOKEN:  # a fresh admission's prefill is done
            cached_part(r, end[p])
        elif kind == Event.CAUGHT_UP:  # the recompute since readmission was redone work
            cached_part(r, end[p])
            add(r, running_since[r], end[p], lost[r])
            running_since[r] = end[p]
        elif kind == Event.PREEMPT:  # everything since (re)admission is thrown away
            cached_part(r, start[p])
            add(r, running_since[r], start[p], lost[r])
            waiting_since[r] = start[p]
            preempted_at[r].append(start[p])
        elif kind == Event.FINISH:
            add(r, running_since[r], end[p], palette.CLEAN)

    # Lane by lane, in time order: each column then changes little from one segment to the next (a lane's
    # next segment starts where the last ended), which the static build's files compress far better.
    order = np.lexsort((lefts, ys))
    segments = {
        "y": np.asarray(ys, dtype=np.uint16)[order],
        "left": np.asarray(lefts, dtype=np.float32)[order],
        "right": np.asarray(rights, dtype=np.float32)[order],
        "state": np.asarray(states, dtype=np.uint8)[order],
    }
    return segments, admitted_at, preempted_at


def _cached_share(trace: Trace) -> np.ndarray:
    """Per event: for an ADMIT, the share of the prompt served from cache; for a RESUME, the share of what it
    had to rebuild (cached plus recomputed; a request resumed k times is charged its recompute evenly)."""
    cached = trace.event_cached.astype(np.float64)
    out = np.zeros(len(cached))
    if not cached.any():
        return out
    r, kind = trace.event_request, trace.event_kind
    admit, resume = kind == Event.ADMIT, kind == Event.RESUME
    prompt = trace.workload.prompt_len.astype(np.float64)
    out[admit] = cached[admit] / np.maximum(prompt[r[admit]], 1.0)
    resumes = np.bincount(r[resume], minlength=trace.workload.num_requests).astype(np.float64)
    redone = trace.recomputed_per_request.astype(np.float64) / np.maximum(resumes, 1.0)
    out[resume] = cached[resume] / np.maximum(cached[resume] + redone[r[resume]], 1.0)
    return np.clip(out, 0.0, 1.0)


def lane_segments(trace: Trace) -> dict[str, np.ndarray]:
    """Every coloured stretch of every lane: y (request id), left/right (s), state (palette code).

    A request arrives at t = 0; it runs from the start of the pass that admits it until the start of the
    pass that evicts it (that pass runs without it) or the end of the pass it finishes in.
    """
    return _walk(trace)[0]


def request_details(trace: Trace) -> dict[str, dict[str, np.ndarray]]:
    """Per request, what its hover says, as numbers the browser formats (`HOVER_JS`): "rows" (row r is request
    r) and "times" (each request's listed admission times, then its listed eviction times, from row `first`).
    Sent once per run for the hover, instead of once per segment."""
    _, admitted_at, preempted_at = _walk(trace)
    return _details(trace, admitted_at, preempted_at)


def _details(trace: Trace, admitted_at, preempted_at) -> dict[str, dict[str, np.ndarray]]:
    listed = [_listed(a) + _listed(p) for a, p in zip(admitted_at, preempted_at)]
    t = trace.timing()
    cached = {}
    for kind, name in ((Event.ADMIT, "cached_admit"), (Event.RESUME, "cached_resume")):
        mask = trace.event_kind == kind
        cached[name] = np.bincount(trace.event_request[mask], weights=trace.event_cached[mask],
                                   minlength=trace.workload.num_requests).astype(np.int32)
    rows = {
        "prompt": trace.workload.prompt_len.astype(np.int32),
        "output": trace.workload.output_len.astype(np.int32),
        "arrival": _hundredths(t.arrival.tolist()),
        "ttft": _tenths_ms(t.ttft.tolist()), "tpot": _tenths_ms(t.tpot.tolist()), "itl": _tenths_ms(t.worst_itl.tolist()),
        "admitted": np.asarray([len(a) for a in admitted_at], dtype=np.int32),
        "preempted": np.asarray([len(p) for p in preempted_at], dtype=np.int32),
        "first": np.cumsum([0] + [len(x) for x in listed[:-1]]).astype(np.int32),
        **cached,
    }
    return {"rows": rows, "times": {"t": _hundredths([x for xs in listed for x in xs])}}


def _listed(ts: list[float]) -> list[float]:
    """The times a hover lists: all, or the first few and the last (`HOVER_JS` puts '...' between)."""
    return ts if len(ts) <= MAX_LISTED_TIMES else [*ts[:MAX_LISTED_TIMES - 1], ts[-1]]


def _hundredths(seconds: list[float]) -> np.ndarray:
    """Times in hundredths of a second, rounded as Python's '.2f' rounds (the hover shows them so)."""
    return np.asarray([int(f"{s:.2f}".replace(".", "")) for s in seconds], dtype=np.int32)


def _tenths_ms(seconds: list[float]) -> np.ndarray:
    """Durations in tenths of a millisecond, rounded as shown: to the millisecond from 0.1 s, to a tenth below;
    -1 for none (a request that never produced a token)."""
    out = [-1 if not np.isfinite(s) else 10 * int(f"{s * 1e3:.0f}") if s >= 0.1 else
           int(f"{s * 1e3:.1f}".replace(".", "")) for s in seconds]
    return np.asarray(out, dtype=np.int32)


# The hover text of request `value`, formatted from `rows` and `times` (request_details) in the browser.
HOVER_JS = """
    const d = rows.data, t = times.data.t, r = value;
    if (d.prompt == null || r >= d.prompt.length) return `request ${r}`;
    const n = (x) => Number(x).toLocaleString('en-US');
    const s = (k) => `${Math.floor(k / 100)}.${String(k % 100).padStart(2, '0')}`;
    const ms = (q) => q < 0 ? '-' : q >= 1000 ? `${n(q / 10)} ms` : `${Math.floor(q / 10)}.${q % 10} ms`;
    const list = (at, count) => {
      const shown = Array.from(t.slice(at, at + Math.min(count, MAX)), s);
      if (count > MAX) shown.splice(MAX - 1, 0, '...');
      return `${shown.join(', ')} s`;
    };
    const admits = Math.min(d.admitted[r], MAX), evictions = d.preempted[r];
    const evicted = evictions ? `${list(d.first[r] + admits, evictions)} (${evictions} time${evictions > 1 ? 's' : ''})`
                              : 'never';
    const cached = [[d.cached_admit[r], 'at admission'], [d.cached_resume[r], 'on readmission']]
      .filter(([k]) => k > 0).map(([k, when]) => `${n(k)} tokens ${when}`);
    return `request ${r}: ${n(d.prompt[r])} prompt / ${n(d.output[r])} output tokens\n` +
           `arrived at ${s(d.arrival[r])} s; TTFT ${ms(d.ttft[r])}, TPOT ${ms(d.tpot[r])}, worst ITL ${ms(d.itl[r])}\n` +
           `admitted at ${list(d.first[r], d.admitted[r])}\npreempted at ${evicted}` +
           (cached.length ? `\nfrom cache: ${cached.join(', ')}` : '');
""".replace("MAX", str(MAX_LISTED_TIMES))


def thin_segments(segments: dict[str, np.ndarray], end: float, max_segments: int = MAX_SEGMENTS,
                  columns: int = SCREEN_COLUMNS) -> dict[str, np.ndarray]:
    """At most about `max_segments`: when there are more, the segments of a lane that start in the same
    1/`columns` of the run are drawn as one, spanning them all, in the most severe of their colours (lost
    work outranks running, running outranks waiting), so what a pixel column shows stays what happened in it.
    """
    if len(segments["y"]) <= max_segments or end <= 0:
        return segments
    y, left, right, state = (segments[k] for k in ("y", "left", "right", "state"))
    column = np.minimum((left.astype(np.float64) / end * columns).astype(np.int64), columns - 1)
    key = y.astype(np.int64) * columns + column
    order = np.lexsort((left, key))
    key = key[order]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    severity = np.asarray(palette.SEVERITY, dtype=np.uint8)
    worst = np.maximum.reduceat(severity[state[order]], first)
    return {
        "y": y[order][first],
        "left": np.minimum.reduceat(left[order], first),
        "right": np.maximum.reduceat(right[order], first),
        "state": np.argsort(palette.SEVERITY).astype(np.uint8)[worst],
    }


def legend_html(cached: bool = False) -> str:
    """The lane colours with what they mean, as wrapping HTML ("from cache" only where the run caches)."""
    shown = len(palette.LANE_COLOURS) if cached else palette.CACHED
    items = "".join(
        f'<span class="legend-item"><span class="swatch pattern-{i}" style="background-color:{colour}; color:{hatch}">'
        f'</span>{html.escape(label)}</span>'
        for i, (colour, hatch, label) in enumerate(zip(palette.LANE_COLOURS, palette.HATCH_COLOURS,
                                                        palette.LANE_LABELS)) if i < shown)
    return f'<div class="legend" data-legend="lanes">{items}</div>'


def state_counts(segments: dict[str, np.ndarray]) -> dict[str, int]:
    """How many segments of each colour (the tests and the chart's caption use it)."""
    counts = np.bincount(segments["state"], minlength=len(palette.LANE_LABELS))
    return {name: int(c) for name, c in zip(("waiting", "clean", "lost", "thrash", "cached"), counts)}


def lane_view_data(trace: Trace) -> dict:
    """Everything the lane chart shows for a run: the (thinned) segments, the flagged lost stretches, the
    per-request hover details and the caption. A pure function of the trace, shared by every session."""
    all_segments, admitted_at, preempted_at = _walk(trace)
    counts = state_counts(all_segments)
    segments = thin_segments(all_segments, float(trace.makespan_s))
    quantum = time_quantum(float(trace.makespan_s))  # finer than a pixel; far fewer bytes to send
    segments = {**segments, **{k: snap(segments[k], quantum).astype(np.float32) for k in ("left", "right")}}
    order = np.lexsort((segments["left"], segments["y"]))  # thinning keeps lanes together; times kept in order
    segments = {k: v[order] for k, v in segments.items()}
    n = trace.workload.num_requests
    s = trace.summary()
    kind = f"measured on {html.escape(runs.where_measured(trace))}" if trace.measured else "simulated"
    lost = np.isin(segments["state"], (palette.LOST, palette.THRASH))
    marks = {k: v[lost] for k, v in segments.items()}
    marks["mid"] = (marks["left"] + marks["right"]) / 2
    # What the lanes hold rides in the text (a css_classes change would make Bokeh rebuild the pane).
    has = " ".join(f"has-{k}" for k, c in counts.items() if c)
    cfg = trace.config
    arriving = {"rate": f"arriving at {cfg.request_rate:g} req/s", "workload": "arriving as the workload file says"}
    caption = (
        f'<div class="chart-title {has}">Every request, over time <span class="muted">'
        f"({n} requests, {arriving.get(cfg.arrival, 'all queued at 0 s')}, served to the last in "
        f'<b data-value="{s["makespan_s"]:.3f}">{s["makespan_s"]:.1f} s</b>, {kind})</span></div>'
    )
    details = _details(trace, admitted_at, preempted_at)
    words = words_html("lanes", lanes_in_words(trace, counts["thrash"] > 0))
    return {"segments": segments, "marks": marks, "details": details["rows"], "times": details["times"],
            "caption": caption, "words": words}


def _empty_segments() -> dict[str, list]:
    return {k: [] for k in ("y", "left", "right", "state")}


class LaneChart(StateView):
    """The hero chart. Its figure is built once; each run replaces the source's data and the ranges."""

    x_range = param.ClassSelector(class_=Range1d, doc="shared with the strip charts below")

    def __init__(self, **params):
        params.setdefault("x_range", Range1d(0, 1))
        super().__init__(**params)

    def build(self) -> None:
        # Named for the data table (explorable.views.data_tables), which reads them in the browser.
        self.source = ColumnDataSource(_empty_segments(), name="cb-lanes-segments")
        self.marks = ColumnDataSource({**_empty_segments(), "mid": []})  # lost stretches, flagged
        self.details = ColumnDataSource({k: [] for k in ("prompt", "output", "arrival", "ttft", "tpot", "itl", "admitted",
                                                         "preempted", "first", "cached_admit", "cached_resume")},
                                        name="cb-lanes-details")
        self.times = ColumnDataSource({"t": []}, name="cb-lanes-times")  # each request's admission, eviction times
        self.figure = self._figure()
        self.caption = TextHTML("", css_classes=["lane-caption"], sizing_mode="stretch_width",
                                    margin=(4, 10, 0, 10), stylesheets=[stylesheet()])
        # The legend is HTML, not a Bokeh Legend: it wraps on a narrow screen (a canvas legend is cut off)
        # and scales with the page's text; it never changes, so it costs nothing per update.
        self.legend = pn.pane.HTML(legend_html(), css_classes=["lane-legend"], sizing_mode="stretch_width",
                                   margin=(2, 10, 0, 10), stylesheets=[stylesheet()])
        # The chart in words (explorable.views.in_words), for a reader who cannot see it.
        self.words = TextHTML("", css_classes=["chart-words"], sizing_mode="stretch_width", margin=(2, 10, 0, 10),
                              stylesheets=[stylesheet()])
        # Placed by the page under the strips, which share the lanes' time axis and sit right under them.
        self.description = pn.Column(self.words, table_toggle("lanes"), sizing_mode="stretch_width", margin=0,
                                     css_classes=["lane-description"])
        self._pane = pn.Column(
            self.caption,
            self.legend,
            pn.pane.Bokeh(self.figure, sizing_mode="stretch_width"),
            css_classes=["lane-chart"], sizing_mode="stretch_width", margin=0,
        )

    def _figure(self):
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
                        hover_fill_alpha=1.0, hover_line_color="white", hover_line_width=1)
        self._patterns(fig)
        # Lost work is often a few passes long: far under a pixel on a 20 s axis. A fixed-size marker at
        # its middle keeps it visible at full scale; zoom in and the bar itself shows the real extent. Its
        # shape tells ordinary loss (a square) from thrashing (a crossed square), as the bars' patterns do.
        shapes = CustomJSTransform(args={"shapes": {str(k): v for k, v in palette.LOST_MARKERS.items()}},
                                   v_func="return Array.from(xs, (s) => shapes[s] ?? 'square')")
        marks = fig.scatter(x="mid", y="y", source=self.marks, marker={"field": "state", "transform": shapes}, size=7,
                            fill_color={"field": "state", "transform": mapper}, line_color=palette.INK, line_width=0.8)
        labels = "[" + ",".join(f"'{t}'" for t in palette.LANE_LABELS) + "]"
        # What a request is (tokens, admissions, evictions) comes from `details`, one row per request, by
        # the hovered segment's y: sent once per run instead of once per segment.
        request = CustomJSHover(args={"rows": self.details, "times": self.times}, code=HOVER_JS)
        fig.add_tools(HoverTool(
            renderers=[bars, marks], point_policy="follow_mouse",
            tooltips=('<div style="white-space: pre-line; font-size: 12px; line-height: 1.4; max-width: 340px">'
                      "@y{custom}\n<b>@state{custom}</b>: @left{0.00} to @right{0.00} s</div>"),
            formatters={"@state": CustomJSHover(code=f"return {labels}[value]"), "@y": request},
        ))
        fig.yaxis.axis_label = "request (arrival order)"
        without_unused_variants(fig)
        # A model, built once: assigning a new ticker on every run would make Bokeh re-walk the document.
        self.y_ticker = FixedTicker(ticks=[0, 64, 128, 192, 255])
        fig.yaxis.ticker = self.y_ticker
        fig.xaxis.visible = False  # the strips underneath carry the shared time axis
        fig.ygrid.grid_line_color = None
        fig.background_fill_color = palette.LANE_GROUND  # every lane colour 4:1 or more against it
        fig.xgrid.grid_line_color = palette.LANE_GRID
        fig.outline_line_color = None
        fig.yaxis.axis_line_color = None
        fig.yaxis.major_tick_line_color = None
        fig.yaxis.minor_tick_line_color = None
        fig.yaxis.axis_label_text_font_style = "normal"
        fig.yaxis.axis_label_text_color = palette.MUTED
        fig.yaxis.major_label_text_color = palette.MUTED
        return fig

    def _patterns(self, fig) -> None:
        """Each state's pattern over its colour (palette.LANE_PATTERNS): lost work hatched, thrashing cross-hatched,
        cached tokens dotted, so that no state is told by its colour alone. One renderer per pattern, over the
        segments of its state only (picked in the browser from the state code the bars carry: no column more to
        send), with one pattern each: a pattern given per segment costs BokehJS seconds to draw on every update."""
        for state, source in ((palette.LOST, self.marks), (palette.THRASH, self.marks), (palette.CACHED, self.source)):
            picked = CustomJSFilter(args={"code": state}, code="return Array.from(source.data.state, (s) => s === code)")
            fig.hbar(y="y", left="left", right="right", height=1.0, source=source, view=CDSView(filter=picked),
                     fill_color=None, line_color=None, hatch_pattern=palette.LANE_PATTERNS[state],
                     hatch_color=palette.HATCH_COLOURS[state], hatch_scale=6, hatch_weight=1.2)

    def refresh(self) -> None:
        trace = self.state.trace
        if trace is None:
            return
        data = derived("lanes", trace, lane_view_data)
        n = trace.workload.num_requests
        with pn.io.hold():
            for source, key in ((self.source, "segments"), (self.marks, "marks"), (self.details, "details"),
                                (self.times, "times")):
                set_data(source, data[key])
            end = float(trace.makespan_s) or 1.0
            self.x_range.update(start=0.0, end=end, reset_start=0.0, reset_end=end)
            self.y_range.update(start=n - 0.5, end=-0.5)
            self.y_ticker.ticks = sorted({0, n // 4, n // 2, 3 * n // 4, n - 1})
            self.caption.object = data["caption"]
            self.words.object = data["words"]
            legend = legend_html(bool(trace.config.enable_prefix_caching))
            if self.legend.object != legend:
                self.legend.object = legend

    def __panel__(self):
        return self._pane
