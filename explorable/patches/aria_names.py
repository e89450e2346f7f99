"""Accessible names and states for BokehJS's widgets, which it draws without them (BokehJS 3.9.2, Panel 1.9.4).

What a screen reader finds on the page's controls without this (axe-core's WCAG 2.1 rules, at 1280 px):
- a slider's handle is a `role="slider"` element with no name: the slider's title is a <div> beside it, not
  its label (axe: aria-input-field-name, ten sliders). Each handle is named by its slider's title.
- a checkbox's text is a <div> after the <input>, not a <label> (axe: label). The input is named by it.
- a plot's canvas takes the keyboard focus (BokehJS makes its events layer `tabIndex = 0`, for tools driven by
  keys), with no focus drawn: five stops on the way through the page where a key does nothing (no plot here has
  a keyboard tool; each chart's text alternative and data table are what a keyboard reader uses). The
  canvases are left out of the tab order.
- a button group (the quick stops, the allocation and unit toggles, the guided steps and the guides' tabs)
  lights its chosen button with a CSS class only: a screen reader hears every button alike. Each button
  says whether it is pressed (`aria-pressed`), and the group is a named `role="group"` (its name given by the
  page, by the group's CSS class: explorable.page.layout.group_names).
- a number field's two spin buttons (Spinner: Panel's IntInput, under "Your workload") are <button>s with no
  text (axe: button-name). Each is named by its field's title and direction; they answer the mouse only (the
  field's own arrow keys do the same from the keyboard), so they are also left out of the tab order.

The script goes in an invisible pane at the top of the page, as explorable.patches.paint_fix's does: it wraps
the views' own methods through BokehJS's module loader (`Bokeh.require`), names the widgets already drawn
once, and does nothing where a class or method is not there (another BokehJS).

Written against BokehJS 3.9.2: the views' `render` of `Slider` and `Checkbox`, `Slider._update_title`,
`Checkbox._update_label`, `_update_active` of `RadioButtonGroup` and `CheckboxButtonGroup`, and
`CanvasView.initialize` (seven entry points, each wrapped only where it is there), reading the views'
`slider_el`, `checkbox_el`, `_buttons` and `events_el`. Off: the page has no such pane; the widgets are drawn
as BokehJS draws them (no names on the slider handles or checkboxes, no pressed state, plots' canvases in the
tab order), so the page works but fails those WCAG checks.
"""
from __future__ import annotations

import json

import panel as pn

from explorable.patches import switch

MARK = "__cbAriaNamed"  # set on each patched prototype
TESTED = {"bokeh": ("3.9.0", "3.10")}  # from the first version tried to the first release line not tried
ENTRY_POINTS = 7  # BokehJS view methods the script wraps
install, uninstall, active = switch(
    "Pages built from now on carry the script (`named_widgets`).")


SCRIPT = """<script>
(() => {
  const Bokeh = window.Bokeh;
  if (!Bokeh || typeof Bokeh.require !== "function") return;
  const GROUPS = %(groups)s;
  // The prototype that defines `method` for the views of model `type` (found through BokehJS's model
  // registry: the widgets' bundle is a plugin whose modules `Bokeh.require` does not see).
  const proto = (type, method) => {
    let p;
    try { p = Bokeh.Models.get(type).prototype.default_view.prototype; } catch (e) { return null; }
    while (p != null && !Object.prototype.hasOwnProperty.call(p, method)) p = Object.getPrototypeOf(p);
    return p;
  };
  // Wrap `method` of the view class so `after(view)` runs once BokehJS's own method has.
  const after = (p, method, fn) => {
    if (p == null || typeof p[method] !== "function" || p[method].%(mark)s) return;
    const plain = p[method];
    p[method] = function (...args) {
      const out = plain.apply(this, args);
      try { fn(this); } catch (e) { /* names are help, never a reason to break a widget */ }
      return out;
    };
    p[method].%(mark)s = true;
  };
  const sliderName = (view) => {
    const title = view.model.title || view.model.name || "slider";
    for (const handle of view.slider_el ? view.slider_el.querySelectorAll(".noUi-handle") : []) {
      handle.setAttribute("aria-label", title);
    }
  };
  const checkboxName = (view) => {
    if (view.checkbox_el) view.checkbox_el.setAttribute("aria-label", view.model.label || "checkbox");
  };
  const groupState = (view) => {
    const active = view.model.active;
    (view._buttons || []).forEach((button, i) => {
      button.setAttribute("aria-pressed", String(Array.isArray(active) ? active.includes(i) : active === i));
    });
    const group = view.shadow_el && view.shadow_el.querySelector(".bk-btn-group");
    const name = (view.model.css_classes || []).map((c) => GROUPS[c]).find(Boolean);
    if (group && name && group.getAttribute("aria-label") !== name) {
      group.setAttribute("role", "group");
      group.setAttribute("aria-label", name);
    }
  };
  const spinnerName = (view) => {
    const title = view.model.title || view.model.name || "number";
    for (const [button, way] of [[view.btn_up_el, "one more"], [view.btn_down_el, "one less"]]) {
      if (!button) continue;
      button.setAttribute("aria-label", `${title}: ${way}`);
      button.tabIndex = -1;
    }
  };
  const slider = proto("Slider", "render"), titled = proto("Slider", "_update_title");
  after(slider, "render", sliderName);
  after(titled, "_update_title", sliderName);
  const checkbox = proto("Checkbox", "render"), labelled = proto("Checkbox", "_update_label");
  after(checkbox, "render", checkboxName);
  after(labelled, "_update_label", checkboxName);
  const spinner = proto("Spinner", "render");
  after(spinner, "render", spinnerName);
  const radio = proto("RadioButtonGroup", "_update_active");
  after(radio, "_update_active", groupState);
  const toggles = proto("CheckboxButtonGroup", "_update_active");
  after(toggles, "_update_active", groupState);
  let canvas = null;
  try { canvas = Bokeh.require("models/canvas/canvas").CanvasView.prototype; } catch (e) { /* another BokehJS */ }
  const untabbed = (view) => { if (view.events_el) view.events_el.tabIndex = -1; };
  after(canvas, "initialize", untabbed);
  // The widgets drawn before this script ran.
  const name = (view) => {
    if (slider && view instanceof slider.constructor) sliderName(view);
    if (checkbox && view instanceof checkbox.constructor) checkboxName(view);
    if (spinner && view instanceof spinner.constructor) spinnerName(view);
    if ((radio && view instanceof radio.constructor) || (toggles && view instanceof toggles.constructor)) groupState(view);
    if (view.canvas_view) untabbed(view.canvas_view);
    for (const child of view.child_views || []) name(child);
  };
  const roots = Bokeh.index && (Bokeh.index.roots ? [...Bokeh.index.roots] : Object.values(Bokeh.index));
  for (const root of roots || []) { try { name(root); } catch (e) { /* as above */ } }
})();
</script>"""


def named_widgets(groups: dict[str, str]) -> list[pn.pane.HTML]:
    """An invisible pane whose script names the page's sliders, checkboxes and button groups for assistive
    technology (see the module's docstring), or nothing while the patch is off; `groups`: a button group's
    name by its CSS class."""
    if not active():
        return []
    script = SCRIPT % {"groups": json.dumps(groups).replace("</", "<\\/"), "mark": MARK}
    return [pn.pane.HTML(script, margin=0, height=0, sizing_mode="stretch_width", css_classes=["aria-names"])]
