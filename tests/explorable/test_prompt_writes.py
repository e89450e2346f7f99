"""A Bokeh message to a page's websocket is handed to the socket whole, in one go, and its write lock is free
while the socket takes it, so Panel can write the page's update at once (explorable.prompt_writes)."""
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

from explorable import prompt_writes


class _Socket:
    """What tornado's WebSocketHandler.write_message needs of its connection: frames are recorded, and each
    write completes only when the test says so (a socket that has not taken the data yet)."""

    def __init__(self):
        self.frames: list[tuple[str | bytes, bool]] = []
        self.pending: list[asyncio.Future] = []

    def is_closing(self) -> bool:
        return False

    def write_message(self, message, binary=False):
        self.frames.append((message, binary))
        done = asyncio.get_running_loop().create_future()
        self.pending.append(done)
        return done


def _handler() -> WSHandler:
    handler = object.__new__(WSHandler)  # no tornado application: only what sending a message touches
    handler.write_lock = Lock()
    handler.ws_connection = _Socket()
    return handler


def _message_with_a_buffer() -> Message:
    doc = Document()
    source = ColumnDataSource(data={"x": np.arange(3.0)})
    doc.add_root(source)
    source.data = {"x": np.arange(5.0)}
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
        assert message.buffers, "the message should carry a binary buffer (Bokeh's default encoding)"
        sending = asyncio.ensure_future(message.send(handler))
        await asyncio.sleep(0)  # one turn of the loop: no write has completed yet
        socket = handler.ws_connection
        assert socket.frames == list(prompt_writes.frames(message))
        assert [binary for _, binary in socket.frames] == [False, False, False, False, True]
        # Panel's own test of a free lock (panel.io.document.unlocked) before it writes a page's update at once
        assert handler.write_lock._block._value != 0, "the lock is held while the socket takes the frames"
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
        assert handler.ws_connection.frames == []  # frames of two messages never interleave
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
    taken, so nothing is left for asyncio to report as never retrieved."""
    from tornado.websocket import WebSocketClosedError

    async def scenario():
        handler, message = _handler(), _message_with_a_buffer()
        sending = asyncio.ensure_future(message.send(handler))
        await asyncio.sleep(0)
        for write in handler.ws_connection.pending:
            write.set_exception(WebSocketClosedError())
        with pytest.raises(WebSocketClosedError):
            await sending
        assert all(write.done() for write in handler.ws_connection.pending)
        assert handler.write_lock._block._value != 0

    asyncio.run(scenario())
