"""Two changes to BokehJS in the page: a stylesheet set to the text it holds is left alone, and a plot's paint
reads each CSS variable of a renderer once.

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
paint can only give the first answer again.

The script goes in an invisible pane at the top of the page; it finds the class through BokehJS's own module
loader (`Bokeh.require`) and does nothing where that is not there.
"""
from __future__ import annotations

import panel as pn

MARK = "__cbSameSheetKept"  # set on the prototype once patched
PLAIN = "__cbPlainUpdate"  # BokehJS's own method, kept on the prototype (a test compares the two)
PLAIN_READ = "__cbPlainRead"  # the same for VisualProperties._get_css_value

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
  let visual;
  try { visual = Bokeh.require("core/visuals/visual").VisualProperties.prototype; } catch (e) { return; }
  if (!visual || typeof visual._get_css_value !== "function") return;
  const read = visual._get_css_value;
  let answers = null;  // element -> (variable -> value), for the script now running
  visual._get_css_value = function (name) {
    const el = this.obj && this.obj.el;
    if (el == null) return read.call(this, name);
    if (answers === null) {
      answers = new Map();
      queueMicrotask(() => { answers = null; });
    }
    let known = answers.get(el);
    if (known === undefined) answers.set(el, known = new Map());
    const key = this.css_prefix + name;
    let value = known.get(key);
    if (value === undefined) known.set(key, value = read.call(this, name));
    return value;
  };
  visual.%(plain_read)s = read;
})();
</script>""" % {"mark": MARK, "plain": PLAIN, "plain_read": PLAIN_READ}


def same_sheet_kept() -> pn.pane.HTML:
    """An invisible pane whose script keeps BokehJS from rewriting a <style> with the text it holds."""
    return pn.pane.HTML(SCRIPT, margin=0, height=0, sizing_mode="stretch_width", css_classes=["paint-fix"])
