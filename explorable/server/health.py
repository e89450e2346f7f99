"""`/liveness?endpoint=/app` answers 500 when the page cannot be built.

Panel's liveness handler builds one document and answers 200 unless building raised; but Panel's script
runner catches whatever app.py raises (and logs it), so a server whose every page came out blank still
answered 200. app.py calls `page_built(doc)` as its last step, and `install()` makes the deep check
require that mark; the plain `/liveness` is Panel's, unchanged.
"""
from __future__ import annotations

import weakref

from panel.io import liveness
from tornado import web

_panel_get = liveness.LivenessHandler.get
_built: weakref.WeakSet = weakref.WeakSet()


def page_built(doc) -> None:
    """app.py got to its end for this document (a page, or the health check's)."""
    if doc is not None:
        _built.add(doc)


async def deep_liveness_get(self) -> None:
    endpoint = self.get_argument("endpoint", default=None)
    if endpoint is None or endpoint not in self.applications:
        return await _panel_get(self)  # Panel's answers: 200 for the server, 400 for an unknown endpoint
    self.set_header("Content-Type", "application/json")
    try:
        doc = self.applications[endpoint].create_document()
    except Exception as exc:
        raise web.HTTPError(500, f"Endpoint {endpoint!r} could not be served: {type(exc).__name__}") from None
    built = doc in _built
    liveness._cleanup_doc(doc)
    if not built:
        raise web.HTTPError(500, f"Endpoint {endpoint!r} could not be served: the page came out empty "
                                 "(the server log says why)")
    self.write({endpoint: True})


def install() -> None:
    """Answer the deep check with `deep_liveness_get` (`panel serve --liveness` routes to Panel's class)."""
    liveness.LivenessHandler.get = deep_liveness_get
