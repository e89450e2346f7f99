"""Every control the reader commits (a release, a click, a choice) is applied at the next turn of the loop,
not after Panel's 50 ms debounce (explorable.prompt_changes)."""
from __future__ import annotations

import panel as pn

from explorable.layout import build_app
from explorable.prompt_changes import COMMITTED


def test_every_committing_widget_of_the_page_answers_at_once():
    app = build_app(sync=False)
    widgets = [w for w in pn.panel(app).select(pn.widgets.Widget) if type(w) in COMMITTED]
    assert len(widgets) >= 20  # the sliders, toggles, lists, boxes, the stops and the three guides' steps
    late = [(type(w).__name__, w.css_classes) for w in widgets
            if COMMITTED[type(w)] not in w._priority_changes]
    assert not late, late
    # A slider being dragged still goes through the debounce (its stream of values becomes one update).
    assert all("value" not in w._priority_changes for w in widgets if isinstance(w, pn.widgets.IntSlider))
