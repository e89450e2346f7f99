"""`/health`: is the server up, and (`/health?endpoint=/app`) can it build a page? A route of our own.

Panel's `--liveness` route builds one document for `?endpoint=` and answers 200 unless building raised; but
Panel's script runner catches whatever app.py raises (and logs it), so a server whose every page came out
blank still answered 200 there. app.py calls `page_built(doc)` as its last step, and this route requires that
mark. It is added with Panel's plugin mechanism:

    panel serve app.py --plugins explorable.server.health

`GET /health` answers `200 {"/health": true}` while the server answers at all; `GET /health?endpoint=/app`
builds and discards one page (about 0.5 s of CPU) and answers 200, or 500 with the reason, or 400 for an
endpoint the server does not serve.
"""
from __future__ import annotations

import weakref

from tornado import web

from explorable.patches import panel_cleanup

_built: weakref.WeakSet = weakref.WeakSet()


def page_built(doc) -> None:
    """app.py got to its end for this document (a page, or the health check's)."""
    if doc is not None:
        _built.add(doc)


class HealthHandler(web.RequestHandler):
    """`/health[?endpoint=/app]` on the Bokeh server that Panel runs (`self.application` is its BokehTornado)."""

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        endpoint = self.get_argument("endpoint", default=None)
        if endpoint is None:
            self.write({"/health": True})
            return
        contexts = getattr(self.application, "applications", {})  # BokehTornado's app path -> ApplicationContext
        if endpoint not in contexts:
            raise web.HTTPError(400, f"Endpoint {endpoint!r} is not served here")
        try:
            doc = contexts[endpoint].application.create_document()
        except Exception as exc:
            raise web.HTTPError(500, f"Endpoint {endpoint!r} could not be served: {type(exc).__name__}") from None
        built = doc in _built
        panel_cleanup.let_go(doc)  # as a session's page is let go of when it ends
        if not built:
            raise web.HTTPError(500, f"Endpoint {endpoint!r} could not be served: the page came out empty "
                                     "(the server log says why)")
        self.write({endpoint: True})


# Panel's plugin mechanism (`panel serve --plugins explorable.server.health`) adds these routes to the server.
ROUTES = [(r"/health", HealthHandler)]
