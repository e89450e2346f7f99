"""The guided walk through "Your workload": a trace shipped with the explorable (assets/samples, in BurstGPT's
layout), what continuous batching buys on it, and a vLLM log diagnosed. Each step does what a reader would do
by hand (upload, set two controls, paste and press Diagnose), so the reader sees where each thing lives.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
import panel as pn
import param

from explorable.views.assets import stylesheet
from explorable.state import your_workload
from explorable.views.state_view import StateView, answer_reader
from explorable.patches.text_updates import TextHTML


@dataclass(frozen=True)
class WalkStep:
    title: str
    text: str
    action: str  # what the step does: "trace", "compare" or "diagnose"


WALK = (
    WalkStep("A day's shape",
             "This loads a small trace shipped with the explorable, in BurstGPT's layout (a chat service's requests: "
             "when each came, its prompt and response tokens; a few failed ones, with 0 response tokens, are left "
             "out). The histogram marks p50 and p99 of completion tokens; their ratio is the first number to "
             "measure on your own traffic. Every view above now shows these requests, arriving at the file's times.",
             "trace"),
    WalkStep("What continuous batching buys",
             "The same requests queued all at once, with 64 slots, as in the article's boundary experiment. Below the "
             "histogram, the same workload runs per pass and per request: their ratio is the gain from continuous "
             "batching on this traffic, a property of its length distribution.",
             "compare"),
    WalkStep("Diagnose a server",
             "A vLLM log (start-up lines and two stats lines) is pasted under Diagnose my server and read: with "
             "--max-num-seqs 256, Running sits at 83 with 131 waiting and the cache 99.6% full, memory's cap. Press "
             "'Set the explorable to this server' to run it here.",
             "diagnose"),
)


WALK_GROUP_CLASS = "yw-step-button"  # (the page names the group by it: explorable.page.layout.group_names)


class WorkloadGuide(StateView):
    """The walk's numbered steps and the chosen step's text."""

    section = param.Parameter(doc="the YourWorkload section whose parts the steps use")
    watches = ()  # a step acts when chosen; the section draws what follows

    def build(self) -> None:
        self.buttons = pn.widgets.RadioButtonGroup(
            options={f"{i + 1}. {step.title}": i for i, step in enumerate(WALK)},
            css_classes=["button-row", WALK_GROUP_CLASS], sizing_mode="stretch_width", margin=(2, 6),
            stylesheets=[stylesheet()])
        self.buttons.value = None  # (Panel starts a button group at its first option, whatever it is given)
        self.buttons.param.watch(answer_reader(lambda e: e.new is not None and self.go(e.new)), "value")
        self.text = TextHTML(self._text(None), stylesheets=[stylesheet()], margin=(2, 8), sizing_mode="stretch_width",
                             css_classes=["yw-step-text"])

    def _text(self, index: int | None) -> str:
        if index is None:
            return ('<div class="yw-walk" data-step="0">A guided walk: three steps with a trace shipped here, then '
                    "try your own.</div>")
        step = WALK[index]
        return (f'<div class="yw-walk" data-step="{index + 1}"><span class="step-no">Step {index + 1} of '
                f"{len(WALK)}</span> <b>{html.escape(step.title)}.</b> {html.escape(step.text)}</div>")

    def go(self, index: int) -> None:
        """Do step `index`, as a reader would by hand."""
        section, state = self.section, self.section.state
        action = WALK[index].action
        with pn.io.hold():
            self.text.object = self._text(index)
            if action == "trace":
                section.load_sample()
            elif action == "compare":
                if state.uploaded is None:
                    section.load_sample()
                state.param.update(arrival="all-at-once", max_num_seqs=64)
            else:
                section.diagnosis.paste.param.update(value=your_workload.sample_log(),
                                                     value_input=your_workload.sample_log())
                section.diagnosis.max_num_seqs.value = 256
                section.diagnosis.diagnose()

    def __panel__(self):
        return pn.Column(self.buttons, self.text, sizing_mode="stretch_width", margin=0, css_classes=["yw-guide"])
