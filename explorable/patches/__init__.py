"""Every patch of a library's private code (Panel, Bokeh, BokehJS, Tornado), one module per patch."""
