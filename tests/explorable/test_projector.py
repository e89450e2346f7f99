"""Projector view: a link flag that enlarges every chart text and that the page's URL keeps."""
from __future__ import annotations

import pytest
from bokeh.models import Axis, Label

from explorable.views import projector
from explorable.page.layout import ExplorableApp
from explorable.state.control_specs import SIDEBAR_CONTROLS
from explorable.page.url import query_values
from explorable.state.store import CONTROLS, SLO_CONTROLS, ExplorableState


@pytest.mark.parametrize("value,wanted", [("1", True), ("true", True), ("On", True), ("0", False), ("", False),
                                          ("banana", False)])
def test_the_flag_reads_like_the_boolean_controls(value, wanted):
    assert projector.wanted({"projector": value}) is wanted
    assert projector.wanted({}) is False


def chart_font_sizes(app: ExplorableApp) -> list[float]:
    figures = [app.views["lanes"].figure, app.views["strips"].batch_fig, app.views["strips"].kv_fig,
               app.views["curves"].by_seqs.figure, app.views["curves"].by_pool.figure]
    sizes = []
    for fig in figures:
        for axis in fig.select(type=Axis):
            sizes += [axis.major_label_text_font_size, axis.axis_label_text_font_size]
        sizes += [label.text_font_size for label in fig.select(type=Label)]
    return [float(str(s).rstrip("px")) for s in sizes if s is not None]


def test_projector_view_enlarges_every_chart_text_and_stays_in_the_url():
    state = ExplorableState()
    app = ExplorableApp(state=state, projector=True)
    assert min(chart_font_sizes(app)) >= projector.TEXT_PX
    assert query_values(state)["projector"] == "1"
    # (the two-number form's fields are written only when set: a link never grows for a section not used)
    # (the two-number form's fields go into a link only when it is in use)
    assert set(query_values(state)) - {"projector"} == set(SIDEBAR_CONTROLS)


def test_without_the_flag_nothing_changes():
    state = ExplorableState()
    app = ExplorableApp(state=state)
    assert min(chart_font_sizes(app)) < projector.TEXT_PX
    assert "projector" not in query_values(state)
