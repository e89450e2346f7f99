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

Written against Panel 1.9.4 (a widget's `_update_model`, `_process_events` and `_events`, and
`pn.state._unblocked`). Off: Panel settles the conflicts its own way (a rare lost click, or a step lit
beside controls at another one until the next click).
"""
from __future__ import annotations

import panel as pn
from bokeh.document.events import ModelChangedEvent

from explorable.patches import switch
from explorable.patches.prompt_changes import committed_property

TESTED = {"panel": ("1.9.4", "1.10")}  # from the first version tried to the first release line not tried
install, uninstall, active = switch(
    "Widgets made from now on settle crossed changes (`settle_crossings`); those already made keep "
    "theirs.")


def settle_crossings(*widgets: pn.widgets.Widget) -> None:
    """Keep each widget's queued reader change over a server change, and re-send its value after a reader's."""
    if not active():
        return
    for widget in widgets:
        prop = committed_property(widget)
        _keep_queued(widget, prop)
        _resend_after_reader(widget, prop)


def _keep_queued(widget: pn.widgets.Widget, prop: str) -> None:
    update_model = widget._update_model

    def _update_model(events, msg, root, model, doc, comm):
        if prop in msg and prop in widget._events:
            # A newer change from the reader waits: it is applied next (it sets Panel's value and so the page's
            # state); sending the server's value now would overwrite it on the page and delete it here.
            msg = {k: v for k, v in msg.items() if k != prop}
        update_model(events, msg, root, model, doc, comm)

    widget._update_model = _update_model


def _resend_after_reader(widget: pn.widgets.Widget, prop: str) -> None:
    process_events = widget._process_events

    def _process_events(events):
        doc = pn.state.curdoc
        with pn.io.hold(doc):  # the answer and the value sent again leave as one message
            process_events(events)  # the reader's change and everything it set off (the state, the lighting)
            if prop not in events or doc is None or doc.session_context is None or not pn.state._unblocked(doc):
                return
            # Sent now, the value joins the patch that answers the change, after any reply the change crossed;
            # and it is sent even when the change left Panel's value as it was (the page may still show another).
            for model, _parent in list(widget._models.values()):
                if model.document is doc:
                    # An event without a change: Bokeh sends it to the page and calls no Python callback.
                    doc.callbacks.trigger_on_change(ModelChangedEvent(doc, model, prop, getattr(model, prop)))

    widget._process_events = _process_events
