"""The served page's HTML shell: Panel's own template with the tags a phone needs to lay the page out.

Panel's bare template (the one `panel serve` uses for an app without a template) has no viewport meta tag,
so a mobile browser lays the page out 980 px wide and shrinks it to the screen (text about 5 px high). The
document's template (Bokeh's `Document.template`, which Panel's server renders with `base` set to its own
template) extends Panel's and adds the tag; everything else is Panel's. The static build puts the same tag
into its pages (`explorable.static_site.export`).
"""
from __future__ import annotations

from functools import lru_cache

import jinja2
from bokeh.document import Document

# Lay the page out at the device's width, at 100 %; a reader may still zoom (WCAG 1.4.4: no maximum-scale).
VIEWPORT_META = '<meta name="viewport" content="width=device-width, initial-scale=1">'


@lru_cache(maxsize=None)
def page_template() -> jinja2.Template:
    """Panel's template (`base`, handed in by Panel's server) with the viewport tag in its <head>."""
    return jinja2.Environment(autoescape=False).from_string(
        "{% extends base %}\n{% block preamble %}" + VIEWPORT_META + "\n{{ super() }}{% endblock %}")


def install(doc: Document | None) -> None:
    """Serve `doc` (a page's document; None outside a server) in `page_template()`."""
    if doc is not None:
        doc.template = page_template()
