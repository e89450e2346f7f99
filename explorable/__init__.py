"""The continuous-batching explorable: a Panel app over the engine (`panel serve app.py`).

`state` holds the controls and the run (no Panel); `lanes`, `strips`, `readouts`, `curves`, `logs_view`,
`guide`, `controls` and `live` are the views; `layout` puts one reader's page together.
"""
