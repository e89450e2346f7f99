"""A reader's click on a button group, or choice in a list or a box, reaches the page's state at the next turn of
the event loop, not 50 ms later.

Panel holds every property change a browser sends for 50 ms (`Syncable._debounce`) before it applies it, so
that a stream of them becomes one update. A click on a button group (`active`: the quick stops, the guided
steps, the allocation and unit toggles), a choice in a list or a tick in a box is a single change: waiting
adds 50 ms to what the reader feels and merges nothing. Panel's own `_priority_changes` names the properties
it applies at once; this sets it for those.

Sliders keep the debounce. A slider's release (`value_throttled`) follows its last `value` and joins that
change while it waits, so it would not come sooner; and under a flood of releases the debounce is what merges
them (the load test's flood phase computed twice the updates without it, and its other pages waited longer).

Written against Panel 1.9.4 (`Syncable._priority_changes`, read by `Syncable._server_change`). Off: those
changes wait Panel's 50 ms like every other.
"""
from __future__ import annotations

import panel as pn

from explorable.patches import switch

TESTED = {"panel": ("1.9.4", "1.10")}  # from the first version tried to the first release line not tried
# The Bokeh property a browser sets when the reader commits a control, by Panel widget type.
COMMITTED: dict[type, str] = {
    pn.widgets.RadioButtonGroup: "active",
    pn.widgets.Select: "value",
    pn.widgets.Checkbox: "active",
}


def committed_property(widget: pn.widgets.Widget) -> str:
    """The Bokeh property the reader's commit sets on `widget` (TypeError for a widget not in COMMITTED)."""
    prop = next((p for kind, p in COMMITTED.items() if isinstance(widget, kind)), None)
    if prop is None:
        raise TypeError(f"no committed property known for {type(widget).__name__}")
    return prop


install, uninstall, active = switch(
    "Widgets made from now on answer at once (`answer_at_once`); the widgets already made keep what they "
    "have.")


def answer_at_once(*widgets: pn.widgets.Widget) -> None:
    """Apply each widget's committing change at the next turn of the loop (see the module's docstring)."""
    if not active():
        return
    for widget in widgets:
        widget._priority_changes = [*type(widget)._priority_changes, committed_property(widget)]
