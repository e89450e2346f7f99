"""What an update asks of the browser: text and data change in place; no component is rebuilt.

In Chromium a change to a component's `css_classes`, a button's `button_type` or its stylesheets makes
Bokeh re-render that component (new <style> elements in its shadow root, a style recalculation of the
page: 40-190 ms each on 2 cores), while text, chart data, ranges and inline `styles` change in place
(a few ms). `benchmarks/browser_feel.py` measures the browser; this pins the mechanism without one.
"""
from __future__ import annotations

import panel as pn
import pytest
from bokeh.document import Document

from explorable.views.curves import Curves
from explorable.views.guide import STEPS
from explorable.page.layout import build_app

REBUILDS = {"css_classes", "button_type", "stylesheets", "button_style", "sizing_mode", "children"}


@pytest.fixture
def page(monkeypatch):
    pending = []
    monkeypatch.setattr(Curves, "changed", lambda self, *_: pending.append(self.refresh))
    app = build_app(sync=False)
    doc = Document()
    doc.add_root(pn.panel(app).get_root(doc))
    changed: list[tuple[str, str]] = []
    doc.on_change(lambda e: changed.append((type(e.model).__name__, getattr(e, "attr", ""))))

    def act(fn) -> list[tuple[str, str]]:
        changed.clear()
        fn()
        while pending:
            pending.pop()()
        return list(changed)

    return app, act


def test_clicks_change_text_and_data_in_place(page):
    app, act = page
    controls, guide = app.views["controls"], app.views["guide"]
    seq_stops = next(g for g in pn.panel(controls).select(pn.widgets.RadioButtonGroup)
                     if "stop-max_num_seqs" in g.css_classes)
    memory_wall = next(i for i, s in enumerate(STEPS) if s.title == "Memory wall")
    clicks = {
        "a --max-num-seqs stop": lambda: setattr(seq_stops, "value", 64),
        "the allocation toggle": lambda: setattr(app.state, "allocation", "reserve"),
        "a guided step": lambda: setattr(guide.step_buttons, "value", memory_wall),
    }
    for what, click in clicks.items():
        changes = act(click)
        assert changes, what
        rebuilt = [c for c in changes if c[1] in REBUILDS]
        assert not rebuilt, f"{what} rebuilds components: {rebuilt}"
        assert ("ColumnDataSource", "data") in changes and ("HTML", "text") in changes, what
