"""explorable.patches: every patch is on with the library versions pyproject.toml pins; the page builds and answers
a click with any one of them off; a library outside a patch's tested range leaves it out, with one log line.

(What each patch does is pinned by its own tests: test_inline_arrays, test_prompt_writes, test_prompt_changes,
test_crossed_clicks_browser, test_stylesheet, test_paint_in_sight_browser, test_relayout_browser, test_query_fuzz.)
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
from tests.conftest import ROOT
from tests.explorable.served_app import (
    FIRST_PAGE_TIMEOUT_MS, TIMEOUT_MS, panel_serve, readout, skip_without_chromium,
)

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


# -- the served page with every patch off --------------------------------------------------------------------
@pytest.mark.browser
def test_the_served_page_with_every_patch_off_answers_a_click(browser):
    skip_without_chromium()
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    env = {**os.environ, patches.OFF_VARIABLE: "all",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with panel_serve(env) as url:
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=FIRST_PAGE_TIMEOUT_MS)
        assert page.locator(".paint-fix").count() == 0  # the BokehJS patch is not on the page
        page.locator(".stop-max_num_seqs button").filter(has_text=re.compile(r"^\s*64\s*$")).click()
        sync_api.expect(readout(page, "preemptions")).to_have_text("0")
        sync_api.expect(readout(page, "peak_batch")).to_have_text("64")
        page.wait_for_timeout(500)  # the curves' follow-up, before the page closes
        context.close()
        assert not errors, errors
