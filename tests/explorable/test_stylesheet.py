"""The explorable's CSS goes out once per page: one stylesheet model per document, shared by every component.

Pages are built as a served session builds them (Panel's current document set) and serialised the way the
server answers a browser's PULL-DOC, without a server.
"""
from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from bokeh.document import Document
from bokeh.models import InlineStyleSheet
from panel.io.state import set_curdoc

from explorable.views.assets import SHEET_NAME, stylesheet, stylesheet_css
from tests.conftest import ROOT


def _page_payload():
    """benchmarks/page_payload.py: the page as a served session builds it, and its JSON CSS counter."""
    spec = importlib.util.spec_from_file_location("cb_page_payload", ROOT / "benchmarks" / "page_payload.py")
    module = sys.modules.setdefault(spec.name, importlib.util.module_from_spec(spec))
    if not hasattr(module, "page_message"):
        spec.loader.exec_module(module)
    return module


served_page, json_copies = _page_payload().page_message, _page_payload().json_copies


def styled(doc: Document, sheet: InlineStyleSheet) -> list:
    return [m for m in doc.models if sheet in (getattr(m, "stylesheets", None) or [])]


@pytest.fixture(scope="module")
def page():
    return served_page()


def test_the_document_carries_the_css_once(page):
    _, text = page
    css = stylesheet_css()
    assert len(css) > 1000
    assert json_copies(json.loads(text), css) == 1
    assert text.count(json.dumps(css)[1:-1]) == 1  # the raw message text too, not only its parsed form


def test_every_styled_component_refers_to_the_one_sheet(page):
    doc, _ = page
    sheets = [m for m in doc.models if isinstance(m, InlineStyleSheet) and m.css == stylesheet_css()]
    assert len(sheets) == 1 and sheets[0].name == SHEET_NAME
    users = styled(doc, sheets[0])
    assert len(users) >= 40  # panes, buttons and layouts of the header, sidebar, guide, readouts, log...
    classes = {c for m in users for c in (m.css_classes or [])}
    assert {"sidebar", "notices", "readouts-pane", "lane-caption", "step-button", "stops", "reset"} <= classes
    # No component still carries the text itself.
    assert not [m for m in doc.models if stylesheet_css() in (getattr(m, "stylesheets", None) or [])]


def test_two_pages_get_their_own_sheet(page):
    """A Bokeh model belongs to one document: each session has its own sheet, and both serialise."""
    doc, _ = page
    other, text = served_page()
    assert json_copies(json.loads(text), stylesheet_css()) == 1
    mine = {m.id for m in doc.models if isinstance(m, InlineStyleSheet) and m.name == SHEET_NAME}
    theirs = {m.id for m in other.models if isinstance(m, InlineStyleSheet) and m.name == SHEET_NAME}
    assert len(mine) == len(theirs) == 1 and mine != theirs


def test_within_a_document_the_sheet_is_one_model_and_without_one_each_call_gets_its_own():
    doc = Document()
    with set_curdoc(doc):
        assert stylesheet() is stylesheet()
    assert stylesheet() is not stylesheet()  # no current document: free to go into any document
    assert stylesheet().css == stylesheet_css()
