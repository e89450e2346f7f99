"""Changes to BokehJS in the page that spare the browser work on every update: a stylesheet set to the text it
holds is left alone, a plot's paint reads each CSS variable of a renderer (and its own font size) once, a plot
(or a layout that only changed height) is not a reason to lay out the whole page again, and a plot out of
sight is painted when it comes into sight.

BokehJS (3.9) repaints a plot by painting each of its renderers (axes, grids, glyphs, spans, the legend) in
turn, and each one first writes its position into a <style> of its own (`InlineStyleSheet.replace`), even
when the position has not moved, then reads its colours and fonts through `getComputedStyle` (Bokeh lets
CSS variables style a plot). Writing a <style>'s text makes Chromium drop that scope's style, so every
renderer's read forces a style recalculation of its own: 63 per update with traffic on (seven plots), about
a third of the browser's work per click, for sheets whose text did not change. Skipping a write of the same
text changes nothing on screen (the sheet already holds it) and lets those reads find the style computed.

Those reads are many: every tick label of every axis asks for its colour, alpha, font... through
`getComputedStyle(el).getPropertyValue(...)`, about 3,200 reads per update with traffic on (40 ms of work
on 2 loaded cores), though nothing on the page sets one of Bokeh's CSS variables. The script keeps each
renderer's answer for a variable until the running script ends (a microtask forgets them all): the only
style a paint writes is the position sheets above, which set no variable, so a second read within one
paint can only give the first answer again. The same holds for a plot's font size, which each axis asks for
(`getComputedStyle(plot).fontSize`) several times per paint.

A plot whose axis labels changed width (a range from 0-60 to 0-250 adds a digit) lays out again, and BokehJS
lays out the whole page for it: every widget and plot measured and placed again, 20-35 ms of the browser's
work on a click. Our plots take their size from the page (the column's width, a fixed height), never from
what is inside them, so such a plot only needs its own inside placed again (frame, axes, canvas): the script
does that for a plot sized so (stretched or fixed, no frame size set), and leaves any other to BokehJS.

A layout (a column, a row, a widget) that changed size makes BokehJS lay out the whole page again, and a
page changes height on most clicks (the step's text, the log's lines): 15-30 ms of work for a layout whose
width did not move. Everything else on the page is laid out by CSS; what BokehJS's pass computes is each
plot's inside from its size, and a plot whose size changed is told by its own resize. So a layout that only
grew or shrank in height is left to CSS; a change of width, and every plot's resize, still lays out the page.

A plot out of sight is not painted until it comes into sight. On a laptop the lanes, strips and curves sit
below the readouts, and on a phone below the controls too, so a click that changes them would repaint
plots nobody sees: 40-60 ms of the browser's work per click at 1280x800. A plot more than 100 px outside
the window keeps its paint owed (its renderers count as drawn, as BokehJS counts a plot that is not
displayed) and pays it when it comes near: on the scroll event (painted in that event's frame; a fast
scroll the compositor runs ahead of a busy page may show the old picture for a frame or two), a resize,
printing (`beforeprint`), or the IntersectionObserver's report (a plot moved into sight by a change above
it, a frame later). In a frame (a course page) only the observer knows where the parent page has scrolled
to, and a cross-origin frame's observer ignores the 100 px margin: there a plot is painted once it is in
sight, a frame or more after the parent's scroll.

The script goes in an invisible pane at the top of the page; it finds the class through BokehJS's own module
loader (`Bokeh.require`) and does nothing where that is not there.

Written against BokehJS 3.9.2: `InlineStyleSheet._update`, `VisualProperties._get_css_value`, `PlotView`'s
`base_font_size`, `_invalidate_layout_if_needed`, `repaint` and `paint`, and `LayoutDOMView._after_resize` (seven
entry points; the script checks each is there before it replaces it). Off: the page has no such pane and
BokehJS paints and lays out as it always does.
"""
from __future__ import annotations

import panel as pn

from explorable.patches import switch

MARK = "__cbSameSheetKept"  # set on the prototype once patched
LOCAL = "__cbPlainLayoutIfNeeded"  # PlotView._invalidate_layout_if_needed as BokehJS has it
WIDTH = "__cbLastWidth"  # a layout's width when its resize was last answered
RESIZE = "__cbPlainAfterResize"  # LayoutDOMView._after_resize as BokehJS has it
PLAIN = "__cbPlainUpdate"  # BokehJS's own method, kept on the prototype (a test compares the two)
PLAIN_READ = "__cbPlainRead"  # the same for VisualProperties._get_css_value
PLAIN_REPAINT = "__cbPlainRepaint"  # the same for PlotView.repaint
PLAIN_PAINT = "__cbPlainPaint"  # and PlotView.paint
MARGIN_PX = 100  # a plot this close to the viewport is painted with the update, not when scrolled to
TESTED = {"bokeh": ("3.9.0", "3.10")}  # from the first version tried to the first release line not tried
ENTRY_POINTS = 7  # BokehJS methods and properties the script replaces
install, uninstall, active = switch(
    "Pages built from now on carry the script (`same_sheet_kept`).")


SCRIPT = """<script>
(() => {
  const Bokeh = window.Bokeh;
  if (!Bokeh || typeof Bokeh.require !== "function") return;
  let InlineStyleSheet;
  try { InlineStyleSheet = Bokeh.require("core/dom").InlineStyleSheet; } catch (e) { return; }
  const proto = InlineStyleSheet && InlineStyleSheet.prototype;
  if (!proto || typeof proto._update !== "function" || proto.%(mark)s) return;
  const update = proto._update;
  proto._update = function (css) {
    if (this.el == null || this.el.textContent !== css) update.call(this, css);
  };
  proto.%(mark)s = true;
  proto.%(plain)s = update;
  // A map kept until the running script ends (a microtask forgets it), and a lookup that fills it once.
  const perScript = () => {
    let map = null;
    return () => {
      if (map === null) {
        map = new Map();
        queueMicrotask(() => { map = null; });
      }
      return map;
    };
  };
  const known = (map, key, compute) => {
    let value = map.get(key);
    if (value === undefined) map.set(key, value = compute());
    return value;
  };
  let visual;
  try { visual = Bokeh.require("core/visuals/visual").VisualProperties.prototype; } catch (e) { return; }
  if (!visual || typeof visual._get_css_value !== "function") return;
  const read = visual._get_css_value;
  const answers = perScript();  // element -> (variable -> value)
  visual._get_css_value = function (name) {
    const el = this.obj && this.obj.el;
    if (el == null) return read.call(this, name);
    const mine = known(answers(), el, () => new Map());
    return known(mine, this.css_prefix + name, () => read.call(this, name));
  };
  visual.%(plain_read)s = read;
  let plot;
  try { plot = Bokeh.require("models/plots/plot_canvas").PlotView.prototype; } catch (e) { return; }
  const relayout = plot && plot._invalidate_layout_if_needed;
  if (typeof relayout !== "function" || typeof plot.box_sizing !== "function") return;
  const fitted = (policy) => policy == "fit" || policy == "min";
  const font = Object.getOwnPropertyDescriptor(plot, "base_font_size");
  if (font && typeof font.get === "function") {
    const sizes = perScript();  // plot view -> its font size (as the CSS variables above)
    Object.defineProperty(plot, "base_font_size", {configurable: true, get() {
      return known(sizes(), this, () => font.get.call(this));
    }});
  }
  plot._invalidate_layout_if_needed = function () {
    // Sized by its content (a frame size, a fit or min policy, or auto without a size): BokehJS's own way.
    const {width_policy, height_policy, width, height} = this.box_sizing();
    if (this.model.frame_width != null || this.model.frame_height != null || fitted(width_policy) ||
        fitted(height_policy) || (width_policy == "auto" && width == null) ||
        (height_policy == "auto" && height == null) || !this._was_built) return relayout.call(this);
    let changed = this._needs_layout;
    if (changed) this.invalidate_painters();
    else {
      for (const panel of this.model.side_panels) {
        const view = this.renderer_views.get(panel);
        if (view != null && view.layout != null && view.layout.has_size_changed()) {
          this.invalidate_painters(view);
          changed = true;
          break;
        }
      }
    }
    if (!changed) return;
    this._needs_layout = false;
    this.measure_layout();  // this plot's own layout, as the page's would do it for this plot
    this.update_bbox();
    this._compute_layout();
    this.after_layout();
  };
  plot.%(local)s = relayout;
  let layout_dom;
  try { layout_dom = Bokeh.require("models/layouts/layout_dom").LayoutDOMView.prototype; } catch (e) { return; }
  const resized = layout_dom && layout_dom._after_resize;
  if (typeof resized !== "function") return;
  const PlotView = plot.constructor;
  // Components that lay out their own inside after a resize of any kind (tabs, tables, editors, ESM widgets):
  // none is on this page; should one be added, it keeps BokehJS's way.
  const own = /Tabs|Tabulator|Ace|ESM|AnyWidget|Perspective|DeckGL|Plotly|Vega|ECharts|Vizzu/;
  layout_dom._after_resize = function () {
    const width = this.bbox.width, last = this.%(width)s;
    this.%(width)s = width;
    if (last === width && !(this instanceof PlotView) && !own.test(this.model.type)) return;  // height only
    return resized.call(this);
  };
  layout_dom.%(resize)s = resized;
  // Plots out of sight are painted when they come into sight (see the module's docstring).
  const plainRepaint = plot.repaint, plainPaint = plot.paint;
  if (typeof plainRepaint !== "function" || typeof plainPaint !== "function") return;
  const MARGIN = %(margin)d;  // px around the viewport: a plot that close is painted at once
  let framed;
  try { framed = window.self !== window.top; } catch (e) { framed = true; }
  const deferred = new Set();  // plot views with a paint they still owe
  const seen = new WeakMap();  // element -> intersecting, as the IntersectionObserver last said
  const observed = new WeakSet();
  let everything = false;  // while the page is printed: every plot is painted
  const inSight = (view) => {
    const el = view.el;
    if (everything || observer == null || el == null || !el.isConnected) return true;
    if (!observed.has(el)) {
      observed.add(el);
      observer.observe(el);
    }
    // In a frame, only the observer knows where the parent page has scrolled to.
    if (framed) return seen.get(el) !== false;
    const r = el.getBoundingClientRect();
    if (r.width == 0 && r.height == 0) return true;  // not laid out: BokehJS's own checks decide
    return r.bottom > -MARGIN && r.top < innerHeight + MARGIN && r.right > -MARGIN && r.left < innerWidth + MARGIN;
  };
  const wake = () => {
    for (const view of [...deferred]) {
      if (view.is_destroyed) deferred.delete(view);
      else if (inSight(view)) {
        deferred.delete(view);
        view.repaint();
      }
    }
  };
  const observer = typeof IntersectionObserver === "function" ? new IntersectionObserver((entries) => {
    for (const entry of entries) seen.set(entry.target, entry.isIntersecting);
    if (deferred.size) wake();
  }, {rootMargin: MARGIN + "px"}) : null;
  // A scroll is answered before the frame it shows is drawn, so a plot scrolled into sight is never stale.
  const woken = () => { if (deferred.size) wake(); };
  document.addEventListener("scroll", woken, {capture: true, passive: true});
  window.addEventListener("resize", woken, {passive: true});
  // A printout (or a full-page capture that says it prints) shows every plot: each pays what it owes.
  window.addEventListener("beforeprint", () => {
    everything = true;
    try { wake(); } finally { everything = false; }
  });
  const defer = (view) => {
    deferred.add(view);
    // As BokehJS does for a plot that is not displayed: its renderers count as drawn for the document's idle.
    for (const renderer of view.computed_renderer_views) renderer.force_finished();
    if (view._needs_notify) {
      view._needs_notify = false;
      view.notify_finished();
    }
  };
  plot.repaint = function () {
    if (!inSight(this)) return defer(this);
    deferred.delete(this);
    return plainRepaint.call(this);
  };
  plot.paint = function () {
    if (!this.is_paused && !this.model.hold_render && this.is_displayed && !inSight(this)) return defer(this);
    deferred.delete(this);
    return plainPaint.call(this);
  };
  plot.%(plain_repaint)s = plainRepaint;
  plot.%(plain_paint)s = plainPaint;
})();
</script>""" % {"mark": MARK, "plain": PLAIN, "plain_read": PLAIN_READ,
                            "local": LOCAL, "width": WIDTH, "resize": RESIZE,
                            "plain_repaint": PLAIN_REPAINT, "plain_paint": PLAIN_PAINT, "margin": MARGIN_PX}


def same_sheet_kept() -> list[pn.pane.HTML]:
    """The page's first child: an invisible pane with the script, or nothing while the patch is off."""
    if not active():
        return []
    return [pn.pane.HTML(SCRIPT, margin=0, height=0, sizing_mode="stretch_width", css_classes=["paint-fix"])]
