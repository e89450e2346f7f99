"""`panel serve app.py`: the continuous-batching explorable (one page per browser tab)."""
import panel as pn

from explorable.guard import protect
from explorable.health import page_built
from explorable.layout import TITLE, build_app, configure

configure()
protect(pn.state.curdoc)  # this page's websocket may change its controls, and nothing else
build_app().servable(title=TITLE)
page_built(pn.state.curdoc)  # /liveness?endpoint=/app checks that a page got this far
