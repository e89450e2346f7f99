"""`panel serve app.py`: the continuous-batching explorable (one page per browser tab)."""
from explorable.layout import TITLE, build_app, configure

configure()
build_app().servable(title=TITLE)
