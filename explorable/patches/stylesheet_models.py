"""Components' `stylesheets` may hold a Bokeh StyleSheet model as well as text, so the page's CSS goes out once.

Panel renders each component in its own shadow root, so every styled pane, button and layout carries the
explorable's CSS. Given as text, Bokeh serialises one copy per component (about 50 on a page, 300 kB of every
page open); given as one `InlineStyleSheet` model (explorable.views.assets.stylesheet), it goes out once per
document and each component refers to it by id. Panel 1.9 declares the parameter as a list of str, yet hands
Bokeh models through untouched (it turns its own `.css` URLs into `ImportedStyleSheet` models, one per
document, the same way), and Bokeh's `stylesheets` property takes them: only the declaration is widened,
once, on the class that defines it (every component shares that parameter).

Written against Panel 1.9.4 (the `item_type` of `Layoutable.param.stylesheets`). Off: the declaration is
Panel's and every component gets the CSS as text (the same page, 300 kB heavier).
"""
from __future__ import annotations

from bokeh.models.css import StyleSheet
from panel.viewable import Layoutable

TESTED = {"panel": ("1.9.4", "1.10")}  # from the first version tried to the first release line not tried
_DECLARED = Layoutable.param.stylesheets
_PLAIN_ITEM_TYPE = getattr(_DECLARED, "item_type", None)  # Panel's own


def install() -> None:
    if _PLAIN_ITEM_TYPE is None:  # a Panel that does not restrict the items has nothing to widen
        return
    allowed = _PLAIN_ITEM_TYPE if isinstance(_PLAIN_ITEM_TYPE, tuple) else (_PLAIN_ITEM_TYPE,)
    if StyleSheet not in allowed:
        _DECLARED.item_type = (*allowed, StyleSheet)


def uninstall() -> None:
    if _PLAIN_ITEM_TYPE is not None:
        _DECLARED.item_type = _PLAIN_ITEM_TYPE


def active() -> bool:
    """Do components take a stylesheet model (widened here, or by a Panel that never restricted them)?"""
    item_type = getattr(_DECLARED, "item_type", None)
    return item_type is None or StyleSheet in (item_type if isinstance(item_type, tuple) else (item_type,))
