"""A reader's click, release or choice reaches the page's state at the next turn of the event loop, not 50 ms later.

Panel holds every property change a browser sends for 50 ms (`Syncable._debounce`) before it applies it, so
that a stream of them (a slider being dragged reports its value at every step) becomes one update. A release
(`value_throttled`), a click on a button group (`active`), a choice in a list or a tick in a box is a single
change: waiting adds 50 ms to what the reader feels and merges nothing. Panel's own `_priority_changes` names
the properties it applies at once; this sets it for the properties that commit a control. A slider's `value`
while dragging keeps the debounce (it runs nothing in this app: the state follows `value_throttled`).
"""
from __future__ import annotations

import panel as pn

# The Bokeh property a browser sets when the reader commits a control, by Panel widget type.
COMMITTED: dict[type, str] = {
    pn.widgets.RadioButtonGroup: "active",
    pn.widgets.IntSlider: "value_throttled",
    pn.widgets.FloatSlider: "value_throttled",
    pn.widgets.Select: "value",
    pn.widgets.Checkbox: "active",
}


def answer_at_once(*widgets: pn.widgets.Widget) -> None:
    """Apply each widget's committing change at the next turn of the loop (see the module's docstring)."""
    for widget in widgets:
        prop = next(p for kind, p in COMMITTED.items() if isinstance(widget, kind))
        widget._priority_changes = [*type(widget)._priority_changes, prop]
