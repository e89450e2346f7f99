"""`panel serve app.py`: the continuous-batching explorable (one page per browser tab)."""
import panel as pn

from explorable.guard import protect
from explorable.health import page_built
from explorable.layout import TITLE, build_app, configure

configure()
page = build_app()
protect(pn.state.curdoc, page.state)  # this page's websocket may change its controls only, within a budget
page.servable(title=TITLE)
page_built(pn.state.curdoc)  # /liveness?endpoint=/app checks that a page got this far
