"""Glyph renderers without the variants the explorable never draws.

For every glyph a figure adds, Bokeh also makes a "nonselection" copy (drawn faded when some points are
selected) and a "muted" copy (drawn when a legend mutes it). Nothing here selects or mutes, yet each copy is
a model that every page decodes: 22 of the 339 models of the static page, and the heaviest kind (a glyph
carries every line, fill and hatch property). (BokehJS still derives its own local copies for the views.) The hover variants stay: the lanes
light up the segment under the pointer.
"""
from __future__ import annotations

from bokeh.models import GlyphRenderer
from bokeh.plotting import figure


def without_unused_variants(fig: figure) -> figure:
    """Drop the nonselection and muted copies of `fig`'s glyphs; returns `fig`."""
    for renderer in fig.renderers:
        if isinstance(renderer, GlyphRenderer):
            renderer.nonselection_glyph = None
            renderer.muted_glyph = None
    return fig


__all__ = ["without_unused_variants"]
