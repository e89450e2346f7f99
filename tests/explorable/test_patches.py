"""explorable.patches: every patch is on with the library versions pyproject.toml pins; the page builds and answers
a click with any one of them off; a library outside a patch's tested range leaves it out, with one log line.

(What each patch does is pinned by its own tests: test_inline_arrays, test_prompt_writes, test_prompt_changes,
test_crossed_clicks_browser, test_stylesheet, test_paint_in_sight_browser, test_relayout_browser, test_query_fuzz,
test_accessibility_browser; text_updates and aria_names below; the served page with every patch off in
test_patches_browser.)
"""
from __future__ import annotations

import importlib
import logging
import os
import re

import panel as pn
import param
import pytest
import pyviz_comms
from bokeh.document import Document
from bokeh.protocol.message import Message
from panel.io.state import set_curdoc

from explorable import patches
from explorable.page.layout import build_app
from explorable.patches import aria_names, text_updates
from tests.conftest import ROOT

MODULES = {name: importlib.import_module(f"explorable.patches.{name}") for name in patches.NAMES}


@pytest.fixture
def reinstalled():
    """Every patch back as the app installs them once the test is done (they are process-wide)."""
    yield
    os.environ.pop(patches.OFF_VARIABLE, None)
    patches.install()


def release(widget, value) -> None:
    with param.edit_constant(widget):
        widget.value_throttled = value


def readout_value(app, key: str) -> float:
    return float(re.search(rf'data-readout="{key}".*?data-value="([^"]+)"', app.views["readouts"].pane.object)[1])


def test_the_pins_are_the_tested_versions():
    """pyproject.toml's upper bounds on Panel and Bokeh are the release lines every patch was tested on."""
    text = (ROOT / "pyproject.toml").read_text()
    for library in ("panel", "bokeh"):
        high = {m.TESTED[library][1] for m in MODULES.values() if library in m.TESTED}
        assert len(high) == 1 and f'"{library}>=' in text and f"<{high.pop()}\"" in text, library


@pytest.mark.parametrize("name", patches.NAMES)
def test_the_patch_is_active_on_the_pinned_versions(name, reinstalled):
    module = MODULES[name]
    assert patches.untested(module) == []
    assert patches.install()[name] and module.active()
    assert module.__doc__ and "Written against" in module.__doc__ and "Off:" in module.__doc__


@pytest.mark.parametrize("name", patches.NAMES)
def test_with_the_patch_off_the_page_builds_and_answers_a_click(name, reinstalled, monkeypatch):
    monkeypatch.setenv(patches.OFF_VARIABLE, name)
    state = patches.install()
    assert state.pop(name) is False and all(state.values())
    doc = Document()
    with set_curdoc(doc):
        app = build_app(sync=False)
        pn.panel(app).get_root(doc, pyviz_comms.Comm())
    controls = app.views["controls"]
    stops = next(w for w in pn.panel(controls).select(pn.widgets.RadioButtonGroup) if "stop-max_num_seqs" in w.css_classes)
    stops.value = 64  # what Panel sets when the reader clicks the "64" stop
    assert app.state.max_num_seqs == 64 and readout_value(app, "preemptions") == 0
    release(controls.pool_gib, 2.0)  # a slider let go
    assert app.state.pool_gib == 2.0 and readout_value(app, "peak_batch") < 64
    guide = app.views["guide"]
    chosen = guide.chosen
    guide.next.clicks += 1  # a button
    assert guide.chosen == chosen + 1 and app.state.control_values() != {**app.state.defaults(), "pool_gib": 2.0}


def test_every_module_of_the_package_is_a_named_patch():
    """A patch added to explorable/patches/ without its name in NAMES would escape install() and these tests."""
    files = {p.stem for p in (ROOT / "explorable" / "patches").glob("*.py") if p.stem != "__init__"}
    assert files == set(patches.NAMES)
    for module in MODULES.values():
        assert set(module.TESTED) <= {"panel", "bokeh", "tornado"} and callable(module.uninstall)


def test_text_updates_sends_the_text_alone_and_off_goes_through_panel(reinstalled, monkeypatch):
    """Active: a change of text sets the model's text without Panel recomputing the pane's properties; off:
    Panel's own path (its `_get_properties`, the 1-2 ms this saves). The browser gets the same text either way."""
    recomputed: list[int] = []
    plain = pn.pane.HTML._get_properties
    monkeypatch.setattr(pn.pane.HTML, "_get_properties", lambda self, doc: recomputed.append(1) or plain(self, doc))
    for on in (True, False):
        text_updates.install() if on else text_updates.uninstall()
        doc = Document()
        pane = text_updates.TextHTML("<p>one</p>", html_attributes={"aria-live": "polite"})
        model = pane.get_root(doc)
        doc.add_root(model)
        changed: list[str] = []
        doc.on_change(lambda e: changed.append(getattr(e, "attr", "")))
        recomputed.clear()
        pane.object = "<p>two</p>"
        assert "two" in model.text and model.html_attributes == {"aria-live": "polite"} and changed == ["text"]
        assert bool(recomputed) is not on, (on, recomputed)


def test_aria_names_puts_its_script_on_the_page_only_while_active(reinstalled):
    """Active: one invisible pane whose script names every control's button groups; off: no such pane."""
    def scripts() -> list[str]:
        app = build_app(sync=False)
        return [p.object for p in pn.panel(app).select(pn.pane.HTML) if "aria-names" in p.css_classes]

    aria_names.install()
    (script,) = scripts()
    assert '"stop-max_num_seqs": "' in script and '"guide-tabs": "guides"' in script and "aria-pressed" in script
    aria_names.uninstall()
    assert scripts() == []


def test_an_untested_version_leaves_its_patches_out_with_one_log_line(reinstalled, monkeypatch, caplog):
    for module in MODULES.values():
        module.uninstall()
    plain_send, plain_params = Message.send, importlib.import_module("panel.io.location")._get_location_params
    real = patches.installed_version
    monkeypatch.setattr(patches, "installed_version", lambda lib: "1.10.0" if lib == "panel" else real(lib))
    monkeypatch.setattr(patches, "_reported", set())
    with caplog.at_level(logging.WARNING, logger="explorable.patches"):
        state = patches.install()
        patches.install()  # said once per process
    panel_patches = {name for name, m in MODULES.items() if "panel" in m.TESTED}
    assert {name for name, on in state.items() if not on} == panel_patches
    assert importlib.import_module("panel.io.location")._get_location_params is plain_params  # Panel's own
    lines = [r.getMessage() for r in caplog.records if r.name == "explorable.patches"]
    assert len(lines) == 1 and "panel 1.10.0 (tested: 1.9.4 to before 1.10)" in lines[0]
    assert all(name in lines[0] for name in panel_patches)
    assert Message.send is not plain_send  # Bokeh's patches, in range, are on


def test_out_of_range_patches_nothing_and_says_so_in_one_line(reinstalled, monkeypatch, caplog):
    """Every library out of range: not one of the libraries' attributes is replaced, and one line says why."""
    for module in MODULES.values():
        module.uninstall()
    monkeypatch.setattr(patches, "installed_version", lambda lib: "99.0")
    monkeypatch.setattr(patches, "_reported", set())
    location = importlib.import_module("panel.io.location")
    serialization = importlib.import_module("bokeh.core.serialization")
    before = (Message.send, location._get_location_params, location.parse_query,
              serialization.Serializer._encode_bytes, pn.viewable.Layoutable.param.stylesheets.item_type)
    with caplog.at_level(logging.WARNING, logger="explorable.patches"):
        assert not any(patches.install().values())
    after = (Message.send, location._get_location_params, location.parse_query,
             serialization.Serializer._encode_bytes, pn.viewable.Layoutable.param.stylesheets.item_type)
    assert after == before
    lines = [r.getMessage() for r in caplog.records if r.name == "explorable.patches"]
    assert len(lines) == 1 and all(f"{lib} 99.0" in lines[0] for lib in ("panel", "bokeh", "tornado"))
    assert all(name in lines[0] for name in patches.NAMES)


@pytest.mark.parametrize("version, tested, inside", [
    ("1.9.4", ("1.9.4", "1.10"), True), ("1.9.12", ("1.9.4", "1.10"), True), ("1.9.3", ("1.9.4", "1.10"), False),
    ("1.10.0", ("1.9.4", "1.10"), False), ("1.10.0a3", ("1.9.4", "1.10"), False), ("3.10.0.dev5", ("3.9.0", "3.10"), False),
    ("3.9.2+local", ("3.9.0", "3.10"), True), ("", ("3.9.0", "3.10"), False),
])
def test_version_ranges(version, tested, inside):
    assert patches.in_range(version, tested) is inside
