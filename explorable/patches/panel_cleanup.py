"""A document built outside any session (the health route's page) is let go of as Panel lets go of a session's.

Panel keeps every page it renders in its own registry until the page's session ends, and a document built by
`Application.create_document()` has no session to end: without Panel's own cleanup (the one its liveness route
calls) each health check would keep a whole page alive. Bokeh's public `Document.destroy` empties the document
but not Panel's registry.

Written against Panel 1.9.4 (`panel.io.document._cleanup_doc`). Off: the document's session-destroyed
callbacks run and Bokeh destroys it; Panel's registry keeps the page until the process ends.
"""
from __future__ import annotations

from bokeh.document import Document
from panel.io import document as panel_document

from explorable.patches import switch

TESTED = {"panel": ("1.9.4", "1.10")}  # from the first version tried to the first release line not tried
install, uninstall, active = switch()


def let_go(doc: Document) -> None:
    """Release everything `doc` and its page hold (Panel's own cleanup while active)."""
    if active():
        panel_document._cleanup_doc(doc)
        return
    for callback in list(doc.session_destroyed_callbacks):
        try:
            callback(None)
        except Exception:  # noqa: BLE001  (one failing callback must not keep the rest from running)
            pass
    doc.destroy(None)
