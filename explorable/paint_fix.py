"""One change to BokehJS in the page: a stylesheet whose text is set to what it already holds is left alone.

BokehJS (3.9) repaints a plot by painting each of its renderers (axes, grids, glyphs, spans, the legend) in
turn, and each one first writes its position into a <style> of its own (`InlineStyleSheet.replace`), even
when the position has not moved, then reads its colours and fonts through `getComputedStyle` (Bokeh lets
CSS variables style a plot). Writing a <style>'s text makes Chromium drop that scope's style, so every
renderer's read forces a style recalculation of its own: 63 per update with traffic on (seven plots), about
a third of the browser's work per click, for sheets whose text did not change. Skipping a write of the same
text changes nothing on screen (the sheet already holds it) and lets those reads find the style computed.

The script goes in an invisible pane at the top of the page; it finds the class through BokehJS's own module
loader (`Bokeh.require`) and does nothing where that is not there.
"""
from __future__ import annotations

import panel as pn

MARK = "__cbSameSheetKept"  # set on the prototype once patched
PLAIN = "__cbPlainUpdate"  # BokehJS's own method, kept on the prototype (a test compares the two)

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
})();
</script>""" % {"mark": MARK, "plain": PLAIN}


def same_sheet_kept() -> pn.pane.HTML:
    """An invisible pane whose script keeps BokehJS from rewriting a <style> with the text it holds."""
    return pn.pane.HTML(SCRIPT, margin=0, height=0, sizing_mode="stretch_width", css_classes=["paint-fix"])
