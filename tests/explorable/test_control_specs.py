"""Each control is declared once (explorable.state.control_specs beside engine/settings.py), and everything else
the page has of it (the state's parameter, the widget, its quick stops, the URL key, the guard's mapping, the
static build's grid) is derived from that declaration."""
from __future__ import annotations

import panel as pn
import param
import pyviz_comms
from bokeh.document import Document

from engine import RunConfig
from engine.settings import SETTINGS
from explorable.page.layout import build_app
from explorable.page.url import query_values
from explorable.server.guard import control_of
from explorable.state.control_specs import (CONTROL_SPECS, CONTROLS, GRID_CONTROLS, SIDEBAR_CONTROLS, STATIC_STOPS,
                                            STEP_STOPS, URL_CONTROLS, WORKLOAD_CONTROLS)
from explorable.state.store import ExplorableState


def test_each_run_control_is_a_runconfig_field_with_its_settings_label_and_default():
    for name in CONTROLS:
        p = ExplorableState.param[name]
        assert name in SETTINGS and p.label == SETTINGS[name].label
        assert p.default == getattr(RunConfig(), name), name


def test_the_state_the_url_and_the_sidebar_hold_the_same_controls_in_one_order():
    app = build_app(sync=False)
    assert [n for n in ExplorableState.param if n in CONTROL_SPECS] == list(CONTROL_SPECS)
    # The two-number form is in the link as a group, only while it is used (a link to the article stays short).
    assert [n for n in query_values(app.state) if n in CONTROL_SPECS] == [n for n in URL_CONTROLS
                                                                          if n not in WORKLOAD_CONTROLS]
    app.state.param.update(output_p50=200, output_p99=2000, prompt_p50=300, prompt_p99=900)
    assert [n for n in query_values(app.state) if n in CONTROL_SPECS] == list(URL_CONTROLS)
    # The sidebar draws every control but the "Your workload" section's, which that section draws.
    assert list(app.views["controls"].widgets) == list(SIDEBAR_CONTROLS)
    assert set(SIDEBAR_CONTROLS) | set(WORKLOAD_CONTROLS) == set(CONTROL_SPECS)


def test_every_widget_is_tagged_with_its_control_and_the_guard_reads_the_tag():
    app = build_app(sync=False)
    app.views["your_workload"].card.collapsed = False  # the section builds its fields when first unfolded
    root = pn.panel(app).get_root(Document(), pyviz_comms.Comm())
    tagged = {control_of(m): m for m in root.select({"type": object}) if control_of(m)}
    assert set(tagged) == set(CONTROL_SPECS)


def test_a_log_scale_slider_moves_log2_of_its_control():
    state = ExplorableState()
    widget = build_app(state=state, sync=False).views["controls"].widgets["request_rate"]
    with param.edit_constant(widget):
        widget.value_throttled = 3.0  # log2(8)
    assert state.request_rate == 8.0
    state.request_rate = 16.0
    assert widget.value == widget.value_throttled == 4.0


def test_quick_stops_and_the_static_grid_come_from_the_declarations():
    from explorable.static_site import export, static_page

    assert export.GRID_ORDER == GRID_CONTROLS and static_page.STOPS == {**STATIC_STOPS, **STEP_STOPS}
    assert set(export.EXTRA_ORDER) == set(STEP_STOPS) and not set(STEP_STOPS) & set(STATIC_STOPS)
    assert set(static_page.FIXED) == set(CONTROLS) - set(GRID_CONTROLS) - set(WORKLOAD_CONTROLS)
    controls = build_app(sync=False).views["controls"]
    groups = {w.css_classes[-1]: w for w in pn.panel(controls).select(pn.widgets.RadioButtonGroup)
              if "stops" in w.css_classes}
    for name, spec in CONTROL_SPECS.items():
        if spec.stops:
            assert list(groups[f"stop-{name}"].options.values()) == [spec.typed(v) for v in spec.stops], name


def test_a_drop_down_of_an_optional_setting_shows_its_unset_choice_and_follows_the_state():
    """--max-model-len unset (None) is "the model's own": the drop-down the page first sends shows it (it showed
    an empty box: Panel leaves a None value out of the model), and the widget and the state follow each other."""
    from bokeh.document import Document

    from explorable.views.controls import control_widget, link

    state = ExplorableState()
    spec = CONTROL_SPECS["max_model_len"]
    widget = control_widget(state, spec)
    link(state, spec, widget)
    model = widget.get_root(Document())
    assert state.max_model_len is None and dict(model.options)[model.value] == "the model's own"
    widget.value = 4096
    assert state.max_model_len == 4096
    state.max_model_len = None
    assert dict(model.options)[model.value] == "the model's own"
    widget.value = 8192
    widget.value = widget.values[0]  # the reader picks "the model's own" again
    assert state.max_model_len is None
