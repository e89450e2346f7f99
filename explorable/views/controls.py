"""The sidebar: widgets generated from the state's parameters, quick stops for the values the course uses,
an advanced section (model, GPU, token budget, vLLM v0.33's admission gate) and a reset button.

Sliders feed the state only on release (`throttled=True`), so a drag costs one run, not one per pixel.
"""
from __future__ import annotations

import html
import math

import panel as pn
import param
from bokeh.models import CustomJSTickFormatter

from explorable.page.assets import INACTIVE_STYLES, stylesheet, toggled_styles
from explorable.patches.crossed_changes import settle_crossings
from explorable.patches.prompt_changes import answer_at_once
from explorable.state.store import PRODUCTION_NAMES, ExplorableState
from explorable.views.memory_controls import MemoryControls

# Values the course walks through, one click away (and reachable by Tab + Enter).
SEQ_STOPS = (1, 8, 32, 64, 128, 256, 512)
POOL_STOPS = (2, 8, 16, 32, 64)
SPREAD_STOPS = (1, 4, 16, 32)
DECLARED_STOPS = (1.0, 2.0, 4.0, 8.0)
RATE_STOPS = (1.0, 4.0, 8.0, 12.0, 16.0, 32.0)


def log_rate_slider(state: ExplorableState, **slider) -> pn.widgets.FloatSlider:
    """The request rate on a log scale: the slider moves log2(rate), its label shows req/s, and the state
    holds req/s (rounded to 3 significant digits, so links stay short)."""
    p = state.param.request_rate
    lo, hi = (math.log2(b) for b in p.bounds)
    widget = pn.widgets.FloatSlider(
        label=p.label, start=lo, end=hi, step=0.125, value=math.log2(state.request_rate),
        format=CustomJSTickFormatter(code="return (2 ** tick).toPrecision(3)"), css_classes=["ctl-request_rate"],
        **{k: v for k, v in slider.items() if k != "throttled"})

    def to_state(event):
        state.request_rate = float(f"{2 ** event.new:.3g}")

    def to_widget(event):
        if abs(2 ** widget.value - event.new) > 1e-3 * event.new:
            widget.value = math.log2(event.new)

    widget.param.watch(to_state, "value_throttled")
    state.param.watch(to_widget, "request_rate")
    return widget


def _stops(state: ExplorableState, name: str, values, fmt: str) -> pn.widgets.RadioButtonGroup:
    """One click to each quick stop of control `name`: a button group whose lit button is the current value
    when it is one of the stops (none lights between them).

    One Bokeh widget for the row instead of a Button per stop: every session builds and sends it, and every
    page draws it, so this is a few models instead of two dozen (about 5 ms of server CPU each per page)."""
    labels = {fmt.format(v): v for v in values}
    group = pn.widgets.RadioButtonGroup(options=labels, value=None, margin=(0, 8, 8, 8), stylesheets=[stylesheet()],
                                        css_classes=["button-row", "stops", f"stop-{name}"])

    def to_state(event):
        if event.new is not None and getattr(state, name) != event.new:
            setattr(state, name, event.new)

    def to_widget(*_):
        current = getattr(state, name)
        group.value = next((v for v in values if v == current), None)

    group.param.watch(to_state, "value")
    state.param.watch(to_widget, name)
    to_widget()
    answer_at_once(group)
    settle_crossings(group)
    return group


def _note(text: str, classes=("control-note",)) -> pn.pane.HTML:
    return pn.pane.HTML(f"<div>{text}</div>", css_classes=list(classes), stylesheets=[stylesheet()],
                        margin=(0, 10, 6, 10), sizing_mode="stretch_width")


class Controls(pn.viewable.Viewer):
    """Every control of the state, grouped as the course introduces them."""

    state = param.ClassSelector(class_=ExplorableState)
    pool_stops = param.List(default=list(POOL_STOPS), doc="the pool's quick stops (GiB)")
    advanced_note = param.String(default="", doc="a line atop the advanced section (the static build's)")
    grid_only = param.Boolean(default=False, doc="the static build: only the controls its grid holds; the others, "
                                                 "fixed at their starting values, are named in advanced_note")

    def __init__(self, **params):
        super().__init__(**params)
        s = self.state
        slider = dict(throttled=True, sizing_mode="stretch_width", margin=(4, 12, 0, 12))
        self.max_num_seqs = pn.widgets.IntSlider.from_param(s.param.max_num_seqs, css_classes=["ctl-max_num_seqs"],
                                                            **slider)
        self.pool_gib = pn.widgets.FloatSlider.from_param(s.param.pool_gib, css_classes=["ctl-pool_gib"],
                                                          format="0.0", **slider)
        self.allocation = pn.widgets.RadioButtonGroup.from_param(
            s.param.allocation, css_classes=["ctl-allocation"], sizing_mode="stretch_width", margin=(4, 12),
            color="primary", variant="outline")
        self.declared_multiple = pn.widgets.FloatSlider.from_param(
            s.param.declared_multiple, css_classes=["ctl-declared_multiple"], format="0.0", **slider)
        self.unit = pn.widgets.RadioButtonGroup.from_param(
            s.param.unit, css_classes=["ctl-unit"], sizing_mode="stretch_width", margin=(4, 12),
            color="primary", variant="outline")
        self.spread = pn.widgets.FloatSlider.from_param(s.param.spread, css_classes=["ctl-spread"], format="0.0",
                                                        **slider)
        self.model = pn.widgets.Select.from_param(s.param.model, sizing_mode="stretch_width", margin=(4, 12))
        self.gpu = pn.widgets.Select.from_param(s.param.gpu, sizing_mode="stretch_width", margin=(4, 12))
        self.max_num_batched_tokens = pn.widgets.IntSlider.from_param(
            s.param.max_num_batched_tokens, css_classes=["ctl-max_num_batched_tokens"], **slider)
        self.full_isl = pn.widgets.Checkbox.from_param(s.param.scheduler_reserve_full_isl, margin=(8, 12))
        self.prefix_caching = pn.widgets.Checkbox.from_param(
            s.param.enable_prefix_caching, css_classes=["ctl-enable_prefix_caching"], margin=(8, 12))
        self.system_prompt_len = pn.widgets.IntSlider.from_param(
            s.param.system_prompt_len, css_classes=["ctl-system_prompt_len"], format="0,0", **slider)
        self.turns = pn.widgets.IntSlider.from_param(s.param.turns, css_classes=["ctl-turns"], **slider)
        self.prefix_note = _note("")
        s.param.watch(self._prefix_note, ["enable_prefix_caching", "system_prompt_len", "turns"])
        self._prefix_note()
        self.arrival = pn.widgets.RadioButtonGroup.from_param(
            s.param.arrival, css_classes=["ctl-arrival"], sizing_mode="stretch_width", margin=(4, 12),
            color="primary", variant="outline")
        self.request_rate = log_rate_slider(s, **slider)
        self.burstiness = pn.widgets.FloatSlider.from_param(s.param.burstiness, css_classes=["ctl-burstiness"],
                                                            format="0.0", step=0.1, **slider)
        self.slo_ttft_ms = pn.widgets.FloatSlider.from_param(s.param.slo_ttft_ms, css_classes=["ctl-slo_ttft_ms"],
                                                             format="0,0", step=10, end=10_000, **slider)
        self.slo_tpot_ms = pn.widgets.FloatSlider.from_param(s.param.slo_tpot_ms, css_classes=["ctl-slo_tpot_ms"],
                                                             format="0", step=1, end=200, **slider)
        self.traffic_note = _note("")
        s.param.watch(self._traffic_note, "arrival")
        self._traffic_note()
        committing = (self.allocation, self.unit, self.arrival, self.model, self.gpu, self.full_isl, self.prefix_caching)
        answer_at_once(*committing)
        settle_crossings(*committing)
        self.reset = pn.widgets.Button(label="Reset to the starting point", css_classes=["reset"],
                                       sizing_mode="stretch_width", margin=(10, 12),
                                       stylesheets=[stylesheet()])
        self.reset.on_click(lambda _e: self.state.reset())
        self.declared_note = _note("")
        s.param.watch(self._declared_note, "allocation")
        self._declared_note()
        # Said, not refused: the course's pool sweep itself goes past what fits beside the weights on a GPU.
        self.pool_warning = _note("", classes=("control-note", "pool-warning"))
        s.param.watch(self._pool_warning, "pool_warning")
        self._pool_warning()
        self.memory = MemoryControls(state=s)
        self.pool_note = _note("")
        s.param.watch(self._pool_note, "gpu_memory_utilization")
        self._pool_note()

    def _declared_note(self, *_):
        if self.state.allocation == "reserve":
            text = "Read at admission: each request reserves its prompt plus this many times its real output."
            inactive = False
        else:
            text = "Only read when reserving up front. On demand, the scheduler never looks at max_tokens."
            inactive = True
        self.declared_note.object = f"<div>{text}</div>"
        # Inline styles, not css_classes: a class change makes Bokeh rebuild the component.
        self.declared_note.styles = toggled_styles(INACTIVE_STYLES, inactive)
        self.declared_multiple.styles = toggled_styles(INACTIVE_STYLES, inactive)

    def _traffic_note(self, *_):
        arriving = self.state.arrival != "all-at-once"
        text = ("Requests arrive at random, this many per second on average; the batch is whatever traffic has "
                "supplied. Burstiness 1 is a Poisson process, lower bunches them." if arriving else
                "All 256 requests are queued at 0 s: the article's offline experiment. Choose arriving to serve them "
                "as traffic.")
        self.traffic_note.object = f"<div>{text}</div>"
        for widget in (self.request_rate, self.burstiness, self.slo_ttft_ms, self.slo_tpot_ms):
            widget.styles = toggled_styles(INACTIVE_STYLES, not arriving)

    def _prefix_note(self, *_):
        s = self.state
        if s.system_prompt_len and s.turns > 1:
            text = "A shared system prompt and conversations do not combine here: set one of them back."
        elif not s.enable_prefix_caching and (s.system_prompt_len or s.turns > 1):
            text = ("Prompts now share their opening tokens, but with prefix caching off (KV cache, above) every "
                    "request computes them again: nothing changes until you switch it on.")
        else:
            text = ("Conversations: each turn's prompt repeats the previous turn's prompt and answer. Both only pay "
                    "off with prefix caching on (KV cache, above).")
        self.prefix_note.object = f"<div>{text}</div>"

    def _pool_note(self, *_):
        sized = self.state.gpu_memory_utilization is not None
        self.pool_note.object = ("<div>Overruled: --gpu-memory-utilization sizes the pool (GPU memory, below). "
                                 "Choose the GiB slider there to set it by hand.</div>" if sized else "<div></div>")
        self.pool_note.visible = sized
        self.pool_gib.styles = toggled_styles(INACTIVE_STYLES, sized)

    def _pool_warning(self, *_):
        self.pool_warning.object = f"<div>{html.escape(self.state.pool_warning)}</div>"
        self.pool_warning.visible = bool(self.state.pool_warning)

    def __panel__(self):
        s = self.state
        heading = lambda text: pn.pane.HTML(f"<h3>{text}</h3>", css_classes=["group-heading"],  # noqa: E731
                                            stylesheets=[stylesheet()], margin=(10, 12, 0, 12))
        fixed = [_note(html.escape(self.advanced_note), ("control-note", "fixed-note"))] if self.advanced_note else []
        # The static build draws no control a reader could not move (each is a dozen views to build on a page
        # open): its note names their fixed values instead.
        grid = self.grid_only
        advanced_widgets = [] if grid else [self.model, self.gpu, self.max_num_batched_tokens, self.full_isl]
        # One child: a folded Card hides each of its children as it is drawn, and each hiding lays out the
        # whole page again (six children cost six page layouts on every page open; one costs one).
        advanced = pn.Card(
            pn.Column(*fixed, *advanced_widgets,
                      _note("Simulated on a roofline clock; the scheduler follows vLLM V1 (v0.11 rules)."),
                      sizing_mode="stretch_width", margin=0),
            title="Advanced", collapsed=True, sizing_mode="stretch_width", margin=(8, 10),
            css_classes=["advanced"],
        )
        return pn.Column(
            heading("Scheduler"),
            self.max_num_seqs, _stops(s, "max_num_seqs", SEQ_STOPS, "{}"),
            _note("Stops admission at this many running sequences. Nothing tries to fill it."),
            self.unit,
            _note("Per pass is continuous batching (vLLM; TensorRT-LLM's in-flight batching); per request is "
                  f"static batching ({PRODUCTION_NAMES['request']})."),
            heading("KV cache"),
            self.pool_gib, _stops(s, "pool_gib", self.pool_stops, "{:g} GiB"), self.pool_note, self.pool_warning,
            self.allocation,
            _note(f"On demand may evict ({PRODUCTION_NAMES['on-demand']}). Reserving up front never does (Orca; "
                  f"{PRODUCTION_NAMES['reserve']})."),
            self.declared_multiple, _stops(s, "declared_multiple", DECLARED_STOPS, "{:g}x"), self.declared_note,
            *([] if grid else [
                self.prefix_caching,
                _note("vLLM's --enable-prefix-caching: a prompt that starts like one already computed (a shared "
                      "system prompt, or its own after an eviction) reuses those cache blocks instead of computing "
                      "them. Off by default: the article's figures assume it."),
                heading("GPU memory"), self.memory]),
            heading("Workload"),
            self.spread, _stops(s, "spread", SPREAD_STOPS, "{}x"),
            _note("256 requests; total output stays 65,536 tokens at every spread."),
            *([] if grid else [
                self.system_prompt_len, self.turns, self.prefix_note,
                heading("Traffic"),
                self.arrival, self.request_rate, _stops(s, "request_rate", RATE_STOPS, "{:g}/s"), self.burstiness,
                self.traffic_note,
                self.slo_ttft_ms, self.slo_tpot_ms,
                _note("SLO targets: goodput counts the requests per second whose TTFT and TPOT both meet them.")]),
            advanced,
            self.reset,
            css_classes=["controls"], sizing_mode="stretch_width", margin=0,
        )
