"""A chart's data is sent to the browser only when it changed (explorable.views.sources): Bokeh sends every
assignment to a source in a document, equal or not."""
from __future__ import annotations

import math

import numpy as np
from bokeh.document import Document
from bokeh.models import ColumnDataSource

from explorable.views.sources import same_column, set_data


def _sent(source: ColumnDataSource) -> list[str]:
    """The document change events that will reach the browser for `source`."""
    doc = Document()
    doc.add_root(source)
    events: list[str] = []
    doc.on_change(lambda e: events.append(type(e).__name__) if e.model is source else None)
    return events


def test_bokeh_itself_sends_an_equal_assignment_and_set_data_does_not():
    source = ColumnDataSource({"x": np.arange(5.0), "y": np.array([1.0, math.nan, 3.0, 4.0, 5.0])})
    sent = _sent(source)
    source.data = {"x": np.arange(5.0), "y": np.array([1.0, math.nan, 3.0, 4.0, 5.0])}
    assert sent == ["ColumnDataChangedEvent"]  # why explorable.views.sources exists
    equal = {"x": np.arange(5.0), "y": np.array([1.0, math.nan, 3.0, 4.0, 5.0])}  # new arrays, NaN where it was
    assert set_data(source, equal) is False
    assert sent == ["ColumnDataChangedEvent"]


def test_set_data_sends_any_change_of_value_kind_shape_or_columns():
    source = ColumnDataSource({"x": np.arange(3.0), "label": ["a", "b", "c"]})
    sent = _sent(source)
    changes = [
        {"x": np.array([0.0, 1.0, 2.5]), "label": ["a", "b", "c"]},  # a value
        {"x": np.array([0.0, 1.0, 2.5]), "label": ["a", "b", "d"]},  # a string
        {"x": np.array([0, 1, 2]), "label": ["a", "b", "d"]},  # the same numbers as integers
        {"x": np.array([0, 1]), "label": ["a", "b"]},  # shorter
        {"x": np.array([0, 1]), "label": ["a", "b"], "y": [1, 2]},  # a column more
    ]
    for data in changes:
        assert set_data(source, data) is True
        assert all(same_column(source.data[k], v) for k, v in data.items()) and source.data.keys() == data.keys()
    assert sent == ["ColumnDataChangedEvent"] * len(changes)
    assert set_data(source, {"x": np.array([0, 1]), "label": ["a", "b"], "y": [1, 2]}) is False
    assert len(sent) == len(changes)


def test_a_click_along_a_curves_own_control_sends_only_its_point():
    """The --max-num-seqs curve around the other settings is the same at 64 and 256: only the current point
    and its marker move, drawn on the overlay canvas, so the plot's curve, axes and grid are not painted again."""
    from explorable.views.curves import Curves
    from explorable.state.store import ExplorableState

    state = ExplorableState()
    curves = Curves(state=state)
    doc = Document()
    doc.add_root(curves.by_seqs.figure)
    changed: list[str] = []
    doc.on_change(lambda e: changed.append(e.model.id))
    for seqs in (64, 256, 64):
        state.max_num_seqs = seqs
    line, point, marker = curves.by_seqs.line, curves.by_seqs.point, curves.by_seqs.marker
    assert set(changed) == {point.id, marker.id}, changed
    assert list(point.data["x"]) == [64.0]
    overlay = [r for r in curves.by_seqs.figure.renderers if getattr(r, "data_source", None) is point]
    assert overlay and all(r.level == "overlay" for r in overlay) and marker.level == "overlay"
    assert line.id not in changed
