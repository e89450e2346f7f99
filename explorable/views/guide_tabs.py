"""One guide at a time: a tab per guide (explorable.views.guide.GUIDES, in their order), the chosen guide's
line and steps under them. Stacked, three guides of 7 + 5 + 3 steps put the readouts below a phone's
second screen; one at a time, the chosen guide's steps sit right above the readouts they change.

The page opens at the guide that holds its settings as a step (a link to a step under traffic opens the
traffic guide), else at the first, and follows the settings to another guide when they come to one of its
steps while the guide shown has none (switching prefix caching on shows the prefix guide's first step).
Choosing a tab changes no control: it only shows another guide.
"""
from __future__ import annotations

import html

import panel as pn
import param

from explorable.views.assets import stylesheet
from explorable.patches.crossed_changes import settle_crossings
from explorable.patches.prompt_changes import answer_at_once
from explorable.state.store import ExplorableState
from explorable.views.guide import GuideSpec, matching_step
from explorable.views.state_view import StateView, answer_reader


def guide_at(state: ExplorableState, specs: list[GuideSpec], shown: int | None = None) -> int | None:
    """The guide to show for the page's settings: `shown` while it has a step at them (or none does), else the
    first guide that has one; None when none has and nothing is shown yet."""
    if shown is not None and matching_step(state, specs[shown].steps) is not None:
        return shown
    return next((i for i, spec in enumerate(specs) if matching_step(state, spec.steps) is not None), shown)


def opening_guide(state: ExplorableState, specs: list[GuideSpec]) -> int:
    """The guide a page opens at: the first one with a step at the page's settings, else the first."""
    found = guide_at(state, specs)
    return 0 if found is None else found


class GuideTabs(StateView):
    """Tabs over the page's guides; only the chosen one is shown (with a single guide, no tabs)."""

    guides = param.List(item_type=tuple, doc="(GuideSpec, Guide) pairs, in tab order")
    chosen = param.Integer(default=0, bounds=(0, None), doc="the guide shown")

    def build(self) -> None:
        specs = [spec for spec, _ in self.guides]
        self.chosen = opening_guide(self.state, specs)
        self.tabs = pn.widgets.RadioButtonGroup(
            options={spec.label: i for i, spec in enumerate(specs)}, value=self.chosen,
            css_classes=["button-row", "guide-tabs"], sizing_mode="stretch_width", margin=(4, 0, 2, 0),
            stylesheets=[stylesheet()], visible=len(specs) > 1)
        answer_at_once(self.tabs)  # a click on a tab shows its guide at once, not after Panel's 50 ms debounce
        settle_crossings(self.tabs)  # the server moves the tabs too (following the settings): the reader's click wins
        self.panels = [
            pn.Column(
                pn.pane.HTML(f'<p class="guide-about">{html.escape(spec.about)}</p>', stylesheets=[stylesheet()],
                             sizing_mode="stretch_width", margin=(0, 4), visible=bool(spec.about) and len(specs) > 1),
                guide, css_classes=["guide-panel", f"guide-panel-{spec.css}"], sizing_mode="stretch_width",
                margin=0, visible=i == self.chosen)
            for i, (spec, guide) in enumerate(self.guides)
        ]
        self.tabs.param.watch(self._chose, "value")
        self.param.watch(self._show, "chosen")

    def refresh(self) -> None:
        """A new run: show the guide that has it as a step, if the one shown has not."""
        self.chosen = guide_at(self.state, [spec for spec, _ in self.guides], self.chosen)

    @answer_reader
    def _chose(self, event) -> None:
        if event.new is not None:
            self.chosen = event.new

    def _show(self, *_):
        with pn.io.hold():
            self.tabs.value = self.chosen
            for i, panel in enumerate(self.panels):
                panel.visible = i == self.chosen

    def __panel__(self):
        return pn.Column(self.tabs, *self.panels, css_classes=["guides"], sizing_mode="stretch_width", margin=0)
