"""What a browser may change on the server: the page's controls, within their bounds and on their steps.

A page's websocket carries PATCH-DOC messages that Bokeh applies to the session's document as they come:
any model, any property, any data. A script can therefore replace a chart's data with millions of numbers,
switch on a disabled toggle or click a hidden button. `protect(doc)` filters each incoming patch (as JSON,
before Bokeh decodes it) down to what a reader's browser really sends: a value of a slider, a selection,
a radio group or a checkbox, a button click, the card's fold, the zoom of a time axis, the page's size and
location; from a widget that is enabled and visible; of the JSON type that property takes; snapped to the
slider's step. Everything else is dropped, counted, and reported in one rate-limited log line that names
kinds and properties, never values. A change to a control goes through the page's compute budget
(explorable.server.budget): applied now, or held (the latest value of each control) until it is the page's turn.
"""
from __future__ import annotations

import logging
import math
import weakref
from collections import Counter
from typing import Any

from bokeh.core.serialization import Serialized
from bokeh.document import Document

from explorable.server import budget
from explorable.state import background, runs
from explorable.state.control_specs import CONTROL_SPECS, snap_to_step  # noqa: F401  (snap_to_step: callers')

log = logging.getLogger(__name__)

# Properties a browser legitimately sets, by Bokeh model type, and the JSON type of each.
NUMBER, INTEGER, BOOLEAN, TEXT = "number", "integer", "boolean", "text"
ACCEPTED: dict[str, dict[str, str]] = {
    "Slider": {"value": NUMBER, "value_throttled": NUMBER},  # Panel's IntSlider and FloatSlider
    "RadioButtonGroup": {"active": INTEGER},
    "Select": {"value": TEXT},
    "CustomSelect": {"value": TEXT},  # Panel's Select
    "Checkbox": {"active": BOOLEAN},
    "Card": {"collapsed": BOOLEAN},
    "Range1d": {"start": NUMBER, "end": NUMBER},  # drag-to-zoom on the lanes, double-click to reset
    "DataRange1d": {"start": NUMBER, "end": NUMBER},  # the curves' auto-ranged axes, as bokehjs computed them
    "BrowserInfo": {"dark_mode": BOOLEAN, "device_pixel_ratio": NUMBER, "language": TEXT, "timezone": TEXT,
                    "timezone_offset": NUMBER, "webdriver": BOOLEAN, "webgl": BOOLEAN},  # Panel's pn.state.browser_info
    "Tooltip": {"visible": BOOLEAN},  # a control's help bubble
    "Location": {"href": TEXT, "hostname": TEXT, "pathname": TEXT, "protocol": TEXT, "port": TEXT,
                 "search": TEXT, "hash": TEXT},
}
# bokehjs reports laid-out sizes of every layout and plot (read-only on the Python side).
SIZES = {"inner_width", "inner_height", "outer_width", "outer_height"}
# UI events a page sends (Panel's `document_ready`, Bokeh's button click).
EVENTS = {"document_ready", "button_click"}
# What makes the page run the engine, and so goes through the compute budget.
CONTROLS = {("Slider", "value"), ("Slider", "value_throttled"), ("RadioButtonGroup", "active"),
            ("Select", "value"), ("CustomSelect", "value"), ("Checkbox", "active")}
MAX_TEXT = 4096  # a URL; nothing a reader sends is longer


def _json_type_ok(value: Any, kind: str) -> bool:
    if kind == BOOLEAN:
        return isinstance(value, bool)
    if kind == TEXT:
        return isinstance(value, str) and len(value) <= MAX_TEXT
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if kind == INTEGER:
        return isinstance(value, int) and abs(value) < 2**31
    return math.isfinite(value)


def _model_of(doc: Document, ref: Any):
    if isinstance(ref, dict) and isinstance(ref.get("id"), str) and len(ref) <= 3:
        return doc.get_model_by_id(ref["id"])
    return None


def _reachable(model) -> bool:
    """A widget a reader can use: shown and not disabled (a crafted message can reach the others)."""
    return bool(getattr(model, "visible", True)) and not bool(getattr(model, "disabled", False))


class PatchFilter:
    """Keeps the acceptable events of a PATCH-DOC for one document; counts what it drops."""

    def __init__(self, doc: Document):
        self.doc = doc
        self.dropped: Counter[str] = Counter()
        self.snapped = 0

    def event(self, event: Any) -> dict | None:
        """The event to apply (maybe with a snapped value), or None to drop it."""
        if not isinstance(event, dict):
            return self.drop("not an event")
        kind = event.get("kind")
        if kind == "ModelChanged":
            return self._model_changed(event)
        if kind == "MessageSent":
            return self._message(event)
        return self.drop(str(kind)[:40])  # data replaced, streamed, patched; roots added or removed

    def _model_changed(self, event: dict) -> dict | None:
        model = _model_of(self.doc, event.get("model"))
        attr, new = event.get("attr"), event.get("new")
        if model is None or not isinstance(attr, str):
            return self.drop("unknown model")
        name = type(model).__name__
        if attr in SIZES and _json_type_ok(new, INTEGER if isinstance(new, int) else NUMBER):
            return event
        if attr == "visible" and isinstance(new, bool) and model.id in _folded_by_cards(self.doc):
            return event  # bokehjs shows and hides a Card's children when the reader folds it
        kind = ACCEPTED.get(name, {}).get(attr)
        if kind is None:
            return self.drop(f"{name}.{attr}"[:60])
        if not _reachable(model):
            return self.drop(f"{name}.{attr} (disabled or hidden)")
        if not _json_type_ok(new, kind):
            return self.drop(f"{name}.{attr} (wrong type)")
        if name == "Slider":
            start, end, step = float(model.start), float(model.end), float(model.step or 0)
            if not start - step / 2 <= new <= end + step / 2:  # a slider cannot send it: a crafted value
                return self.drop(f"{name}.{attr} (out of range)")
            snapped = snap_to_step(float(new), start, end, step)
            if isinstance(new, int) and float(new).is_integer() and snapped.is_integer():
                snapped = int(snapped)
            if snapped != new:
                self.snapped += 1
                return {**event, "new": snapped}
        if name == "RadioButtonGroup" and not 0 <= new < len(model.labels):
            return self.drop(f"{name}.{attr} (out of range)")
        if name == "Select" and new not in _options(model):
            return self.drop(f"{name}.{attr} (not an option)")
        return event

    def _message(self, event: dict) -> dict | None:
        data = event.get("msg_data")
        if event.get("msg_type") != "bokeh_event" or not isinstance(data, dict):
            return self.drop("message")
        name = data.get("name")
        if name not in EVENTS:
            return self.drop(f"event {str(name)[:30]}")
        if name == "button_click":
            values = data.get("values")
            entries = values.get("entries") if isinstance(values, dict) else None
            model_ref = next((v for k, v in entries or [] if k == "model"), None) if isinstance(entries, list) else None
            model = _model_of(self.doc, model_ref)
            if model is None or type(model).__name__ != "Button" or not _reachable(model):
                return self.drop("button_click (unknown, disabled or hidden)")
        return event

    def drop(self, what: str) -> None:
        self.dropped[what] += 1
        return None


_CARD_CHILDREN: weakref.WeakKeyDictionary[Document, frozenset[str]] = weakref.WeakKeyDictionary()
_GUARDED: weakref.WeakSet[Document] = weakref.WeakSet()


def _folded_by_cards(doc: Document) -> frozenset[str]:
    """Ids of the models a Card shows and hides (its children); computed once per document."""
    found = _CARD_CHILDREN.get(doc)
    if found is None:
        found = frozenset(child.id for m in doc.models if type(m).__name__ == "Card"
                          for child in getattr(m, "children", []) or [] if hasattr(child, "id"))
        _CARD_CHILDREN[doc] = found
    return found


def _options(model) -> set[str]:
    out = set()
    for option in model.options or []:
        out.add(option[0] if isinstance(option, (tuple, list)) else option)
    return out


def filter_patch(doc: Document, patch_json: Any) -> tuple[Any | None, PatchFilter]:
    """The patch with only acceptable events (None when nothing is left), and the filter's counts."""
    pf = PatchFilter(doc)
    serialized = isinstance(patch_json, Serialized)
    content = patch_json.content if serialized else patch_json
    events = content.get("events") if isinstance(content, dict) else None
    if not isinstance(events, list):
        pf.drop("malformed patch")
        return None, pf
    kept = [e for e in (pf.event(ev) for ev in events) if e is not None]
    if not kept:
        return None, pf
    content = {**content, "events": kept}
    # Kept events hold plain JSON values only: binary buffers (column data) are never needed.
    return (Serialized(content, []) if serialized else content), pf


def _budget_key(doc: Document, event: dict) -> Any | None:
    """The key under which a held change is merged (latest wins), or None for a change that costs nothing."""
    if event.get("kind") == "MessageSent":
        return ("click",) if event.get("msg_data", {}).get("name") == "button_click" else None
    model = doc.get_model_by_id(event["model"]["id"])
    if (type(model).__name__, event["attr"]) in CONTROLS:
        return (event["model"]["id"], event["attr"])
    return None


def control_of(model: Any) -> str | None:
    """The control a widget's model stands for (explorable.views.controls tags each one), or None."""
    for tag in getattr(model, "tags", None) or []:
        if isinstance(tag, dict) and isinstance(tag.get("control"), str):
            return tag["control"]
    return None


def change_cost(doc: Document, changes: list[tuple[Any, dict]]) -> float:
    """What applying these control changes will cost the server's event loop (s): Panel's processing, and
    a simulation for a new run. The new points of the two curves are simulated off the loop
    (explorable.state.background) and charged to the page when they are drawn (`budget.meter_background`).
    Only slider changes are followed: buttons, selections and toggles lead to a few states each, visited
    soon by everyone."""
    if all(event.get("attr") == "value" for _key, event in changes):
        return budget.DRAG_COST_S  # a slider being dragged: Panel notes the value; nothing runs until release
    state = budget.session_of(doc).state
    if state is None or not hasattr(state, "config_with"):
        return budget.CHANGE_COST_S
    moved = {}
    for _key, event in changes:
        if event.get("kind") != "ModelChanged" or event["attr"] != "value_throttled":
            continue
        spec = CONTROL_SPECS.get(control_of(doc.get_model_by_id(event["model"]["id"])))
        if spec is not None and spec.in_run:
            moved[spec.name] = spec.from_slider(event["new"])  # a log-scale slider sends log2 of the value
    if not moved:
        return budget.CHANGE_COST_S
    try:
        cfg = state.config_with(moved)
    except runs.RUN_ERRORS:
        return budget.CHANGE_COST_S  # the engine refuses it: no simulation follows
    if runs.is_cached(cfg):
        return budget.CHANGE_COST_S  # someone has been here
    missing = 0  # the throughput curves run on the worker thread, charged when drawn (budget.meter_background)
    if cfg.arrival != "all-at-once" and not runs.has_rate_curve(cfg):  # the request-rate curve (12 + 1 runs)
        missing += runs.RATE_CURVE_POINTS + 1
    return budget.CHANGE_COST_S + (1 + missing) * runs.mean_simulation_s()




def protect(doc: Document | None, state: Any = None) -> None:
    """Filter every patch a browser sends to `doc`, and put its control changes through the compute budget
    (once per document; idempotent; None: not a served page). `state` shows the budget's busy notice."""
    if doc is None:
        return
    if state is not None:
        budget.attach_state(doc, state)
    if doc in _GUARDED:
        return
    apply = doc.apply_json_patch

    def guarded_apply_json_patch(patch_json, *, setter=None):
        background.foreground_busy()  # a reader's message: the curves' worker lets the loop answer it first
        patch, pf = filter_patch(doc, patch_json)
        if pf.dropped:
            # One line per patch at most, and the log filter (log_limits) rate-limits repeats.
            log.warning("ignored %d change(s) a page sent to things that are not its controls: %s",
                        sum(pf.dropped.values()), ", ".join(sorted(pf.dropped))[:200])
        if patch is None:
            return
        events = patch.content["events"] if isinstance(patch, Serialized) else patch["events"]
        keyed = [(_budget_key(doc, e), e) for e in events]
        costly = [(k, e) for k, e in keyed if k is not None]
        cost = budget.admit(doc, lambda: change_cost(doc, costly)) if costly else None
        if costly and cost is None:
            budget.hold(doc, costly, lambda held: apply(Serialized({"events": held}, []), setter=setter),
                        lambda held: change_cost(doc, held))
            events = [e for k, e in keyed if k is None]
            if not events:
                return
            patch = Serialized({"events": events}, [])
        elif costly:
            budget.applied(doc, cost)
        if log.isEnabledFor(logging.DEBUG):  # names of what is applied, never values
            log.debug("applied: %s", ", ".join(str(k or e.get("attr") or e.get("kind")) for k, e in keyed))
        apply(patch, setter=setter)

    doc.apply_json_patch = guarded_apply_json_patch  # this document's own method, for this document alone
    _GUARDED.add(doc)
    doc.on_session_destroyed(lambda _context: budget.forget(doc))
