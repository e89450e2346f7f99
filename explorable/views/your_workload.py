"""The "Your workload, your server" section: a reader's own lengths (two numbers or a file) and vLLM log lines.

Two numbers (p50 and p99 of completion tokens, optionally of prompt tokens) or a file in any layout
engine/workload_formats.py reads become the workload of every view on the page; a small histogram marks its p50
and p99, says p99 / p50 and the course's verdict, and sets the same workload per pass against per request.
Pasted log lines are diagnosed (engine/diagnose.py) and one click sets the page to the server they describe.

A file is read, and the per-request comparison simulated, on the worker thread (explorable.state.background),
charged to the page when done, as the curves are; what was read lives on the page's state and dies with it
(explorable.state.your_workload).
"""
from __future__ import annotations

import html
import math
import time
from functools import partial

import numpy as np
import panel as pn
import param
from bokeh.models import ColumnDataSource, Label, NumeralTickFormatter, Range1d, Span
from bokeh.plotting import figure

from engine import RunConfig, WorkloadError
from engine.workload_formats import WorkloadRead
from explorable.views.assets import stylesheet
from explorable.state import background, runs, your_workload
from explorable.state.store import ExplorableState
from explorable.state.view_data import derived
from explorable.views import palette
from explorable.views.curves import _hand_over, style_axes
from explorable.views.diagnosis import DiagnosisView
from explorable.views.glyphs import without_unused_variants
from explorable.views.lanes import BACKEND, lane_view_data
from explorable.views.logs_view import log_html
from explorable.views.strips import strip_series
from explorable.views.sources import set_data
from explorable.views.state_view import StateView, answer_reader
from explorable.patches.text_updates import TextHTML
from explorable.views.upload_limit import upload_limit_script
from explorable.views.workload_guide import WorkloadGuide

NUMBER_FIELDS = (("output_p50", "p50 completion tokens"), ("output_p99", "p99 completion tokens"),
                 ("prompt_p50", "p50 prompt tokens"), ("prompt_p99", "p99 prompt tokens"),
                 ("requests", "requests"), ("seed", "seed"))


def _html_line(kind: str, text: str) -> str:
    return f'<div class="yw-{kind}" data-yw="{kind}">{text}</div>'


def source_sentence(state: ExplorableState) -> str:
    """Where the workload on the page comes from, in words."""
    read: WorkloadRead | None = state.upload_read
    if state.uploaded is not None and read is not None:
        window = (f"; a window of {read.workload.num_requests:,} consecutive requests from request "
                  f"{read.window_start + 1:,} is served (drawn by the seed)" if read.sampled else "")
        if your_workload.cut_to_token_bound(read):
            window += (f", cut to the {read.workload.num_requests:,} whose prompts and outputs fit the page's "
                       f"{your_workload.MAX_WINDOW_TOKENS / 1e6:g} million tokens")
        failed = f"; {read.skipped:,} failed requests (0 tokens) left out" if read.skipped else ""
        timed = "; it has arrival times: traffic arrives at the file's times" if read.workload.arrival_s is not None \
            and read.workload.arrival_s.any() else ""
        return (f"Your file ({read.layout} layout): {read.rows:,} requests{window}{failed}{timed}. The histogram "
                "shows every request in the file.")
    if state.output_p50 is not None:
        prompts = (f", prompts through p50 {state.prompt_p50:,} / p99 {state.prompt_p99:,}" if state.prompt_p50
                   else ", prompts as the article's")
        return (f"Your two numbers: {state.requests:,} requests, completions log-normal through p50 "
                f"{state.output_p50:,} and p99 {state.output_p99:,}{prompts} (seed {state.seed}).")
    return ("The article's workload, for comparison: give your own numbers or a file above, and every view on the "
            "page shows yours.")


class YourWorkload(StateView):
    """The section, folded by default: the guided walk, the two-number form, the upload and the diagnosis."""

    watches = ("trace", "uploaded", "upload_read", *(name for name, _label in NUMBER_FIELDS))

    def build(self) -> None:
        # Folded until the reader opens it, and built then: its ~60 models (a chart among them) would otherwise
        # be built and sent with every page, opened or not, and its comparison run for every change.
        self._built = False
        self.card = pn.Card(pn.pane.HTML("<div></div>", height=0, margin=0), title="Your workload, your server",
                            collapsed=True, sizing_mode="stretch_width", margin=(8, 6), css_classes=["your-workload"])
        self.card.param.watch(self._opened, "collapsed")
        self._gain_for: RunConfig | None = None

    def _build_parts(self) -> None:
        s = self.state
        field = dict(sizing_mode="stretch_width", margin=(2, 6), styles={"flex": "1 1 150px", "min-width": "0"})
        self.numbers = {name: pn.widgets.IntInput(label=label, value=getattr(s, name), start=s.param[name].bounds[0],
                                                  end=s.param[name].bounds[1], css_classes=[f"yw-{name}"],
                                                  tags=[{"control": name}], **field)  # (as the sidebar's are)
                        for name, label in NUMBER_FIELDS}
        self.show_numbers = pn.widgets.Button(label="Show this workload", css_classes=["yw-show"], margin=(6, 6),
                                              stylesheets=[stylesheet()])
        self.show_numbers.on_click(answer_reader(self._apply_numbers))
        self.upload = pn.widgets.FileInput(label="Workload file (CSV, JSON or JSONL, at most 2 MB)",
                                           accept=".csv,.json,.jsonl,.txt,text/csv,application/json",
                                           css_classes=["yw-upload"], margin=(4, 6), sizing_mode="stretch_width")
        self.upload.param.watch(self._uploaded, "value")
        self.back = pn.widgets.Button(label="Back to the article's workload", css_classes=["yw-back"], margin=(6, 6),
                                      stylesheets=[stylesheet()])
        self.back.on_click(answer_reader(lambda _e: self._back()))
        self.status = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=(2, 6),
                               css_classes=["yw-status"])
        self.summary = TextHTML("", sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=(2, 6),
                                css_classes=["yw-summary"])
        self._build_histogram()
        self.diagnosis = DiagnosisView(state=s)
        self.guide = WorkloadGuide(state=s, section=self)

    # -- the histogram -------------------------------------------------------------------------------------
    def _build_histogram(self) -> None:
        self.bars = ColumnDataSource({"left": [], "right": [], "top": []})
        fig = figure(height=150, sizing_mode="stretch_width", x_axis_type="log", toolbar_location=None, tools="",
                     output_backend=BACKEND, min_border_left=44, min_border_right=12, y_range=Range1d(0, 1),
                     css_classes=["yw-histogram"])
        fig.quad(left="left", right="right", bottom=0, top="top", source=self.bars, fill_color=palette.CURVE,
                 fill_alpha=0.55, line_color="white")
        style_axes(fig, "completion tokens (log scale)", "requests")
        self.p50_mark = Span(location=1, dimension="height", line_color=palette.INK, line_dash="dashed", line_width=1.5)
        self.p99_mark = Span(location=1, dimension="height", line_color=palette.CURRENT, line_width=2)
        self.p50_label = Label(x=1, y=0, y_units="screen", y_offset=4, text="p50", text_font_size="11px",
                               text_color=palette.INK, x_offset=3)
        self.p99_label = Label(x=1, y=0, y_units="screen", y_offset=4, text="p99", text_font_size="11px",
                               text_color=palette.CURRENT, x_offset=3)
        for item in (self.p50_mark, self.p99_mark, self.p50_label, self.p99_label):
            fig.add_layout(item)
        fig.yaxis.ticker.desired_num_ticks = 3
        fig.xaxis.formatter = NumeralTickFormatter(format="0,0")  # 1,000 rather than 10^3
        without_unused_variants(fig)
        self.histogram = fig

    def _draw_histogram(self, lengths: np.ndarray) -> str:
        d = your_workload.distribution(lengths)
        set_data(self.bars, {"left": d.edges[:-1], "right": d.edges[1:], "top": d.counts})
        self.histogram.y_range.update(start=0, end=float(max(d.counts.max(), 1)) * 1.15)
        for mark, label, value in ((self.p50_mark, self.p50_label, d.p50), (self.p99_mark, self.p99_label, d.p99)):
            mark.location = label.x = value
        level, words = your_workload.verdict(d.ratio)
        return (_html_line("percentiles", f"<b>p50 {d.p50:,.0f}</b> and <b>p99 {d.p99:,.0f}</b> completion tokens "
                                          f"over {d.count:,} requests.")
                + f'<div class="yw-verdict" data-level="{level}">{html.escape(words)}</div>')

    # -- the two numbers ---------------------------------------------------------------------------------------
    def _apply_numbers(self, _event=None) -> None:
        values = {name: self.numbers[name].value for name, _label in NUMBER_FIELDS}
        if values["output_p50"] is None or values["output_p99"] is None:
            self._say("error", "Give both p50 and p99 of completion tokens (the log-normal goes through both).")
            return
        if values["requests"] is None or values["seed"] is None:
            self._say("error", "Give the number of requests and a seed (the same seed, the same requests).")
            return
        try:
            RunConfig(**values)  # (cheap: the numbers are checked before the page runs them)
        except runs.RUN_ERRORS as exc:
            self._say("error", html.escape(str(exc)))
            return
        self._say("", "")
        self.state.param.update(**values)

    def _numbers_from_state(self) -> None:
        for name, widget in self.numbers.items():
            if widget.value != getattr(self.state, name):
                widget.value = getattr(self.state, name)

    # -- the file ----------------------------------------------------------------------------------------------
    def _uploaded(self, event) -> None:
        data = event.new
        if not data:
            return
        name, seed = self.upload.filename, self.state.seed
        self.upload.clear()  # (the page keeps what was read, not the bytes: the browser's copy is let go too)
        self._say("reading", f"Reading {html.escape(your_workload.display_name(name))}\u2026")
        doc = pn.state.curdoc
        work = partial(runs.collecting, partial(_read, data, name, seed, self.state.file_config))
        if doc is None or doc.session_context is None:
            self._deliver_upload(*work())
            return
        background.submit(("upload", id(self)), work, partial(_hand_over, doc, self._deliver_upload))

    def _deliver_upload(self, outcome, simulated_s: float) -> None:
        """On the page's thread: charge the reading and its runs to the page; show the file or its one error."""
        read, read_s = outcome
        if runs.background_meter is not None:
            runs.background_meter(read_s + simulated_s)
        if isinstance(read, str):
            self._say("error", html.escape(read))
            return
        self._say("", "")
        forget_previous = self.state.uploaded
        self.state.use_file(read)
        if forget_previous is not None and forget_previous != read.workload:
            your_workload.forget(forget_previous)

    def _back(self) -> None:
        previous = self.state.uploaded
        self.state.param.update(output_p50=None, output_p99=None, prompt_p50=None, prompt_p99=None)
        self.state.drop_file()
        your_workload.forget(previous)
        self._say("", "")

    def load_sample(self) -> None:
        """The guided step: the shipped trace, read here (it is small and known)."""
        self._deliver_upload((your_workload.read_sample_trace(self.state.seed), 0.0), 0.0)

    def _say(self, kind: str, text: str) -> None:
        self.status.object = _html_line(kind, text) if text else ""

    # -- what is shown -----------------------------------------------------------------------------------------
    def refresh(self) -> None:
        s = self.state
        if s.trace is None or not self._built:  # (never opened: nothing here is drawn, nor its comparison run)
            return
        self._numbers_from_state()
        lengths = s.upload_read.all_output_len if s.uploaded is not None and s.upload_read is not None else \
            s.trace.workload.output_len
        with pn.io.hold():
            text = _html_line("source", html.escape(source_sentence(s))) + self._draw_histogram(lengths)
            self.summary.object = text + self._gain_html()
            self.back.visible = s.uploaded is not None or s.output_p50 is not None
        self._schedule_gain()

    def _gain_html(self) -> str:
        cfg = self.state.config
        gain = _known_gain(cfg)
        if gain is None:
            return _html_line("gain", "Per pass against per request: simulating\u2026")
        return _html_line("gain", gain_sentence(cfg, gain))

    def _schedule_gain(self) -> None:
        cfg = self.state.config
        if cfg is None or cfg == self._gain_for:
            return
        self._gain_for = cfg
        doc = pn.state.curdoc
        if _known_gain(cfg) is not None or doc is None or doc.session_context is None:
            self._show_gain(cfg, your_workload.unit_gain(cfg), 0.0)  # (known: no simulation; else no server)
            return
        background.submit(("gain", id(self)), partial(runs.collecting, partial(your_workload.unit_gain, cfg)),
                          partial(_hand_over, doc, partial(self._show_gain, cfg)))

    def _show_gain(self, cfg: RunConfig, _gain, simulated_s: float) -> None:
        if runs.background_meter is not None and simulated_s:
            runs.background_meter(simulated_s)
        if self.state.config == cfg:
            self.refresh()

    def _body(self) -> pn.Column:
        numbers = pn.FlexBox(*self.numbers.values(), flex_wrap="wrap", sizing_mode="stretch_width", margin=0)
        note = lambda text, css="yw-note": pn.pane.HTML(f"<div>{text}</div>", css_classes=[css],  # noqa: E731
                                                          stylesheets=[stylesheet()], margin=(2, 6),
                                                          sizing_mode="stretch_width")
        heading = lambda text: pn.pane.HTML(f"<h3>{text}</h3>", css_classes=["group-heading"],  # noqa: E731
                                            stylesheets=[stylesheet()], margin=(8, 6, 0, 6))
        return pn.Column(
            note("Bring your own traffic: every view on this page (readouts, lanes, curves, log lines) then shows "
                 "it, under every control. Measure p50 and p99 of completion_tokens over a day of responses, or "
                 "upload the trace itself."),
            self.guide,
            heading("From two numbers"),
            note("p50 and p99 of completion tokens; those of prompt tokens too if you have them (else the article's "
                 "prompts). The same numbers and seed give the same requests, and they go into the page's link."),
            numbers, self.show_numbers,
            heading("From a file"),
            note("The project's CSV <code>prompt_len,output_len[,arrival_s]</code>, Azure's trace "
                 "<code>TIMESTAMP,ContextTokens,GeneratedTokens</code>, BurstGPT's CSV or Mooncake's JSONL (its "
                 "<code>hash_ids</code> become shared prompt blocks for prefix caching). "
                 + html.escape(your_workload.LIMITS_TEXT)),
            self.upload, upload_limit_script(your_workload.MAX_UPLOAD_BYTES), self.status,
            pn.pane.Bokeh(self.histogram, sizing_mode="stretch_width"), self.summary, self.back,
            self.diagnosis,
            sizing_mode="stretch_width", margin=0,
        )

    @answer_reader
    def _opened(self, event) -> None:
        """The reader unfolds the section: it is built then (a page that never opens it pays nothing for it)."""
        if event.new or self._built:
            return
        self._build_parts()
        self._built = True
        self.card.objects = [self._body()]
        self.refresh()

    def __panel__(self):
        return self.card


def _read(data: bytes, name: str | None, seed: int, config_for=None) -> tuple:
    """On the worker: (what was read or the error line, seconds spent reading). With `config_for` (the page's
    settings for a workload), its run is simulated and summed up here too, so the page's own thread finds it
    cached (a reader's workload may be far longer than the article's)."""
    started = time.perf_counter()
    try:
        read = your_workload.read_upload(data, name, seed)
    except WorkloadError as exc:
        return str(exc), time.perf_counter() - started
    if config_for is not None:
        try:
            _prepare(runs.run(config_for(read)))
        except runs.RUN_ERRORS:
            pass  # the page's thread says why, as for any setting that cannot run
    return read, time.perf_counter() - started


def _prepare(trace) -> None:
    """What the page's views will read of a run, computed here and kept where they look it up (the summary,
    the requests' timing, the lanes', strips' and log's data): the page's thread then only sends it."""
    trace.summary()
    trace.timing()
    for view, build in (("lanes", lane_view_data), ("strips", strip_series), ("logs", log_html)):
        derived(view, trace, build)


def _known_gain(cfg: RunConfig | None):
    """The unit comparison of `cfg` when both of its runs are known (no simulation), else None."""
    if cfg is None:
        return None
    base = cfg.replace(arrival="all-at-once") if cfg.arrival != "all-at-once" else cfg
    if not all(runs.has_throughput(base.replace(unit=u)) for u in ("pass", "request")):
        return None
    return your_workload.unit_gain(cfg)


def gain_sentence(cfg: RunConfig, gain) -> str:
    """Per pass against per request, in one sentence with both numbers and their ratio."""
    if gain is None or math.isnan(gain.gain):
        return "Per pass against per request: these settings cannot run both ways."
    queued = " with every request queued at once" if gain.queued_at_once else ""
    allocation = "reserving up front" if cfg.allocation == "reserve" else "on demand"
    return (f"Per pass (continuous batching): <b>{gain.per_pass_tok_s:,.0f}</b> tokens/s; per request (static "
            f"batches): <b>{gain.per_request_tok_s:,.0f}</b> tokens/s, at {cfg.max_num_seqs:,} slots, "
            f"{cfg.pool_gib:g} GiB, {allocation}{queued}. On this workload continuous batching gives "
            f'<b class="yw-gain-value" data-gain="{gain.gain:.4f}">{gain.gain:,.2f}\u00d7</b>.')
