"""Two quick clicks whose messages cross the server's (explorable.patches.crossed_changes), made certain by holding the
page's websocket: the page ends lighting the step its controls are at, and the reader's last click wins.

A real `panel serve app.py` and headless Chromium, the websocket routed through Playwright so that one direction
can be held back while the other side goes on."""
from __future__ import annotations

import json
import re

import pytest

from tests.explorable.served_app import FIRST_PAGE_TIMEOUT_MS, TIMEOUT_MS, readout, skip_without_chromium

pytestmark = pytest.mark.browser

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
skip_without_chromium()

SERVER_TURN_MS = 1500  # ample time for the server to process a click and send its reply (held, or passed on)


class Wire:
    """The page's websocket, each direction held back on demand (frames kept in order and sent on release)."""

    def __init__(self) -> None:
        self.hold_up = self.hold_down = False
        self.up: list = []
        self.down: list = []

    def route(self, ws) -> None:
        server = ws.connect_to_server()
        self.ws, self.server = ws, server
        ws.on_message(lambda m: self.up.append(m) if self.hold_up else server.send(m))
        server.on_message(lambda m: self.down.append(m) if self.hold_down else ws.send(m))

    def release(self) -> None:
        self.hold_up = self.hold_down = False
        for frame in self.up:
            self.server.send(frame)
        for frame in self.down:
            self.ws.send(frame)
        self.up, self.down = [], []

    def release_up_as_one_patch(self) -> None:
        """Send the held PATCH-DOC messages as one, their events in order: what the compute budget does with the
        changes it held (explorable.server.budget.hold), and what Bokeh does when it reads two before Panel runs."""
        messages = [self.up[i:i + 3] for i in range(0, len(self.up), 3)]  # header, metadata, content
        headers = [json.loads(header) for header, _metadata, _content in messages]
        assert [h["msgtype"] for h in headers] == ["PATCH-DOC"] * len(messages) and not any(
            h.get("num_buffers") for h in headers), headers
        events = [event for _h, _m, content in messages for event in json.loads(content)["events"]]
        header, metadata, _content = messages[0]
        self.hold_up, self.up = False, []
        for frame in (header, metadata, json.dumps({"events": events})):
            self.server.send(frame)


@pytest.fixture
def wired(browser, server):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    wire = Wire()
    page.route_web_socket(re.compile(r".*/ws(\?.*)?$"), wire.route)
    page.goto(server)
    sync_api.expect(readout(page, "peak_batch")).to_be_visible(timeout=FIRST_PAGE_TIMEOUT_MS)
    page.locator(".lane-chart canvas").first.wait_for()
    yield page, wire
    page.wait_for_timeout(500)
    context.close()
    assert not errors, errors


def _stop(page, label: str):
    return page.locator(".stop-max_num_seqs button").filter(has_text=re.compile(rf"^\s*{label}\s*$"))


def _step(page, number: int):
    return page.locator(".step-button button").filter(has_text=re.compile(rf"^\s*{number}\."))


def _at_step_4(page) -> None:
    """Step 4 (Reserve up front: 256 sequences, reserve) is what the controls show and the one step lit."""
    sync_api.expect(page.locator(".step-button button.bk-active")).to_have_count(1)
    sync_api.expect(page.locator(".step-button button.bk-active")).to_have_text(re.compile(r"^\s*4\."))
    sync_api.expect(readout(page, "peak_batch")).not_to_have_text("8")
    page.wait_for_function("new URLSearchParams(location.search).get('allocation') === 'reserve' && "
                           "new URLSearchParams(location.search).get('max_num_seqs') === '256'")
    sync_api.expect(page.locator(".ctl-allocation button.bk-active")).to_have_text(re.compile("reserve", re.I))
    sync_api.expect(_stop(page, "256")).to_have_class(re.compile(r"\bbk-active\b"))
    sync_api.expect(_stop(page, "8")).not_to_have_class(re.compile(r"\bbk-active\b"))


def test_a_step_clicked_while_the_reply_to_a_stop_is_on_its_way_stays_lit(wired):
    page, wire = wired
    sync_api.expect(_step(page, 1)).to_have_class(re.compile(r"\bbk-active\b"))  # the default is step 1
    wire.hold_down = True
    _stop(page, "8").click()  # the server leaves step 1 and unlights it; its reply waits on the wire
    page.wait_for_timeout(SERVER_TURN_MS)
    _step(page, 4).click()  # the page still shows step 1 lit; the click reaches the server after that reply
    page.wait_for_timeout(SERVER_TURN_MS)
    wire.release()  # the page now gets "no step lit" after its own click on step 4
    _at_step_4(page)


def test_a_step_clicked_right_after_a_stop_is_not_lost(wired):
    page, wire = wired
    wire.hold_up = True
    _stop(page, "8").click()
    _step(page, 4).click()
    page.wait_for_timeout(300)
    wire.release_up_as_one_patch()  # the stop's processing comes first and unlights step 4, clicked meanwhile
    _at_step_4(page)
