"""Strip charts under the lanes, on the same time axis: running batch size (against the --max-num-seqs cap)
and GPU KV cache usage, pass by pass. Long runs are reduced to at most `MAX_POINTS` steps per strip,
keeping each bin's maximum so no peak (the largest batch, a full cache) disappears. Times are on the run's
time grid (`time_grid`) and cache usage in steps of 1/1,024, both finer than a pixel, and a step that repeats
the value before it is left out (it draws nothing): the same line in far fewer bytes, for the served app's
patches and the static build's files alike.
"""
from __future__ import annotations

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource, Label, NumeralTickFormatter, Range1d, Span
from bokeh.plotting import figure

from engine import Trace
from explorable.views.assets import stylesheet
from explorable.views import palette
from explorable.views.data_tables import table_toggle
from explorable.views.in_words import strips_in_words, words_html
from explorable.views.glyphs import without_unused_variants
from explorable.views.lanes import BACKEND
from explorable.views.sources import set_data
from explorable.state.time_grid import snap, time_quantum
from explorable.state.view_data import derived
from explorable.views.state_view import StateView
from explorable.patches.text_updates import TextHTML

MAX_POINTS = 2000
KV_QUANTUM = 2.0**-10  # cache usage (0..1) in steps of 1/1,024: a 130 px strip draws 1/130


def step_series(start: np.ndarray, end: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS,
                y_quantum: float | None = None) -> dict:
    """(x, y) for a step line: each pass's value from its start; bins of passes keep their maximum; times on
    the run's time grid, values (given `y_quantum`) on theirs; a step to the value already drawn left out."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) > max_points:
        edges = np.linspace(0, len(values), max_points + 1).astype(np.int64)
        starts = edges[:-1]
        x = start[starts]
        y = np.maximum.reduceat(values, starts)
    else:
        x, y = start, values
    # Close the last step at the end of the run.
    x = np.append(x, end[-1]) if len(end) else x
    y = np.append(y, y[-1]) if len(y) else y
    if len(x):
        x = snap(x, time_quantum(float(end[-1])))
        y = snap(y, y_quantum) if y_quantum else y
        # In step mode a point whose value equals the one before draws nothing new; the closing point stays.
        keep = np.r_[True, y[1:-1] != y[:-2], True] if len(y) > 1 else np.ones(len(y), dtype=bool)
        x, y = x[keep], y[keep]
    return {"x": x.astype(np.float32), "y": y.astype(np.float32)}


def strip_series(trace: Trace) -> tuple[dict, dict]:
    """The batch strip's and the KV strip's step lines for a run (shared by every session)."""
    return (step_series(trace.pass_start, trace.pass_end, trace.n_seqs),
            step_series(trace.pass_start, trace.pass_end, trace.kv_usage, y_quantum=KV_QUANTUM))


def strips_words(trace: Trace) -> str:
    """The strips in words, as the page shows them (explorable.views.in_words)."""
    return words_html("strips", strips_in_words(trace))


def _strip(x_range, height, y_label, show_time_axis):
    fig = figure(
        height=height, sizing_mode="stretch_width", x_range=x_range, toolbar_location=None, tools="",
        output_backend=BACKEND, min_border_left=72, min_border_right=12, min_border_top=6,
        min_border_bottom=4 if not show_time_axis else 30,
    )
    fig.yaxis.axis_label = y_label
    fig.xaxis.visible = show_time_axis
    fig.xaxis.axis_label = "time since the queue filled (s)"
    for axis in (fig.xaxis, fig.yaxis):
        axis.axis_label_text_font_style = "normal"
        axis.axis_label_text_color = palette.MUTED
        axis.major_label_text_color = palette.MUTED
        axis.axis_line_color = palette.RULE
        axis.minor_tick_line_color = None
    fig.yaxis.axis_label_text_font_size = "11px"
    fig.outline_line_color = None
    fig.xgrid.grid_line_color = palette.RULE
    fig.xgrid.grid_line_alpha = 0.6
    fig.ygrid.grid_line_color = palette.RULE
    fig.ygrid.grid_line_alpha = 0.6
    fig.yaxis.ticker.desired_num_ticks = 3
    return fig


class Strips(StateView):
    """Batch size and KV cache usage per pass, sharing the lane chart's time range."""

    x_range = param.ClassSelector(class_=Range1d)

    def build(self) -> None:
        self.batch_source = ColumnDataSource({"x": [], "y": []}, name="cb-strips-batch")  # named for the table
        self.kv_source = ColumnDataSource({"x": [], "y": []}, name="cb-strips-kv")

        self.batch_range = Range1d(0, 100)
        self.batch_fig = _strip(self.x_range, 120, "batch size", False)
        self.batch_fig.y_range = self.batch_range
        self.batch_fig.varea_step(x="x", y1=0, y2="y", step_mode="after", source=self.batch_source,
                                  fill_color=palette.TEAL, fill_alpha=0.25)
        self.batch_fig.step(x="x", y="y", mode="after", source=self.batch_source, line_color=palette.TEAL,
                            line_width=1.5)
        self.cap = Span(location=256, dimension="width", line_color=palette.CAP_LINE, line_dash="dashed",
                        line_width=1.5)
        self.cap_label = Label(x=4, y=256, x_units="screen", text="", text_font_size="11px",
                               text_color=palette.INK, y_offset=2, background_fill_color="white",
                               background_fill_alpha=0.8)
        self.batch_fig.add_layout(self.cap)
        self.batch_fig.add_layout(self.cap_label)

        self.kv_fig = _strip(self.x_range, 130, "KV cache used", True)
        self.kv_fig.y_range = Range1d(0, 1.05)
        self.kv_fig.yaxis.formatter = NumeralTickFormatter(format="0%")
        self.kv_fig.varea_step(x="x", y1=0, y2="y", step_mode="after", source=self.kv_source,
                               fill_color=palette.CURVE, fill_alpha=0.2)
        self.kv_fig.step(x="x", y="y", mode="after", source=self.kv_source, line_color=palette.CURVE, line_width=1.5)
        without_unused_variants(self.batch_fig)
        without_unused_variants(self.kv_fig)

        self.words = TextHTML("", css_classes=["chart-words"], sizing_mode="stretch_width", margin=(2, 10, 0, 10),
                              stylesheets=[stylesheet()])
        self.description = pn.Column(self.words, table_toggle("strips"), sizing_mode="stretch_width", margin=0,
                                     css_classes=["strips-description"])  # placed by the page
        self._pane = pn.Column(
            pn.pane.Bokeh(self.batch_fig, sizing_mode="stretch_width"),
            pn.pane.Bokeh(self.kv_fig, sizing_mode="stretch_width"),
            css_classes=["strips"], sizing_mode="stretch_width", margin=0,
        )

    def refresh(self) -> None:
        trace = self.state.trace
        if trace is None:
            return
        cap = trace.config.max_num_seqs
        peak = int(trace.n_seqs.max()) if trace.num_passes else 0
        # Keep the cap line in view unless it would flatten the batch curve; then say where it is.
        top = max(peak, 1) * 1.15
        cap_in_view = cap <= 2 * max(peak, 1)
        if cap_in_view:
            top = max(top, cap * 1.12)
        label = (f"--max-num-seqs {cap}" if cap_in_view
                 else f"--max-num-seqs {cap} is far above: the batch never got near it")
        with pn.io.hold():
            batch, kv = derived("strips", trace, strip_series)
            set_data(self.batch_source, batch)
            set_data(self.kv_source, kv)
            self.words.object = derived("strips-words", trace, strips_words)
            self.batch_range.update(start=0, end=top)
            self.cap.update(location=cap, visible=cap_in_view)
            self.cap_label.update(text=label, y=cap if cap_in_view else top, y_offset=2 if cap_in_view else -16)
            # Reserving, vLLM's usage figure counts what is set aside, not what is written.
            self.kv_fig.yaxis.axis_label = "KV reserved" if trace.config.allocation == "reserve" else "KV cache used"
            self.kv_fig.xaxis.axis_label = ("time since the benchmark started (s)" if trace.arrives_over_time
                                            else "time since the queue filled (s)")

    def __panel__(self):
        return self._pane
