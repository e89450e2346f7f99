"""An update's small arrays travel inside its one message instead of as binary frames of their own.

Bokeh sends every NumPy array of a change as a separate binary websocket frame after the PATCH-DOC message
(with a header frame each): a click on a stop sent 29 arrays, 59 frames, and the browser handled each frame
as a task of its own and put the message together from them. Most of them are small (the curves' points,
the lanes of 256 requests: 0.3-16 kB). Bokeh's own other encoding of an array, gzip in base64 inside the
message (what it uses for a standalone page), costs a third more bytes and lets the browser take the whole
update in one frame: 30-50 ms less of its work per click in headless Chromium on 2 cores (`benchmarks/browser_feel.py`).
Arrays over `LIMIT` (a thrashing run's tens of thousands of lane segments) still go as binary frames.

Written against Bokeh 3.9.2 (`Serializer._encode_bytes` and `Serializer._deferred`). Off: every array goes as a
binary frame, as Bokeh sends it.
"""
from __future__ import annotations

import base64
import gzip

from bokeh.core import serialization

LIMIT = 64 * 1024  # bytes; above this an array's binary frame is cheaper than a third more text to decode
MARK = "_explorable_inline"
TESTED = {"bokeh": ("3.9.0", "3.10")}  # from the first version tried to the first release line not tried
_PLAIN = serialization.Serializer._encode_bytes  # Bokeh's own


def active() -> bool:
    return getattr(serialization.Serializer._encode_bytes, MARK, False)


def uninstall() -> None:
    serialization.Serializer._encode_bytes = _PLAIN


def install() -> None:
    """Once per process: arrays up to LIMIT bytes are encoded inline (base64) in websocket messages too."""
    if active():
        return
    plain = _PLAIN

    def encode_bytes(self, obj):
        size = obj.nbytes if isinstance(obj, memoryview) else len(obj)
        if getattr(self, "_deferred", False) and size <= LIMIT:
            # BokehJS gunzips every base64 array; stored (level 0) gzip costs 10 us where Bokeh's level 9
            # spends 0.4 ms on 16 kB of floats that do not compress.
            packed = gzip.compress(obj.tobytes() if isinstance(obj, memoryview) else bytes(obj), mtime=1,
                                   compresslevel=0)
            return serialization.BytesRep(type="bytes", data=base64.b64encode(packed).decode("ascii"))
        return plain(self, obj)

    setattr(encode_bytes, MARK, True)
    serialization.Serializer._encode_bytes = encode_bytes
