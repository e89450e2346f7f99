"""An HTML pane whose text changes cheaply: what every view uses for text that changes with each run.

Panel 1.9's HTML pane answers a change of `object` by recomputing all of its Bokeh properties (design,
new stylesheet models, sizing) and letting Bokeh compare them: about 1-2 ms of server time per pane, for
every page, on every update, although only the text changed. This pane sets the text alone. Every other
parameter (visible, css_classes, styles...) still goes through Panel's own path, so it behaves as
`pn.pane.HTML` in everything else, and the browser receives the same single `text` change.

Written against Panel 1.9.4 (`PaneBase._update` and `HTML._transform_object`). Off: `TextHTML` is Panel's
HTML pane, recomputing every property on each change of text.
"""
from __future__ import annotations

import panel as pn
import param
from bokeh.model import Model

from explorable.patches import switch

TESTED = {"panel": ("1.9.4", "1.10")}  # from the first version tried to the first release line not tried
install, uninstall, active = switch()


class TextHTML(pn.pane.HTML):
    """`pn.pane.HTML` whose `object` updates send only the new text (while this patch is active)."""

    # Attributes of the pane's own element, which stays while its text changes: a live region's `aria-live`
    # must sit on an element that is there before the text it announces (Bokeh's UIElement.html_attributes).
    html_attributes = param.Dict(default={}, doc="HTML attributes of the pane's element (aria-live, role...)")

    def _update(self, ref: str, model: Model) -> None:
        if not active() or self.enable_streaming:  # Panel's streaming protocol needs its own path
            super()._update(ref, model)
            return
        model.update(text=self._transform_object(self.object)["object"])
