"""`panel serve app.py`: the continuous-batching explorable (one page per browser tab)."""
import panel as pn

from explorable.page import startup

startup.begin()  # first of all: on a fresh install, numba's compile starts in child processes at once

from explorable import server  # noqa: E402
from explorable.server.guard import protect  # noqa: E402
from explorable.server.health import page_built  # noqa: E402
from explorable.page.layout import TITLE, build_app, configure  # noqa: E402
from explorable.server.long_lived import track  # noqa: E402
from explorable.page import template  # noqa: E402

configure()
server.install()  # bounded logs, the compute budget, the deep health check (once per process)
doc = pn.state.curdoc
template.install(doc)  # the viewport tag: a phone lays the page out at its own width
protect(doc)  # from its first message on, this page's websocket may change its controls only, within a budget
track(doc)  # the process's baseline is frozen out of garbage collection once no page is alive


def build_page() -> pn.viewable.Viewable:
    page = build_app()
    protect(doc, page.state)  # the budget's "busy" notice goes to this page's state
    return page


startup.first_page(build_page, TITLE).servable(title=TITLE)
page_built(doc)  # /liveness?endpoint=/app checks that a page got this far
