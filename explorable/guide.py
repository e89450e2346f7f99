"""Guided steps: the course's experiments in order, each a preset of the controls and a few words on what
to look at. Choosing a step sets every control (so a step always shows the same run, wherever the reader
has wandered); the step whose settings match the page is highlighted.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

import panel as pn
import param

from explorable.assets import mark_current, stylesheet
from explorable.state import CONTROLS, ExplorableState


@dataclass(frozen=True)
class Step:
    title: str
    text: str
    settings: dict = field(default_factory=dict)  # changes from the defaults


STEPS = (
    Step(
        "As shipped",
        "256 requests wait in the queue; the scheduler re-decides the batch before every pass and hands out cache "
        "as tokens arrive, with room for 256 sequences. Before touching anything, compare the largest batch with "
        "the slots it was allowed. The cache, not the cap, decided where it stopped.",
    ),
    Step(
        "Cap at 64",
        "Fewer slots, more tokens per second. With 64 sequences the cache never overflows, nobody is evicted, no "
        "prompt is computed twice, and the amber lanes turn teal.",
        {"max_num_seqs": 64},
    ),
    Step(
        "Static batching",
        "Keep 64 slots but make the request the unit, and reserve each request's cache up front as static servers "
        "did: a batch is formed, runs until its longest member is done, then the next one forms. The grey "
        "stretches are requests queued behind slots that finished long ago and sit idle.",
        {"max_num_seqs": 64, "unit": "request", "allocation": "reserve"},
    ),
    Step(
        "Reserve up front",
        "Per-pass scheduling again, but a request is admitted only if its prompt plus everything it declares it "
        "might generate fits, as Orca does. Nothing is ever evicted; instead the batch shrinks, and much of the "
        "held cache never holds a token.",
        {"allocation": "reserve"},
    ),
    Step(
        "Declared max_tokens",
        "Clients here declare exactly what they generate. Drag the declared max_tokens up and watch the batch and "
        "the live share of the cache fall. Then switch allocation to on demand: the same slider changes nothing.",
        {"allocation": "reserve", "declared_multiple": 1.0},
    ),
    Step(
        "Uniform outputs",
        "Every request now generates 256 tokens, in static batches of 64. Flip the scheduling unit between request "
        "and pass: when everyone finishes together there is hardly an idle slot to refill, and the famous "
        "speed-up all but disappears.",
        {"spread": 1.0, "max_num_seqs": 64, "unit": "request"},
    ),
    Step(
        "Memory wall",
        "A 2 GiB pool with 512 slots. Every setting is in range and the engine serves, but it keeps admitting "
        "more than it can hold and pays in evictions and repeated prefill. This is thrashing: the lanes turn "
        "magenta.",
        {"pool_gib": 2.0, "max_num_seqs": 512},
    ),
)


def step_settings(state: ExplorableState, index: int) -> dict:
    """Every control's value for step `index`: the defaults plus the step's changes."""
    return {**state.defaults(), **STEPS[index].settings}


def settings_sentence(state: ExplorableState, index: int) -> str:
    """Every control step `index` changes from the starting point, by its sidebar label and value."""
    changes = STEPS[index].settings
    if not changes:
        return "This step sets every control to its starting point."
    named = []
    for name in CONTROLS:  # sidebar order
        if name in changes:
            p = state.param[name]
            shown = {v: k for k, v in (getattr(p, "names", None) or {}).items()}.get(changes[name], changes[name])
            shown = f"{shown:g}" if isinstance(shown, float) else str(shown)
            named.append(f"{p.label} {shown}" if p.label.startswith("--") else f"{p.label}: {shown}")
    return "This step sets " + "; ".join(named) + "; everything else to its starting point."


def matching_step(state: ExplorableState) -> int | None:
    """The step whose settings are exactly the current controls, if any."""
    current = state.control_values()
    for i in range(len(STEPS)):
        if step_settings(state, i) == current:
            return i
    return None


class Guide(pn.viewable.Viewer):
    """Numbered step buttons, the chosen step's text, and previous/next."""

    state = param.ClassSelector(class_=ExplorableState)
    chosen = param.Integer(default=0, bounds=(0, len(STEPS) - 1))

    def __init__(self, **params):
        super().__init__(**params)
        self.buttons = []
        for i, step in enumerate(STEPS):
            button = pn.widgets.Button(label=f"{i + 1}. {step.title}", css_classes=["step-button"],
                                       margin=(2, 2), stylesheets=[stylesheet()])
            button.on_click(lambda _event, i=i: self.go(i))
            self.buttons.append(button)
        self.prev = pn.widgets.Button(label="\u2190 previous", css_classes=["step-nav"], margin=(2, 3),
                                      stylesheets=[stylesheet()])
        self.next = pn.widgets.Button(label="next step \u2192", css_classes=["step-nav"], margin=(2, 3),
                                      stylesheets=[stylesheet()])
        self.prev.on_click(lambda _e: self.go(max(self.chosen - 1, 0)))
        self.next.on_click(lambda _e: self.go(min(self.chosen + 1, len(STEPS) - 1)))
        self.text = pn.pane.HTML("", stylesheets=[stylesheet()], margin=(0, 8),
                                 styles={"flex": "1 1 300px", "min-width": "0"})
        match = matching_step(self.state)
        self.chosen = match if match is not None else 0
        # Whether the controls have shown a step since the page opened: only then can the reader have moved
        # away from one. A link to a state that is no step opens without the "moved" hint.
        self.followed = match is not None
        self.state.param.watch(self._refresh, ["trace", "run_error"])
        self.param.watch(self._refresh, "chosen")
        self._refresh()

    def go(self, index: int) -> None:
        """Show step `index` and set every control to it."""
        self.followed = True
        self.chosen = index
        self.state.param.update(**step_settings(self.state, index))

    def _refresh(self, *_):
        match = matching_step(self.state)
        if match is not None and match != self.chosen:
            self.chosen = match  # the reader reached a step by hand: show its text (this re-enters once)
            return
        step = STEPS[self.chosen]
        self.followed = self.followed or match is not None
        drifted = match is None and self.followed
        with pn.io.hold():
            for i, button in enumerate(self.buttons):
                mark_current(button, i == match)
            self.prev.disabled = self.chosen == 0
            self.next.disabled = self.chosen == len(STEPS) - 1
            if drifted:
                hint = (' <span class="drifted">(you have moved the controls since; choose the step again to '
                        "return to it)</span>")
            elif match is None:  # opened from a link to settings of its own: nothing was moved
                hint = (' <span class="drifted">(this link opened settings that are none of the steps; choose a '
                        "step to follow the course from there)</span>")
            else:
                hint = ""
            self.text.object = (
                f'<div class="step-text" data-step="{self.chosen + 1}"><span class="step-no">Step {self.chosen + 1} '
                f"of {len(STEPS)}</span> <b>{step.title}.</b> {step.text} "
                f'<span class="step-sets">{html.escape(settings_sentence(self.state, self.chosen))}</span>{hint}</div>'
            )

    def __panel__(self):
        return pn.Column(
            pn.FlexBox(*self.buttons, flex_wrap="wrap", sizing_mode="stretch_width", css_classes=["step-row"], margin=0),
            # The buttons sit beside the text, or under it on a phone.
            pn.FlexBox(self.text, pn.Column(self.prev, self.next, margin=0, width=130), flex_wrap="wrap",
                       sizing_mode="stretch_width", margin=0),
            css_classes=["guide"], sizing_mode="stretch_width", margin=(0, 6),
        )
