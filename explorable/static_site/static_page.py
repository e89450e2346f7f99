"""The served page's views as one Bokeh document, with the models a static page swaps data into named.

Both the static site's shell (`index.html`) and every state file come from `build()`: the same
`ExplorableApp` the server builds, rendered once into a `Document`. `patch(page)` reads, for the page's
current state, every property the views set on a run (source data, ranges, ticks, HTML text): what the
served app would send in its PATCH-DOC, keyed by a name instead of a model id (ids differ between
processes; the shell maps names to its own ids).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import panel as pn
from bokeh.core.serialization import Serializer
from bokeh.document import Document
from bokeh.models import Axis, ColumnDataSource, CustomJS, FixedTicker, Label, Model, Range1d, Span
from panel.io.state import set_curdoc
from pyviz_comms import Comm

from explorable.page.layout import ExplorableApp, configure
from explorable.page.url import share_html
from explorable.state.control_specs import (CONTROLS, GRID_CONTROLS, SLO_CONTROLS, STATIC_STOPS, STEP_STOPS,
                                             URL_CONTROLS, WORKLOAD_CONTROLS)
from explorable.state.store import ExplorableState
from explorable.views.guide import GUIDES, GuideSpec, step_settings

# The static build's stops: each grid control's `static_stops`, then each control's `step_stops` (held around the
# held guides' steps only), as explorable.state.control_specs declares them.
STOPS: dict[str, tuple] = {**STATIC_STOPS, **STEP_STOPS}
# The guides the static build can hold beside the article's (GuideSpec.needs; the memory fixes stay served-only).
HELD_GUIDES = ("traffic", "prefix")
NEEDS = {spec.needs: spec for spec in GUIDES if spec.needs}


def held_guides(guides) -> tuple[GuideSpec, ...]:
    """The GuideSpecs of these guides (by `needs`: 'traffic', 'prefix'), in the page's order."""
    return tuple(spec for spec in GUIDES if spec.needs in tuple(guides))


def held_controls(guides=HELD_GUIDES) -> tuple[str, ...]:
    """Every control the static build holds with these guides, in URL order: the grid's, each control a held
    guide's steps set or ask the reader to try, and the SLO targets (computed in the page) where traffic is held."""
    extra = {name for spec in held_guides(guides) for step in spec.steps for name in step.settings}
    extra |= {name for spec in held_guides(guides) for name in spec.tries}
    if "traffic" in guides:
        extra |= set(SLO_CONTROLS)
    return tuple(n for n in URL_CONTROLS if n in GRID_CONTROLS or n in extra)


def fixed_controls(guides=HELD_GUIDES) -> tuple[str, ...]:
    """Controls the static build does not hold: it has their starting values only, named in the Advanced section
    instead of drawn (the served app has them all). (The "Your workload" section's controls are left out with the
    section: the static build has no server to read a file.)"""
    held = held_controls(guides)
    return tuple(name for name in CONTROLS if name not in held and name not in WORKLOAD_CONTROLS)


FIXED = fixed_controls(())  # the article's grid alone (--guides none)
FIXED_NOTE = ("This page is a static build: every run in it uses these starting values ({}). Changing them "
              "needs the served explorable (panel serve app.py). It holds the synchronous engine (vLLM 0.11) only.")
_RATE_ONLY = ("request_rate", "burstiness")  # said only where requests arrive over time (they do not here)


def fixed_note(state: ExplorableState, fixed=FIXED) -> str:
    """FIXED_NOTE with the values it means, by the controls' own labels (the page draws no control for them)."""
    def said(name: str) -> str:
        value = getattr(state, name)
        named = {v: k for k, v in (getattr(state.param[name], "names", None) or {}).items()}
        text = named.get(value) if value in named else "unset" if value is None else (
            ("on" if value else "off") if isinstance(value, bool) else
            f"{value:,}" if isinstance(value, int) else f"{value:g}" if isinstance(value, float) else str(value))
        return f"{state.param[name].label}: {text}"
    shown = [n for n in fixed if n not in _RATE_ONLY or state.arrival != "all-at-once"]
    return FIXED_NOTE.format("; ".join(said(n) for n in shown))


SHARE_HREF = "\x00href\x00"  # where the page's script puts the link to the state on screen

# What a run changes, by model type (the properties the views' `_update` methods set).
SWAPPED_PROPS: tuple[tuple[type, tuple[str, ...]], ...] = (
    (ColumnDataSource, ("data",)),
    (Range1d, ("start", "end", "reset_start", "reset_end")),
    (FixedTicker, ("ticks",)),
    (Span, ("location", "visible")),
    (Label, ("text", "y", "y_offset")),
    (Axis, ("axis_label",)),
)
# Panel's HTML panes, the buttons (greyed by inline styles) and the guide's step group (its lit step).
UI_PROPS = ("text", "visible", "styles", "disabled", "active")


@dataclass
class Page:
    """One built page: its state, views, document, and the models a static page addresses by name."""

    state: ExplorableState
    app: ExplorableApp
    doc: Document
    run_models: dict[str, Model] = field(default_factory=dict)  # change with the run
    ui_models: dict[str, Model] = field(default_factory=dict)  # widgets, buttons, guide, notices


TAG = "cb-static:"  # the tag that names a model the static page addresses (`name_models`)


def name_models(viewables: dict[str, pn.viewable.Viewable]) -> None:
    """Tag each viewable with its name, before the page is rendered, so its Bokeh model can be found."""
    for name, viewable in viewables.items():
        viewable.tags = [*viewable.tags, TAG + name]


def named_models(root: Model, names) -> dict[str, Model]:
    """The Bokeh model of each viewable `name_models` tagged, in the page rooted at `root`."""
    return {name: root.select_one({"tags": TAG + name}) for name in names}


def build(stops: dict[str, tuple] | None = None, projector: bool = False, guides=HELD_GUIDES) -> Page:
    """The explorable's page in a Document of its own, at the starting point, with the static stops (the pool's
    quick stops are the grid's) and the guides `guides` holds besides the article's ('traffic', 'prefix'); with
    `projector`, the served app's projector view."""
    configure()
    doc = Document()
    traffic, prefix = "traffic" in guides, "prefix" in guides
    held = held_controls(guides)
    # Built as the page's current document, as a served session is: every component then shares one
    # stylesheet model (explorable.views.assets), so the shell carries the CSS once instead of once per component.
    with set_curdoc(doc):
        state = ExplorableState()
        app = ExplorableApp(state=state, projector=projector, traffic=traffic, prefix=prefix, workload=False,
                            memory=False)
        v = app.views
        c = v["controls"]
        c.param.update(pool_stops=list((stops or STOPS)["pool_gib"]),
                       advanced_note=fixed_note(state, fixed_controls(guides)),
                       grid_only=True, held=[n for n in held if n not in GRID_CONTROLS])  # before it is drawn
        share = v["share"].pane
        share.object, share.visible = share_html(SHARE_HREF), False  # the page's script links it and shows it
        notices = v["notices"]
        curve = v["traffic_curve"]
        if traffic:  # drawn once in the shell (the served page builds it when traffic first arrives)
            curve._build()
        panes = {"readouts": v["readouts"].pane, "run_error": v["readouts"].error, "lanes.caption": v["lanes"].caption,
                 "log": v["logs"].pane, "pool_warning": c.pool_warning,
                 # the results bar and each chart in words
                 "results_bar": v["readouts"].bar, "lanes.words": v["lanes"].words, "strips.words": v["strips"].words,
                 "curves.words": v["curves"].words}
        if traffic:
            panes.update({"readouts.traffic": v["readouts"].traffic, "traffic.pane": curve.pane,
                          "traffic.words": curve.words, "traffic_note": c.traffic_note})
        if prefix or traffic:
            panes["prefix_note"] = c.prefix_note
        ui_panes = {f"ctl.{name}": c.widgets[name] for name in held}
        ui_panes.update({"declared_note": c.declared_note, "reset": c.reset, "notices.text": notices.text,
                         "notices.box": notices.box, "notices.dismiss": notices.dismiss, "share": share})
        for spec in app.guide_specs():
            guide = v[spec.key]
            ui_panes.update({f"{spec.key}.text": guide.text, f"{spec.key}.prev": guide.prev,
                             f"{spec.key}.next": guide.next, f"{spec.key}.steps": guide.step_buttons})
        tabs = v["guides"]  # the guides' tabs, and each guide's panel (shown by its tab)
        ui_panes.update({"guides.tabs": tabs.tabs, **{f"guides.panel.{i}": p for i, p in enumerate(tabs.panels)}})
        name_models({**panes, **ui_panes})
        root = pn.panel(app).get_root(doc, Comm())
    pn.io.model.add_to_doc(root, doc, True)
    page = Page(state, app, doc)

    lanes, strips, curves = v["lanes"], v["strips"], v["curves"]
    run = {
        **named_models(root, panes),
        "lanes.source": lanes.source, "lanes.marks": lanes.marks, "lanes.details": lanes.details, "lanes.times": lanes.times,
        "lanes.x_range": lanes.x_range, "lanes.y_range": lanes.y_range, "lanes.y_ticker": lanes.y_ticker,
        "strips.batch": strips.batch_source, "strips.kv": strips.kv_source, "strips.batch_range": strips.batch_range,
        "strips.cap": strips.cap, "strips.cap_label": strips.cap_label, "strips.kv_axis": strips.kv_fig.yaxis[0],
    }
    for key, crv in (("seqs", curves.by_seqs), ("pool", curves.by_pool)):
        run.update({f"curve.{key}.line": crv.line, f"curve.{key}.point": crv.point,
                    f"curve.{key}.marker": crv.marker, f"curve.{key}.y_range": crv.figure.y_range})
    if traffic:
        run.update({"traffic.source": curve.source, "traffic.served_range": curve.served_fig.y_range,
                    "traffic.served_marker": curve.served_marker, "traffic.latency_marker": curve.latency_marker})
    ui = named_models(root, ui_panes)
    if traffic:  # (greyed while requests all wait at 0 s, as the served sidebar does)
        run.update({f"style.{n}": ui[f"ctl.{n}"] for n in ("request_rate", "burstiness", *SLO_CONTROLS)})
    page.run_models = run

    ui.update(_stop_groups(root))
    if traffic:  # set by the page's script from the SLO targets (any value, not only stops)
        ui.update({"traffic.latency_range": curve.latency_fig.y_range, "traffic.ttft_slo": curve.ttft_slo,
                   "traffic.tpot_slo": curve.tpot_slo})
    page.ui_models = ui
    missing = [name for name, m in {**run, **ui}.items() if m.document is not doc]
    assert not missing, f"models not in the page's document: {missing}"
    return page


def _stop_groups(root: Model) -> dict[str, Model]:
    """Each control's quick stops (one button group, `stops.pool_gib`), found by the tag the sidebar gives it."""
    out: dict[str, Model] = {}
    for m in root.select({"type": Model}):
        for tag in getattr(m, "tags", None) or []:
            if isinstance(tag, dict) and tag.get("stops") in CONTROLS:
                out[f"stops.{tag['stops']}"] = m
    return out


def _encode(value: Any) -> Any:
    return Serializer(deferred=False).encode(value)


def props(model: Model) -> dict[str, Any]:
    """The swapped properties of one model, as Bokeh serialises them."""
    for kind, names in SWAPPED_PROPS:
        if isinstance(model, kind):
            return {n: _encode(getattr(model, n)) for n in names}
    names = model.properties()
    return {n: _encode(getattr(model, n)) for n in UI_PROPS if n in names}


def patch(models: dict[str, Model]) -> dict[str, dict[str, Any]]:
    """{name: {property: serialised value}} for the given models as they are now (a `style.` name: its styles)."""
    return {name: {"styles": _encode(m.styles)} if name.startswith("style.") else props(m)
            for name, m in models.items()}


# Drawn only while requests arrive over time: an all-at-once state leaves them as they were (hidden), so that its
# file does not carry the last traffic state's curve.
TRAFFIC_ONLY = ("traffic.source", "traffic.served_range", "traffic.served_marker", "traffic.latency_marker",
                "traffic.words")


def run_patch(page: Page) -> dict[str, dict[str, Any]]:
    """The patch of the page's run models for its state (see `patch`); the traffic readouts' text is the page
    script's (it follows the SLO targets at any value), so only their visibility is stored."""
    arriving = page.state.trace is not None and page.state.trace.arrives_over_time
    models = {n: m for n, m in page.run_models.items() if arriving or n not in TRAFFIC_ONLY}
    out = patch(models)
    if "readouts.traffic" in out:
        out["readouts.traffic"] = {"visible": out["readouts.traffic"]["visible"]}
    return out


def forget_traffic(page: Page) -> None:
    """The traffic views as the served page has them before traffic first arrives: hidden and empty (the guides'
    fragments drew the traffic steps in this page; the shell need not carry the last one's figures)."""
    if "traffic.pane" not in page.run_models:
        return
    readouts, curve = page.app.views["readouts"], page.app.views["traffic_curve"]
    readouts.traffic.param.update(object="", visible=False)
    curve.source.data = {k: [] for k in curve.source.data}
    curve.words.object = ""
    curve.pane.visible = False
    curve.forget_drawn()


def detach_traffic_views(page: Page, ids: dict[str, str]) -> dict[str, Any]:
    """Take the request-rate figures out of the page before its shell is rendered, and return what the page's
    script needs to add them back: `trafficViews`, the document event that gives their pane its children again
    (the models in full, as a server's PATCH-DOC carries new models), and `trafficIds`, the ids of the named models
    among them (a patch that names one needs the figures first). The shell then carries about a fifth fewer models
    at the state it opens at, where they are hidden; the served page too builds them when traffic first arrives.
    Empty where the page has no traffic views."""
    if "traffic.pane" not in page.run_models:
        return {}
    pane = page.run_models["traffic.pane"]
    children = list(pane.children)
    pane.children = []
    in_shell = set().union(*(root.references() for root in page.doc.roots))
    added = set().union(*(child.references() for child in children)) - in_shell
    event = {"kind": "ModelChanged", "model": {"id": pane.id}, "attr": "children",
             "new": Serializer(references=in_shell, deferred=False).encode(children)}
    named = {m.id for m in added}
    return {"trafficViews": event, "trafficIds": sorted(i for i in ids.values() if i in named)}


def traffic_data(page: Page) -> dict[str, Any] | None:
    """What the page's script needs to draw the traffic readouts and SLO lines at any SLO target: each request's
    TTFT and TPOT (s; None where not finite) and whether it finished, the run's length, and the extent of the
    p99 latency curve (engine.latency.good_requests; explorable.views.readouts.Readouts)."""
    import numpy as np

    trace = page.state.trace
    if trace is None or not trace.arrives_over_time or page.state.run_error:
        return None
    timing = trace.timing()
    finite = lambda a: [float(x) if np.isfinite(x) else None for x in np.asarray(a, dtype=float)]  # noqa: E731
    data = page.app.views["traffic_curve"].source.data
    lat = [float(x) for x in (*data["ttft"], *data["tpot"]) if np.isfinite(x) and x > 0]
    return {"ttft": finite(timing.ttft), "tpot": finite(timing.tpot),
            "done": [int(x) for x in np.isfinite(timing.e2el)], "makespan": float(trace.makespan_s),
            "lat": [min(lat), max(lat)] if lat else None}


def set_controls(page: Page, values: dict[str, Any]) -> None:
    """Set the page to `values` (held controls; the rest at their starting point) and draw every view for it.
    The readouts are drawn without a previous setting: the static page puts each change's deltas in."""
    state = page.state
    state.param.update(**{**state.defaults(), **values})
    page.app.views["curves"].refresh()  # outside a server it runs at once; called to be sure it has
    if "traffic.pane" in page.run_models:
        page.app.views["traffic_curve"].refresh()
    state.previous_summary = None
    page.app.views["readouts"].refresh()


def on_change_js(page: Page) -> None:
    """Hand every reader action (a slider release, a radio choice, a button) to the static page's script."""
    call = "window.cbStatic && window.cbStatic.{}({});"
    for name, model in page.ui_models.items():
        if name.startswith("ctl."):
            control = name[4:]
            attr = "active" if hasattr(model, "active") else "value_throttled"
            model.js_on_change(attr, CustomJS(code=call.format("control", f"'{control}', cb_obj.{attr}")))
        elif name.startswith("stops."):  # the index of the stop clicked (null when the script unlights them)
            model.js_on_change("active", CustomJS(code=call.format("stop", f"'{name[6:]}', cb_obj.active")))
        elif name.endswith(".steps"):  # a guide's step clicked (null when the script unlights them)
            guide = name[:-len(".steps")]
            model.js_on_change("active", CustomJS(code=call.format("chooseStep", f"'{guide}', cb_obj.active")))
        elif name == "guides.tabs":  # a guide's tab: shows that guide, in the page alone (no state file)
            count = sum(n.startswith("guides.panel.") for n in page.ui_models)
            panels = [page.ui_models[f"guides.panel.{i}"] for i in range(count)]
            model.js_on_change("active", CustomJS(args={"panels": panels}, code=(
                "panels.forEach((p, i) => { p.visible = i === cb_obj.active; });"
                + call.format("tab", "cb_obj.active"))))
        elif name.endswith((".prev", ".next")) or name in ("reset", "notices.dismiss"):
            model.js_on_event("button_click", CustomJS(code=call.format("button", f"'{name}'")))


def guide_fragments(page: Page) -> dict[str, list[dict[str, dict]]]:
    """Per guide (by its view's key), per step: what the guide shows when the page is at that step ('match'),
    when the controls left it after the reader followed it ('drifted'), when the page opened from a link at
    settings of no step ('link'), and when the reader has not come to this guide yet ('plain')."""
    state = page.state
    out = {}
    elsewhere = {**state.defaults(), "max_num_seqs": 1}  # a setting that is no step of any guide
    for spec in page.app.guide_specs():
        guide = page.app.views[spec.key]
        names = {k: m for k, m in page.ui_models.items() if k.startswith(spec.key + ".")}
        entries = []
        for i in range(len(spec.steps)):
            entry = {}
            state.param.update(**step_settings(state, i, spec.steps))
            guide.chosen = i
            guide.refresh()
            entry["match"] = patch(names)
            state.param.update(**elsewhere)
            for kind, followed, linked in (("drifted", True, True), ("link", False, True), ("plain", False, False)):
                guide.chosen = i
                guide.followed = followed
                guide.linked = linked  # ('link': the page opened at these settings)
                guide.refresh()
                entry[kind] = patch(names)
            entries.append(entry)
        guide.linked = False  # the shell is drawn at the starting point
        out[spec.key] = entries
    return out


def control_fragments(page: Page) -> dict[str, dict[str, dict]]:
    """What the controls panel shows beside each allocation (the declared max_tokens note, greyed or not)."""
    state = page.state
    names = {k: page.ui_models[k] for k in ("declared_note", "ctl.declared_multiple")}
    out = {}
    for value in STOPS["allocation"]:
        state.allocation = value
        out[value] = {"declared_note": {"text": _encode(names["declared_note"].text),
                                        "styles": _encode(names["declared_note"].styles)},
                      "ctl.declared_multiple": {"styles": _encode(names["ctl.declared_multiple"].styles)}}
    state.allocation = state.param["allocation"].default
    return out
