"""Every click on a button group and every choice in a list or a box is applied at the next turn of the loop,
not after Panel's 50 ms debounce (explorable.patches.prompt_changes)."""
from __future__ import annotations

import panel as pn
import pytest

from explorable import patches
from explorable.page.layout import build_app
from explorable.patches.prompt_changes import COMMITTED


@pytest.fixture(autouse=True)
def installed_patches():
    """What configure() does in a served process (idempotent): these tests read what the patches give widgets."""
    patches.install()


def test_every_committing_widget_of_the_page_answers_at_once():
    app = build_app(sync=False)
    widgets = [w for w in pn.panel(app).select(pn.widgets.Widget) if type(w) in COMMITTED]
    assert len(widgets) >= 12  # the toggles, lists, boxes, the stops and the three guides' steps
    late = [(type(w).__name__, w.css_classes) for w in widgets
            if COMMITTED[type(w)] not in w._priority_changes]
    assert not late, late
    # Sliders keep Panel's debounce: it merges a flood of releases into fewer updates.
    sliders = [w for w in pn.panel(app).select(pn.widgets.Widget)
               if isinstance(w, (pn.widgets.IntSlider, pn.widgets.FloatSlider))]
    assert sliders and not any(w._priority_changes for w in sliders)


def test_every_committing_widget_of_the_page_settles_crossed_changes():
    """Each keeps a reader's queued change over the server's and re-sends its value after a reader's
    (explorable.patches.crossed_changes; tests/explorable/test_crossed_clicks_browser.py shows both on a real page)."""
    app = build_app(sync=False)
    widgets = [w for w in pn.panel(app).select(pn.widgets.Widget) if type(w) in COMMITTED]
    unsettled = [(type(w).__name__, w.css_classes) for w in widgets if "_update_model" not in vars(w)]
    assert not unsettled, unsettled
