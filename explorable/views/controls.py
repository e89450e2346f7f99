"""The sidebar: one widget per declared control (explorable.state.control_specs), made from the state's
parameter, with the quick stops and notes its declaration names, in sections as the course introduces
them (the last, advanced, folded away), and a reset button.

Sliders feed the state only on release (`value_throttled`), so a drag costs one run, not one per pixel.
"""
from __future__ import annotations

import html

import panel as pn
import param
from bokeh.models import CustomJSTickFormatter

from explorable.views.assets import INACTIVE_STYLES, stylesheet, toggled_styles
from explorable.patches.crossed_changes import settle_crossings
from explorable.patches.prompt_changes import answer_at_once
from explorable.state.control_specs import CONTROL_SPECS, LOG_STEP, SECTIONS, YOUR_WORKLOAD, ControlSpec
from explorable.state.store import ExplorableState
from explorable.views.memory_controls import CacheLine, OptionalSlider
from explorable.views.state_view import StateView, answer_reader

SLIDER_LAYOUT = dict(sizing_mode="stretch_width", margin=(4, 12, 0, 12))
# Optional number controls (None: unset) and what the page calls their unset state.
OPTIONAL_SLIDERS = {"gpu_memory_utilization": "GiB slider"}
CHOICE_LAYOUT = dict(sizing_mode="stretch_width", margin=(4, 12))


def control_widget(state: ExplorableState, spec: ControlSpec) -> pn.widgets.Widget:
    """The widget of one control, from its parameter (its range, label and text) and its declaration."""
    p = state.param[spec.name]
    # Every control gets the page's stylesheet: its keyboard focus is drawn by it (a visible outline).
    common = dict(css_classes=[f"ctl-{spec.name}"], tags=[{"control": spec.name}], stylesheets=[stylesheet()])
    if isinstance(p, param.Boolean):
        return pn.widgets.Checkbox(label=p.label, value=getattr(state, spec.name), margin=(8, 12), **common)
    if isinstance(p, param.Selector):
        options = dict(p.names) if p.names else list(p.objects)
        kind = pn.widgets.RadioButtonGroup if spec.setting.choice_labels and not spec.dropdown else pn.widgets.Select
        extra = dict(color="primary", variant="outline") if kind is pn.widgets.RadioButtonGroup else dict(label=p.label)
        if kind is pn.widgets.Select and isinstance(options, dict):
            # A drop-down made with the value None shows no choice at all (Panel leaves a None value out of
            # the model it first sends): its "unset" choice stands for None in the widget (see `link`).
            options = {label: to_choice(value) for label, value in options.items()}
        return kind(options=options, value=to_choice(getattr(state, spec.name)), description=p.doc,
                    **CHOICE_LAYOUT, **extra, **common)
    return _slider(state, spec, p, common)


UNSET = "unset"  # a drop-down's value for an optional setting left unset (None in the state)


def to_choice(value):
    """A state's value as its control's widget holds it (None: UNSET; only a drop-down offers None)."""
    return UNSET if value is None else value


def from_choice(value):
    """A widget's value as the state holds it."""
    return None if value == UNSET else value


def _slider(state: ExplorableState, spec: ControlSpec, p: param.Number, common: dict) -> pn.widgets.Widget:
    lo, hi = p.bounds
    value = getattr(state, spec.name)
    if spec.log_scale:  # the slider moves log2 of the value; its label shows the value
        return pn.widgets.FloatSlider(
            label=p.label, start=spec.to_slider(lo), end=spec.to_slider(hi), step=LOG_STEP,
            value=spec.to_slider(value), format=CustomJSTickFormatter(code="return (2 ** tick).toPrecision(3)"),
            **SLIDER_LAYOUT, **common)
    kind = pn.widgets.IntSlider if isinstance(p, param.Integer) else pn.widgets.FloatSlider
    step = spec.slider_step or p.step or (1 if kind is pn.widgets.IntSlider else 0.1)
    extra = {"format": spec.number_format} if spec.number_format else {}
    return kind(label=p.label, start=lo, end=spec.slider_end or hi, step=step, value=value, **extra,
                **SLIDER_LAYOUT, **common)


def link(state: ExplorableState, spec: ControlSpec, widget: pn.widgets.Widget) -> None:
    """Keep `widget` and the state's control in step both ways. A slider feeds the state on release only
    (`value_throttled`: a drag costs one run, not one per pixel); the reader's change is answered as one
    message (`answer_reader`)."""
    name = spec.name
    slider = "value_throttled" in widget.param

    @answer_reader
    def to_state(event):
        value = spec.from_slider(event.new) if slider else from_choice(event.new)
        if getattr(state, name) != value:
            setattr(state, name, value)

    def to_widget(event):
        if not slider:
            widget.value = to_choice(event.new) if UNSET in getattr(widget, "values", ()) else event.new
            return
        position = spec.to_slider(event.new)
        if spec.log_scale and abs(spec.from_slider(widget.value) - event.new) <= 1e-3 * event.new:
            return  # the slider already shows it (the state keeps 3 significant digits of 2 ** position)
        with param.edit_constant(widget):  # value_throttled too: a later release at the old value must count
            widget.param.update(value=position, value_throttled=position)

    widget.param.watch(to_state, "value_throttled" if slider else "value")
    state.param.watch(to_widget, name)


def _stops(state: ExplorableState, spec: ControlSpec, values=None) -> pn.widgets.RadioButtonGroup:
    """One click to each quick stop of the control: a button group whose lit button is the current value
    when it is one of the stops (none lights between them).

    One Bokeh widget for the row instead of a Button per stop: every session builds and sends it, and every
    page draws it, so this is a few models instead of two dozen (about 5 ms of server CPU each per page)."""
    name = spec.name
    values = [spec.typed(v) for v in (values if values is not None else spec.stops)]
    labels = {spec.stop_label.format(v): v for v in values}
    group = pn.widgets.RadioButtonGroup(options=labels, value=None, margin=(0, 8, 8, 8), stylesheets=[stylesheet()],
                                        css_classes=["button-row", "stops", f"stop-{name}"], tags=[{"stops": name}])

    @answer_reader
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


class Controls(StateView):
    """Every control of the state, grouped as the course introduces them (explorable.state.control_specs)."""

    watches = ()  # each note follows the controls it speaks of
    pool_stops = param.List(default=list(CONTROL_SPECS["pool_gib"].stops), doc="the pool's quick stops (GiB)")
    advanced_note = param.String(default="", doc="a line atop the advanced section (the static build's)")
    grid_only = param.Boolean(default=False, doc="the static build: only the controls its grid holds; the others, "
                                                 "fixed at their starting values, are named in advanced_note")
    held = param.List(default=[], doc="the static build: the controls it holds beside its grid's (around the steps of "
                                      "the guides it holds, and the SLO targets it computes in the page)")

    def build(self) -> None:
        s = self.state
        self.widgets: dict[str, pn.widgets.Widget] = {}
        for spec in CONTROL_SPECS.values():
            if spec.section == YOUR_WORKLOAD:  # (drawn by that section: explorable/views/your_workload.py)
                continue
            if spec.name in OPTIONAL_SLIDERS:  # unset or a number: a switch and a slider, linked on their own
                self.utilization = OptionalSlider(s, spec, OPTIONAL_SLIDERS[spec.name])
                self.widgets[spec.name] = self.utilization.panel
                setattr(self, spec.name, self.utilization.slider)
                continue
            widget = control_widget(s, spec)
            link(s, spec, widget)
            self.widgets[spec.name] = widget
            setattr(self, spec.name, widget)  # controls.max_num_seqs: what tests and benchmarks drive
        committing = [w for w in self.widgets.values() if "value_throttled" not in w.param
                      and isinstance(w, pn.widgets.Widget)]
        answer_at_once(*committing)
        settle_crossings(*committing)
        self.prefix_note = _note("")
        s.param.watch(self._prefix_note, ["enable_prefix_caching", "system_prompt_len", "turns"])
        self._prefix_note()
        self.traffic_note = _note("")
        s.param.watch(self._traffic_note, "arrival")
        self._traffic_note()
        self.reset = pn.widgets.Button(label="Reset to the starting point", css_classes=["reset"],
                                       sizing_mode="stretch_width", margin=(10, 12),
                                       stylesheets=[stylesheet()])
        self.reset.on_click(answer_reader(lambda _e: self.state.reset()))
        self.declared_note = _note("")
        s.param.watch(self._declared_note, "allocation")
        self._declared_note()
        # Said, not refused: the course's pool sweep itself goes past what fits beside the weights on a GPU.
        self.pool_warning = _note("", classes=("control-note", "pool-warning"))
        s.param.watch(self._pool_warning, "pool_warning")
        self._pool_warning()
        # While --gpu-memory-utilization sizes the pool, the GiB slider is overruled: greyed, and said.
        self.pool_note = _note("")
        s.param.watch(self._pool_note, "gpu_memory_utilization")
        self._pool_note()
        self.cache_line = CacheLine(state=s)
        # Notes that change with the state, under the control they speak of (after its quick stops).
        self.live_notes = {"pool_gib": [self.pool_note, self.pool_warning], "declared_multiple": self.declared_note,
                           "turns": self.prefix_note, "burstiness": self.traffic_note,
                           "max_model_len": self.cache_line}

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

    def _section(self, section: str) -> list:
        """The section's controls, each with its quick stops and notes; only the grid's in the static build."""
        out = []
        for spec in CONTROL_SPECS.values():
            if spec.section != section or (self.grid_only and not spec.static_stops and spec.name not in self.held):
                continue
            out.append(self.widgets[spec.name])
            if spec.stops:
                out.append(_stops(self.state, spec, self.pool_stops if spec.name == "pool_gib" else None))
            notes = self.live_notes.get(spec.name, [])
            out += notes if isinstance(notes, list) else [notes]
            if spec.note:
                out.append(_note(spec.note))
        return out

    def __panel__(self):
        heading = lambda text: pn.pane.HTML(f"<h3>{text}</h3>", css_classes=["group-heading"],  # noqa: E731
                                            stylesheets=[stylesheet()], margin=(10, 12, 0, 12))
        fixed = [_note(html.escape(self.advanced_note), ("control-note", "fixed-note"))] if self.advanced_note else []
        sections = []
        for section in SECTIONS[:-1]:
            shown = self._section(section)
            sections += [heading(section), *shown] if shown else []
        # The last section folds away. One child: a folded Card hides each of its children as it is drawn, and
        # each hiding lays out the whole page again (six children cost six page layouts on every page open).
        # The static build draws no control a reader could not move (each is a dozen views to build on a page
        # open): its note names their fixed values instead.
        advanced = pn.Card(
            pn.Column(*fixed, *self._section(SECTIONS[-1]),
                      _note("Simulated on a roofline clock; the scheduler follows vLLM V1 (v0.11 rules, or 0.34's defaults)."),
                      sizing_mode="stretch_width", margin=0),
            title=SECTIONS[-1], collapsed=True, sizing_mode="stretch_width", margin=(8, 10),
            css_classes=["advanced"],
        )
        # As tall as the controls, not at most its parent's height (BokehJS gives a layout `max-height: 100%`): in
        # a window shorter than the sidebar (which then scrolls by itself) the controls ran on below their own
        # box, and the share link after it was drawn over the GPU memory section.
        return pn.Column(*sections, advanced, self.reset, css_classes=["controls"], sizing_mode="stretch_width",
                         margin=0, styles={"max-height": "none"})
