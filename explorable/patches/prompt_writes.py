"""Bokeh's own messages leave the server in one go, so a page's update is never held back behind them.

Bokeh sends a message (header, metadata, content and any buffers: one websocket frame each) by awaiting
the write of each frame in turn while it holds the connection's write lock, so the lock stays taken for
several turns of the event loop. Panel writes a page's update at once only while that lock is free;
otherwise it queues the update and retries on a later turn. When a class releases together, each page's
"OK" (Bokeh's reply to the release) still held its lock when that page's update was ready, so the updates
went out only once the loop had answered nearly every page: most of them at the end (1.4 s after the release
for 60 pages), rather than one after another from 0.1 s.

Here the frames of one message are handed to the socket back to back, with no turn of the loop between
them (the loop has one thread, so nothing can come between them either), and the lock is let go before
waiting for the socket to take them. Client connections, and a websocket class that writes its own way,
keep Bokeh's own method.

Written against Bokeh 3.9.2 (`Message.send`, `Message._buffers`, `WSHandler.write_lock`) and Tornado 6.5 (its
`WebSocketHandler.write_message`). Off: Bokeh's own send, one frame per turn of the loop.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

from bokeh.protocol.message import Message
from bokeh.server.views.ws import WSHandler
from tornado.websocket import WebSocketHandler

_MARK = "_explorable_prompt"
TESTED = {"bokeh": ("3.9.0", "3.10"), "tornado": ("6.4", "7")}  # the first version tried, the first line not tried
_PLAIN = Message.send  # Bokeh's own


def active() -> bool:
    return getattr(Message.send, _MARK, False)


def uninstall() -> None:
    Message.send = _PLAIN


def frames(message: Message) -> Iterator[tuple[str | bytes, bool]]:
    """(data, binary) of each websocket frame of `message`, in Bokeh's order."""
    yield message.header_json, False
    yield message.metadata_json, False
    yield message.content_json, False
    for buffer in message._buffers:
        yield json.dumps(buffer.ref), False
        yield buffer.to_bytes(), True


def install() -> None:
    """Once per process: `Message.send` to a server's websocket writes its frames back to back."""
    if active():
        return
    original = _PLAIN

    async def send(self: Message, conn) -> int:
        # Only Bokeh's own server websocket: a subclass that sends its own way (Panel's Jupyter executor
        # writes to a comm) and every client connection keep Bokeh's method.
        if not isinstance(conn, WSHandler) or type(conn).write_message is not WSHandler.write_message:
            return await original(self, conn)
        writes, sent, failed = [], 0, None
        with await conn.write_lock.acquire():  # another sender may hold it (one that still writes Bokeh's way)
            try:
                for data, binary in frames(self):
                    writes.append(WebSocketHandler.write_message(conn, data, binary))
                    sent += len(data)
            except Exception as exc:  # the socket closed under us (or a frame failed): the others fail with it
                failed = exc
        if failed is not None:
            await asyncio.gather(*writes, return_exceptions=True)  # their errors are read, not left to asyncio
            raise failed
        await asyncio.gather(*writes)  # a closed socket fails them all; each error is read
        return sent

    setattr(send, _MARK, True)
    send.__doc__ = original.__doc__
    Message.send = send
