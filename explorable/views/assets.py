"""Where the explorable's static files live (the repo's `assets/`), and the stylesheet every view shares.

Panel renders each component in its own shadow root, so every styled pane, button and layout needs the
explorable's CSS itself. Given as text, Bokeh would serialise one copy per component (about 50 on a page,
300 kB of every page open); given as one `InlineStyleSheet` model (explorable.patches.stylesheet_models lets
Panel take one), it goes out once per document and each component refers to it by id. The browser still puts
a <style> with the text into each shadow root, exactly as it does for text.
"""
from __future__ import annotations

import re
import weakref
from functools import lru_cache
from pathlib import Path

import panel as pn
from bokeh.document import Document
from bokeh.models import InlineStyleSheet

from explorable.patches import direct_styles, stylesheet_models

ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
SHEET_NAME = "explorable-css"  # the stylesheet model's name, to find it in a document


@lru_cache(maxsize=None)
def stylesheet_css() -> str:
    """The CSS text of assets/explorable.css (also Panel's global_css, for the page outside the components)."""
    return (ASSETS_DIR / "explorable.css").read_text()


# One sheet per document: a Bokeh model belongs to a single document, so the sheet cannot be shared by
# every session. Weak both ways: the entry goes with the document, and the sheet lives as long as the
# components that use it (a strong value would keep its document alive through the model's back-reference).
_SHEETS: weakref.WeakKeyDictionary[Document, weakref.ref[InlineStyleSheet]] = weakref.WeakKeyDictionary()


def stylesheet() -> InlineStyleSheet | str:
    """The explorable's CSS for a component of the page being built: `stylesheets=[stylesheet()]`.

    Within a page (Panel's current document: a served session, or `panel.io.state.set_curdoc`) every call
    returns the same model, so the document carries the text once. With no current document (a page built
    for a test or a notebook) each call gets a model of its own, which works in any document. Where Panel
    takes no stylesheet model (explorable.patches.stylesheet_models off), the CSS text itself.
    """
    if not stylesheet_models.active():
        return stylesheet_css()
    doc = pn.state.curdoc
    if doc is None:
        return InlineStyleSheet(css=stylesheet_css(), name=SHEET_NAME)
    ref = _SHEETS.get(doc)
    sheet = ref() if ref is not None else None
    if sheet is None:
        sheet = InlineStyleSheet(css=stylesheet_css(), name=SHEET_NAME)
        _SHEETS[doc] = weakref.ref(sheet)
    return sheet


@lru_cache(maxsize=None)
def logo_svg() -> str:
    return (ASSETS_DIR / "logo.svg").read_text()


def toggled_styles(styles: dict[str, str], on: bool) -> dict[str, str | None]:
    """`styles`, or each of its properties set to None: BokehJS drops a style property only when the new
    map sets it to null (one the map leaves out stays on the element)."""
    return dict(styles) if on else dict.fromkeys(styles)


def set_styles(widget: pn.widgets.Widget, styles: dict[str, str], on: bool) -> None:
    """Put `styles` on `widget` (or take them off) without re-rendering it (explorable.patches.direct_styles)."""
    if (widget.styles == styles) == on:  # setting even an equal dict costs a restyle of the widget
        return
    direct_styles.put_styles(widget, toggled_styles(styles, on))


# The guide's "previous" at its first step and "next" at its last: greyed and not clickable. Not `disabled`:
# BokehJS rebuilds a button whose `disabled` changes and then lays out the whole page again (about 40 ms of
# the browser's work on every click that moves the guide to or from an end); a style change costs a restyle.
# Faded no further than its text's contrast allows (4.5:1 on the page: WCAG 1.4.3; at 0.4 it was 2.4:1).
END_OF_WALK_STYLES = {"opacity": "0.65", "pointer-events": "none", "cursor": "default"}

# A control that the current setting does not read (declared max_tokens while allocating on demand).
INACTIVE_STYLES = {"font-style": "italic", "opacity": "0.7"}


_FLAG = re.compile(r"(?<![\w-])--[a-z0-9]+(?:-[a-z0-9]+)*")


def keep_flags_whole(text: str) -> str:
    """`text` (HTML) with each --flag in a span a line may not break inside (at its hyphens; explorable.css)."""
    return _FLAG.sub(lambda m: f'<span class="flag">{m.group(0)}</span>', text)
