"""Throughput curves: the run's throughput against --max-num-seqs and against the pool size, everything
else held at the current settings, with the current setting marked. They make "a smaller cap is faster"
and "past the memory wall the cap is inert" visible at a glance. Points come from `runs.throughput`, a
cache shared by every session, so only settings nobody has tried yet cost a simulation.
"""
from __future__ import annotations

import math
import threading
from collections import OrderedDict
from functools import partial

import numpy as np
import panel as pn
from bokeh.models import ColumnDataSource, FixedTicker, HoverTool, NumeralTickFormatter, Range1d, Span
from bokeh.plotting import figure
from panel.io.state import set_curdoc

from engine import RunConfig
from explorable.state import background, runs
from explorable.views.assets import stylesheet
from explorable.views import palette
from explorable.views.data_tables import table_toggle
from explorable.views.in_words import curve_in_words, words_html
from explorable.patches.text_updates import TextHTML
from explorable.views.glyphs import without_unused_variants
from explorable.views.lanes import BACKEND
from explorable.views.sources import set_data
from explorable.views.state_view import StateView

# The article walks these values; the rest fill the curve in on a log scale.
SEQ_SWEEP = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 128, 192, 256, 384, 512, 768, 1024)
POOL_SWEEP = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 80.0)


def curve_base(cfg: RunConfig, name: str) -> RunConfig:
    """The run a curve of `name` varies. A pool sized by --gpu-memory-utilization is the same pool set by hand
    (its GiB exactly, so the same blocks): the pool curve then moves the pool, not a setting it would ignore."""
    if name == "pool_gib" and cfg.pool_source == "utilization":
        return cfg.replace(gpu_memory_utilization=None, pool_gib=cfg.kv_cache_gib)
    return cfg


def sweep(cfg: RunConfig, name: str, values) -> dict[str, np.ndarray]:
    """Throughput at each value of setting `name` (NaN where it cannot run), the rest of `cfg` fixed."""
    current = getattr(cfg, name)
    xs = np.array(sorted({*values, current}), dtype=np.float64)
    ys = np.empty_like(xs)
    for i, x in enumerate(xs):
        value = int(x) if name == "max_num_seqs" else float(x)
        try:
            point = cfg.replace(**{name: value})
        except runs.RUN_ERRORS:
            ys[i] = math.nan
            continue
        if not runs.has_throughput(point):
            background.yield_to_foreground()  # on the worker: a reader's change goes first
        ys[i] = runs.throughput(point)
    return {"x": xs, "y": ys}


# Finished sweeps, shared by every session: a setting someone has seen draws its curves in the same
# update as its lanes and readouts (one message, one repaint) instead of a follow-up one.
MAX_SWEEPS = 512
_SWEEPS: OrderedDict[tuple, dict[str, np.ndarray]] = OrderedDict()
_SWEEPS_LOCK = threading.Lock()


def known_sweep(cfg: RunConfig, name: str, values) -> dict[str, np.ndarray] | None:
    """The sweep of `name` around `cfg` if it has been computed before, else None (never computes)."""
    key = (cfg, name, tuple(values))
    with _SWEEPS_LOCK:
        data = _SWEEPS.get(key)
        if data is not None:
            _SWEEPS.move_to_end(key)
    return data


def shared_sweep(cfg: RunConfig, name: str, values) -> dict[str, np.ndarray]:
    """`sweep`, remembered for every session (at most MAX_SWEEPS, least recently used out)."""
    data = known_sweep(cfg, name, values)
    if data is None:
        data = sweep(cfg, name, values)
        with _SWEEPS_LOCK:
            _SWEEPS[(cfg, name, tuple(values))] = data
            while len(_SWEEPS) > MAX_SWEEPS:
                _SWEEPS.popitem(last=False)
    return data


def _curve_figure(x_label, ticks, tick_labels):
    fig = figure(height=210, sizing_mode="stretch_width", x_axis_type="log", toolbar_location=None, tools="",
                 output_backend=BACKEND, min_border_left=56, min_border_right=16, y_range=Range1d(0, 1))
    style_axes(fig, x_label, "output tokens/s")
    fig.xaxis.ticker = FixedTicker(ticks=list(ticks))
    fig.xaxis.major_label_overrides = {t: lab for t, lab in zip(ticks, tick_labels)}
    fig.yaxis.formatter = NumeralTickFormatter(format="0,0")
    return fig


def style_axes(fig, x_label: str, y_label: str) -> None:
    """The explorable's chart style: labelled axes in muted text, rule-coloured lines and grid, no outline."""
    fig.xaxis.axis_label, fig.yaxis.axis_label = x_label, y_label
    for axis in (fig.xaxis, fig.yaxis):
        axis.axis_label_text_font_style = "normal"
        axis.axis_label_text_color = palette.MUTED
        axis.axis_label_text_font_size = "11px"
        axis.major_label_text_color = palette.MUTED
        axis.axis_line_color = palette.RULE
        axis.minor_tick_line_color = None
    fig.outline_line_color = None
    fig.xgrid.grid_line_color = fig.ygrid.grid_line_color = palette.RULE
    fig.xgrid.grid_line_alpha = fig.ygrid.grid_line_alpha = 0.6


class _Curve:
    """One throughput curve (line, sample dots, the current point and a vertical marker)."""

    def __init__(self, name: str, values, x_label: str, ticks, tick_labels, unit: str, said_as: str = ""):
        self.name, self.values = name, values
        self.said_as, self.unit = said_as or x_label, unit  # how its text alternative names the setting
        self.line = ColumnDataSource({"x": [], "y": []}, name=f"cb-curve-{name}")  # named for the data table
        self.point = ColumnDataSource({"x": [], "y": []}, name=f"cb-curve-{name}-point")
        self.figure = _curve_figure(x_label, ticks, tick_labels)
        self.figure.line("x", "y", source=self.line, line_color=palette.CURVE, line_width=2)
        dots = self.figure.scatter("x", "y", source=self.line, size=5, fill_color="white", line_color=palette.CURVE)
        # The current point and its marker are drawn on BokehJS's overlay canvas: when only they move (a click
        # along this curve's own control), the curve, its axes and grid are not painted again.
        self.figure.scatter("x", "y", source=self.point, size=11, fill_color=palette.CURRENT, line_color="white",
                            line_width=1.5, level="overlay")
        self.marker = Span(location=1, dimension="height", line_color=palette.CURRENT, line_dash="dotted",
                           line_width=1, level="overlay")
        self.figure.add_layout(self.marker)
        without_unused_variants(self.figure)
        self.figure.add_tools(HoverTool(renderers=[dots], tooltips=[(x_label, f"@x{{0,0.[0]}}{unit}"),
                                                                    ("throughput", "@y{0,0} tok/s")]))

    def known(self, cfg: RunConfig) -> bool:
        return known_sweep(curve_base(cfg, self.name), self.name, self.values) is not None

    def update(self, cfg: RunConfig) -> str:
        """Draw the curve around `cfg`; returns it in words."""
        cfg = curve_base(cfg, self.name)
        data = shared_sweep(cfg, self.name, self.values)
        current = float(getattr(cfg, self.name))
        here = data["y"][data["x"] == current]
        top = np.nanmax(data["y"]) if np.isfinite(data["y"]).any() else 1.0
        set_data(self.line, {"x": data["x"], "y": data["y"]})
        set_data(self.point, {"x": [current], "y": [float(here[0]) if len(here) else math.nan]})
        self.marker.location = current
        self.figure.y_range.update(start=0, end=float(top) * 1.12)
        return curve_in_words(self.said_as, self.unit, data, current)


def _hand_over(doc, deliver, done: tuple) -> None:
    """From the worker: have the page's own thread run `deliver(*done)` (Bokeh's way in from a thread);
    nothing if the page has closed meanwhile."""
    if doc.session_context is None:
        return
    try:
        doc.add_next_tick_callback(partial(_in_page, doc, deliver, done))
    except RuntimeError:  # destroyed between the check and the call
        pass


def _in_page(doc, deliver, done: tuple) -> None:
    with set_curdoc(doc):  # as Panel runs a scheduled callback: pn.state.curdoc is this page
        deliver(*done)


class Curves(StateView):
    """Throughput against --max-num-seqs and against pool GiB, for the other current settings."""

    def build(self) -> None:
        ticks = (1, 4, 16, 64, 256, 1024)  # two octaves apart: labels never touch, even at 16 px on a phone
        self.by_seqs = _Curve("max_num_seqs", SEQ_SWEEP, "--max-num-seqs", ticks, [str(t) for t in ticks], "")
        pool_ticks = (1, 2, 4, 8, 16, 32, 64)
        self.by_pool = _Curve("pool_gib", POOL_SWEEP, "KV cache pool (GiB)", pool_ticks,
                              [str(t) for t in pool_ticks], " GiB", said_as="the KV cache pool")
        self.words = TextHTML("", css_classes=["chart-words"], sizing_mode="stretch_width", margin=(2, 10, 0, 10),
                              stylesheets=[stylesheet()])
        self._config = None

    def changed(self, *_events) -> None:
        # The curves may need up to ~30 uncached runs. Served, they are simulated on a worker thread
        # (explorable.state.background) while the lanes and readouts go out and the event loop answers other
        # pages; they are drawn when ready. Outside a server they are drawn at once. Curves someone has
        # drawn before cost nothing: they go out with the rest of the update.
        cfg = self.state.config
        if cfg is None or cfg == self._config:
            return
        doc = pn.state.curdoc
        if (self.by_seqs.known(cfg) and self.by_pool.known(cfg)) or doc is None or doc.session_context is None:
            self.refresh()
            return
        background.submit(id(self), partial(runs.collecting, partial(self._sweeps, cfg)),
                          partial(_hand_over, doc, partial(self._deliver, cfg)))

    def _sweeps(self, cfg: RunConfig) -> None:
        for curve in (self.by_seqs, self.by_pool):
            shared_sweep(curve_base(cfg, curve.name), curve.name, curve.values)

    def _deliver(self, cfg: RunConfig, _result: None, simulated_s: float) -> None:
        """On the page's thread, once the sweeps around `cfg` are known: charge their simulations to the
        page (explorable.server.budget, through runs.background_meter) and draw them unless the page has moved on."""
        if runs.background_meter is not None and simulated_s:
            runs.background_meter(simulated_s)
        if self.state.config == cfg:
            self.refresh()

    def refresh(self) -> None:
        cfg = self.state.config
        if cfg is None or cfg == self._config:
            return
        self._config = cfg
        with pn.io.hold():
            said = [self.by_seqs.update(cfg), self.by_pool.update(cfg)]
            self.words.object = words_html("curves", " ".join(said))

    def __panel__(self):
        # Side by side while each gets 320 px or more, one above the other below that.
        for fig in (self.by_seqs.figure, self.by_pool.figure):
            fig.styles = {"flex": "1 1 320px", "min-width": "0"}
        return pn.Column(
            pn.FlexBox(
                pn.pane.Bokeh(self.by_seqs.figure, sizing_mode="stretch_width"),
                pn.pane.Bokeh(self.by_pool.figure, sizing_mode="stretch_width"),
                flex_wrap="wrap", sizing_mode="stretch_width", css_classes=["curves"], margin=0,
            ),
            self.words,
            table_toggle("curves"),
            sizing_mode="stretch_width", margin=0,
        )
