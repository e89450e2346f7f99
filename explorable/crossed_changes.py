"""A control that both the reader and the server set (a lit quick stop or guided step, a toggle the steps set)
ends on the same value in the browser and on the server, whatever order their changes cross in.

Panel settles a conflict between the two sides in ways that lose the reader's change:
- A reader's change waits in Panel's queue (`_events`) until its turn. If the server sets that property
  meanwhile (a stop click processed first unlights the step the reader clicked next, or the compute budget
  applies both at once), Panel sends the server's value and deletes the queued change ("the Python update
  wins"): the click does nothing. `settle_crossings` keeps the queued change instead: it is applied next, and
  the reader's latest click wins, as it would have had the server been quicker.
- A server's change and the reader's can cross on the wire (within one round trip). The browser applies the
  server's older value over its own; the server applies the reader's, and Panel then holds back sending it
  again as an echo of the reader's change. The page shows one step lit while the controls are at another.
  Once the page's handlers have processed a reader's change, `settle_crossings` sends the property's value once
  more, in the patch that answers the change (a browser that already shows it changes nothing).
"""
from __future__ import annotations

from functools import partial

import panel as pn
from bokeh.document.events import ModelChangedEvent

# The Bokeh property a reader's commit sets, by Panel widget type.
PROPERTY: dict[type, str] = {
    pn.widgets.RadioButtonGroup: "active",
    pn.widgets.Select: "value",
    pn.widgets.Checkbox: "active",
}


def settle_crossings(*widgets: pn.widgets.Widget) -> None:
    """Keep each widget's queued reader change over a server change, and re-send its value after a reader's."""
    for widget in widgets:
        prop = next(p for kind, p in PROPERTY.items() if isinstance(widget, kind))
        _keep_queued(widget, prop)
        widget.param.watch(partial(_resend_after_reader, widget, prop), "value")


def _keep_queued(widget: pn.widgets.Widget, prop: str) -> None:
    update_model = widget._update_model

    def _update_model(events, msg, root, model, doc, comm):
        if prop in msg and prop in widget._events:
            # A newer change from the reader waits: it is applied next (it sets Panel's value and so the page's
            # state); sending the server's value now would overwrite it on the page and delete it here.
            msg = {k: v for k, v in msg.items() if k != prop}
        update_model(events, msg, root, model, doc, comm)

    widget._update_model = _update_model


def _resend_after_reader(widget: pn.widgets.Widget, prop: str, _event) -> None:
    doc = pn.state.curdoc
    if doc is None or doc.session_context is None or prop not in widget._in_process__events.get(doc, {}):
        return  # the server changed it: Bokeh sends that as usual
    # Watched last, so the change's own handlers (the state, the lighting) have run: the value is final. Sent
    # now, it joins the patch that answers the change (one update per click), after any reply it crossed.
    for model, _parent in list(widget._models.values()):
        if model.document is doc:
            # An event without a change: Bokeh sends it to the page and calls no Python callback.
            doc.callbacks.trigger_on_change(ModelChangedEvent(doc, model, prop, getattr(model, prop)))
