"""A Bokeh message to a page's websocket is handed to the socket whole, in one go, and its write lock is free
while the socket takes it, so Panel can write the page's update at once (explorable.patches.prompt_writes)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest
from bokeh.document import Document
from bokeh.document.events import ColumnDataChangedEvent
from bokeh.models import ColumnDataSource
from bokeh.protocol import Protocol
from bokeh.protocol.message import Message
from bokeh.server.views.ws import WSHandler
from tornado.locks import Lock

from explorable.patches import inline_arrays, prompt_writes


class _Socket:
    """What tornado's WebSocketHandler.write_message needs of its connection: frames are recorded, and each
    write completes only when the test says so (a socket that has not taken the data yet)."""

    def __init__(self, closes_after: int | None = None):
        self.frames: list[tuple[str | bytes, bool]] = []
        self.pending: list[asyncio.Future] = []
        self.closes_after = closes_after  # frames it takes before it closes (a page gone mid-message)

    def is_closing(self) -> bool:
        return self.closes_after is not None and len(self.frames) >= self.closes_after

    def write_message(self, message, binary=False):
        self.frames.append((message, binary))
        done = asyncio.get_running_loop().create_future()
        self.pending.append(done)
        return done


def _handler(cls: type = WSHandler, closes_after: int | None = None) -> WSHandler:
    handler = object.__new__(cls)  # no tornado application: only what sending a message touches
    handler.write_lock = Lock()
    handler.ws_connection = _Socket(closes_after)
    return handler


def _unread_errors(loop: asyncio.AbstractEventLoop) -> list[dict]:
    """What asyncio reports through the loop's handler (a task's exception never retrieved, among others)."""
    reports: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: reports.append(context))
    return reports


def _message_with_a_buffer() -> Message:
    doc = Document()
    source = ColumnDataSource(data={"x": np.arange(3.0)})
    doc.add_root(source)
    # Larger than what explorable.patches.inline_arrays puts inside the message (installed or not): a binary buffer.
    source.data = {"x": np.arange(2.0 * inline_arrays.LIMIT / 8)}
    return Protocol().create("PATCH-DOC", [ColumnDataChangedEvent(doc, source, "data")])


@pytest.fixture
def installed(monkeypatch):
    monkeypatch.setattr(Message, "send", Message.send)  # put Bokeh's own back after the test
    prompt_writes.install()
    prompt_writes.install()  # twice changes nothing
    assert getattr(Message.send, "_explorable_prompt", False)


def test_every_frame_is_handed_over_before_the_first_write_completes_and_the_lock_is_then_free(installed):
    async def scenario():
        handler, message = _handler(), _message_with_a_buffer()
        assert len(message.buffers) == 1, "the message should carry one binary buffer"
        sending = asyncio.ensure_future(message.send(handler))
        await asyncio.sleep(0)  # one turn of the loop: no write has completed yet
        socket = handler.ws_connection
        assert socket.frames == list(prompt_writes.frames(message))
        assert [binary for _, binary in socket.frames] == [False, False, False, False, True]
        # Panel's own test of a free lock (panel.io.document.unlocked) before it writes a page's update at once
        assert handler.write_lock._block._value != 0, "the lock must be free while the socket takes the frames"
        assert not sending.done()
        for write in socket.pending:
            write.set_result(None)
        sent = await sending
        assert sent == sum(len(data) for data, _ in socket.frames)

    asyncio.run(scenario())


def test_a_message_waits_for_a_sender_that_holds_the_lock(installed):
    async def scenario():
        handler, message = _handler(), _message_with_a_buffer()
        releaser = await handler.write_lock.acquire()
        sending = asyncio.ensure_future(message.send(handler))
        await asyncio.sleep(0)
        assert handler.ws_connection.frames == []  # nothing of ours while another sender holds the lock
        releaser.__exit__(None, None, None)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(handler.ws_connection.frames) == 5
        for write in handler.ws_connection.pending:
            write.set_result(None)
        await sending

    asyncio.run(scenario())


def test_a_connection_that_is_no_server_websocket_keeps_bokehs_way(installed):
    class Client:
        def __init__(self):
            self.write_lock = Lock()
            self.frames = []

        async def write_message(self, message, binary=False, locked=True):
            self.frames.append(message)

    async def scenario():
        client, message = Client(), _message_with_a_buffer()
        await message.send(client)
        assert client.frames == [data for data, _ in prompt_writes.frames(message)]

    asyncio.run(scenario())


def test_a_socket_that_closes_while_taking_the_frames_fails_the_send_as_bokeh_expects(installed):
    """Bokeh's WSHandler.send_message catches WebSocketClosedError (the page is gone); every failed write is
    read, so asyncio has nothing to report as never retrieved, and the lock is let go."""
    import gc

    from tornado.websocket import WebSocketClosedError

    async def scenario(closes_after):
        reports = _unread_errors(asyncio.get_running_loop())
        handler, message = _handler(closes_after=closes_after), _message_with_a_buffer()
        sending = asyncio.ensure_future(message.send(handler))
        await asyncio.sleep(0)
        for write in handler.ws_connection.pending:  # what it had taken fails with it
            write.set_exception(WebSocketClosedError())
        with pytest.raises(WebSocketClosedError):
            await sending
        del sending, handler
        gc.collect()
        await asyncio.sleep(0)
        return reports

    for closes_after in (None, 0, 2):  # after every frame, before the first, in the middle of the message
        reports = asyncio.run(scenario(closes_after))
        assert reports == [], (closes_after, reports)


def test_a_websocket_class_that_writes_its_own_way_keeps_bokehs_send(installed):
    class CommHandler(WSHandler):  # as Panel's Jupyter executor: frames go through its own write_message
        async def write_message(self, message, binary=False, locked=True):
            self.sent_own_way.append(message)

    async def scenario():
        handler, message = _handler(CommHandler), _message_with_a_buffer()
        handler.sent_own_way = []
        await asyncio.wait_for(message.send(handler), 5)  # taken the fast way, it would wait on the stub forever
        assert handler.sent_own_way == [data for data, _ in prompt_writes.frames(message)]
        assert handler.ws_connection.frames == []

    asyncio.run(scenario())
