"""The knee: throughput and p99 latency against request rate, for the current settings.

Twelve rates from light traffic to overload (engine.rate_sweep: its all-at-once throughput sets the span),
the SLO targets drawn as lines and the current rate marked. Below the knee the server keeps up: throughput
follows the offered rate and TTFT stays near one prefill. Past it, throughput flattens at what the settings
can serve and TTFT climbs with the queue. Its figures come from explorable.state.runs, shared by every session.
"""
from __future__ import annotations

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem, NumeralTickFormatter, Range1d, Span
from bokeh.plotting import figure

from explorable.views import palette, projector
from explorable.state import runs
from explorable.state.runs import has_rate_curve, rate_curve, rate_curve_key
from explorable.views.assets import stylesheet
from explorable.views.curves import style_axes
from explorable.views.data_tables import table_toggle
from explorable.views.in_words import traffic_in_words, words_html
from explorable.patches.text_updates import TextHTML
from explorable.views.glyphs import without_unused_variants
from explorable.views.lanes import BACKEND
from explorable.views.sources import set_data
from explorable.views.state_view import StateView

TPOT_COLOUR = "#7a5195"


class TrafficCurve(StateView):
    """Requests served per second, and p99 TTFT / TPOT, against the offered request rate."""

    projector = param.Boolean(default=False, doc="the projector view's larger chart text")

    def build(self) -> None:
        # Built when traffic first arrives: most pages (the article's all-at-once states) never show the two
        # figures, whose 80-odd models were a fifth of every page's (server memory, collection, page load).
        self.source: ColumnDataSource | None = None
        self._built = False
        self._config = None
        self.pane = pn.Column(sizing_mode="stretch_width", margin=0, visible=False)
        self.state.param.watch(self._slo_lines, ["slo_ttft_ms", "slo_tpot_ms"])

    @property
    def built(self) -> bool:
        return self._built

    def forget_drawn(self) -> None:
        """Draw in full at the next traffic state, as if nothing had been drawn (the static export empties the
        figures between states)."""
        self._config = None

    def _build(self) -> None:
        self.source = ColumnDataSource({k: [] for k in ("rate", "served", "tok_s", "ttft", "tpot")},
                                       name="cb-traffic")  # named for the data table
        self.words = TextHTML("", css_classes=["chart-words"], sizing_mode="stretch_width", margin=(2, 10, 0, 10),
                              stylesheets=[stylesheet()])
        self.served_fig = self._served_figure()
        self.latency_fig = self._latency_figure()
        for fig in (self.served_fig, self.latency_fig):
            fig.styles = {"flex": "1 1 320px", "min-width": "0"}
            if self.projector:
                projector.enlarge(fig)
        self.pane.objects = [
            pn.pane.HTML('<div class="chart-title">Throughput and p99 latency against request rate <span '
                         'class="muted">(twelve rates around the knee, the rest as set; dashed lines: your SLO '
                         'targets)</span></div>', sizing_mode="stretch_width", stylesheets=[stylesheet()],
                         margin=(12, 10, 0, 10)),
            pn.FlexBox(pn.pane.Bokeh(self.served_fig, sizing_mode="stretch_width"),
                       pn.pane.Bokeh(self.latency_fig, sizing_mode="stretch_width"),
                       flex_wrap="wrap", sizing_mode="stretch_width", css_classes=["traffic-curve"], margin=0),
            self.words,
            table_toggle("traffic"),
        ]
        self._built = True

    def _served_figure(self):
        fig = figure(height=210, sizing_mode="stretch_width", x_axis_type="log", toolbar_location=None, tools="",
                     output_backend=BACKEND, min_border_left=56, min_border_right=16, y_range=Range1d(0, 1))
        style_axes(fig, "offered request rate (req/s)", "requests served / s")
        fig.line("rate", "rate", source=self.source, line_color=palette.MUTED, line_dash="dashed")  # keeping up
        fig.line("rate", "served", source=self.source, line_color=palette.CURVE, line_width=2)
        dots = fig.scatter("rate", "served", source=self.source, size=5, fill_color="white", line_color=palette.CURVE)
        fig.add_tools(HoverTool(renderers=[dots], tooltips=[("offered", "@rate{0.[00]} req/s"),
                                                            ("served", "@served{0.00} req/s"),
                                                            ("output", "@tok_s{0,0} tok/s")]))
        # Markers on the overlay canvas (as explorable.views.curves): moving one alone paints no curve again.
        self.served_marker = Span(location=1, dimension="height", line_color=palette.CURRENT, line_dash="dotted",
                                  level="overlay")
        fig.add_layout(self.served_marker)
        fig.yaxis.formatter = NumeralTickFormatter(format="0.[0]")
        return without_unused_variants(fig)

    def _latency_figure(self):
        fig = figure(height=210, sizing_mode="stretch_width", x_axis_type="log", y_axis_type="log",
                     toolbar_location=None, tools="", output_backend=BACKEND, min_border_left=56,
                     min_border_right=16, y_range=Range1d(1, 10))
        style_axes(fig, "offered request rate (req/s)", "p99 latency (ms)")
        ttft = fig.line("rate", "ttft", source=self.source, line_color=palette.CURVE, line_width=2)
        tpot = fig.line("rate", "tpot", source=self.source, line_color=TPOT_COLOUR, line_width=2)
        dots = fig.scatter("rate", "ttft", source=self.source, size=5, fill_color="white", line_color=palette.CURVE)
        fig.scatter("rate", "tpot", source=self.source, size=5, fill_color="white", line_color=TPOT_COLOUR)
        fig.add_tools(HoverTool(renderers=[dots], tooltips=[("offered", "@rate{0.[00]} req/s"),
                                                            ("TTFT p99", "@ttft{0,0.0} ms"),
                                                            ("TPOT p99", "@tpot{0,0.0} ms")]))
        # Not on the overlay canvas: the legend (top left) must stay drawn over these lines.
        self.ttft_slo = Span(location=1, dimension="width", line_color=palette.CURVE, line_dash="dashed")
        self.tpot_slo = Span(location=1, dimension="width", line_color=TPOT_COLOUR, line_dash="dashed")
        self.latency_marker = Span(location=1, dimension="height", line_color=palette.CURRENT, line_dash="dotted")
        for span in (self.ttft_slo, self.tpot_slo, self.latency_marker):
            fig.add_layout(span)
        fig.add_layout(Legend(items=[LegendItem(label="TTFT p99 (dashed: target)", renderers=[ttft]),
                                     LegendItem(label="TPOT p99", renderers=[tpot])],
                              location="top_left", background_fill_alpha=0.7, label_text_font_size="10px",
                              border_line_color=None, padding=2, spacing=0))
        return without_unused_variants(fig)

    def changed(self, *_events) -> None:
        cfg = self.state.config
        if cfg is None or cfg.arrival == "all-at-once" or has_rate_curve(cfg):
            self.refresh()
        else:  # twelve simulations: the lanes and readouts go out first, the curve on the page's next tick
            pn.state.execute(self.refresh, schedule=True)

    def _slo_lines(self, *_):
        if not self.built:
            return
        self.ttft_slo.location = float(self.state.slo_ttft_ms)
        self.tpot_slo.location = float(self.state.slo_tpot_ms)
        self._y_range()
        if self._config is not None:  # a target moved: the words compare the latencies with it
            self._words()

    def _words(self) -> None:
        cfg = self.state.config
        rate = float(cfg.request_rate) if cfg is not None and cfg.arrival == "rate" else None
        self.words.object = words_html("traffic", traffic_in_words(self.source.data, rate, self.state.slo_targets))

    def _y_range(self):
        data = self.source.data
        values = [v for v in (*data["ttft"], *data["tpot"], self.state.slo_ttft_ms, self.state.slo_tpot_ms)
                  if np.isfinite(v) and v > 0]
        if values:
            self.latency_fig.y_range.update(start=min(values) / 1.6, end=max(values) * 1.6)

    def refresh(self) -> None:
        cfg = self.state.config
        # Shown (and paid for) only while traffic arrives over time: the article's all-at-once states, most of
        # what a class visits, cost what they did before.
        shown = cfg is not None and cfg.arrival != "all-at-once"
        if not shown or (self._config is not None and rate_curve_key(cfg) == rate_curve_key(self._config)
                         and (cfg.request_rate, cfg.arrival) == (self._config.request_rate, self._config.arrival)):
            self.pane.visible = shown
            return
        try:
            data = rate_curve(cfg)
        except runs.RUN_ERRORS:
            self.pane.visible = shown and self.built
            return
        rate = float(cfg.request_rate)
        with pn.io.hold():
            if not self.built:
                self._build()
            self.pane.visible = True
            set_data(self.source, data)
            self.served_fig.y_range.update(start=0, end=float(max(np.nanmax(data["served"]), 1e-9)) * 1.15)
            self.served_marker.location = rate
            self.latency_marker.location = rate
            self.served_marker.visible = self.latency_marker.visible = cfg.arrival == "rate"
            self._slo_lines()
            self._words()
        self._config = cfg  # only once drawn: a failed build is tried again on the next update

    def __panel__(self):
        return self.pane


__all__ = ["TrafficCurve", "rate_curve"]
