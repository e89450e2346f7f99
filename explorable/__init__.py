"""The continuous-batching explorable: a Panel app over the engine (`panel serve app.py`).

`state/` holds the controls and the runs they give (no Panel), `views/` draws them, `page/` puts one reader's
page together and reads its link, `server/` guards a public server, `static_site/` builds the page as files,
and `patches/` fences every change to a library's private code. docs/architecture.md says which imports which.
"""
