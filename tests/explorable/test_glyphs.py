"""The page's glyphs come without the nonselection and muted copies nothing draws (explorable.views.glyphs)."""
from __future__ import annotations

import panel as pn
import pyviz_comms
from bokeh.document import Document
from bokeh.models import GlyphRenderer

from explorable.page.layout import build_app


def test_every_glyph_of_the_page_has_no_unused_copies_and_the_lanes_keep_their_hover():
    page = build_app(sync=False)
    page.state.param.update(arrival="rate", request_rate=8.0)  # the traffic curves are drawn too
    root = pn.panel(page).get_root(Document(), pyviz_comms.Comm())  # every Bokeh model, as a page has them
    renderers = [m for m in root.references() if isinstance(m, GlyphRenderer)]
    assert len(renderers) >= 15  # lanes, strips, both throughput curves, both traffic curves
    assert all(r.nonselection_glyph is None and r.muted_glyph is None for r in renderers)
    hovered = [r for r in renderers if r.hover_glyph is not None]
    assert hovered and {type(r.glyph).__name__ for r in hovered} == {"HBar"}  # the lane under the pointer
