"""`panel serve app.py`: the continuous-batching explorable (one page per browser tab)."""
from explorable.layout import TITLE, build_app, configure
from explorable.startup import first_page

configure()
first_page(build_app, TITLE).servable(title=TITLE)
