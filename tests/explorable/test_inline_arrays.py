"""An update's small arrays go inside its PATCH-DOC message (base64, one websocket frame); a large one still
goes as a binary frame of its own (explorable.patches.inline_arrays)."""
from __future__ import annotations

import base64
import gzip

import numpy as np
from bokeh.document import Document
from bokeh.document.events import ColumnDataChangedEvent
from bokeh.models import ColumnDataSource
from bokeh.protocol import Protocol

from explorable.patches import inline_arrays


def _patch_buffers(**columns) -> tuple[list, dict]:
    doc = Document()
    source = ColumnDataSource(data={name: values[:1] for name, values in columns.items()})
    doc.add_root(source)
    source.data = columns
    event = ColumnDataChangedEvent(doc, source, "data")
    msg = Protocol().create("PATCH-DOC", [event])
    return msg.buffers, msg.content


def test_small_arrays_travel_inside_the_message_and_large_ones_as_frames(monkeypatch):
    from bokeh.core import serialization

    monkeypatch.setattr(serialization.Serializer, "_encode_bytes", serialization.Serializer._encode_bytes)
    inline_arrays.install()
    installed = serialization.Serializer._encode_bytes
    inline_arrays.install()  # twice is once
    assert serialization.Serializer._encode_bytes is installed
    small = np.arange(256, dtype=np.float64)  # a lane column: 2 kB
    large = np.arange(inline_arrays.LIMIT // 8 + 1, dtype=np.float64)  # over the limit
    buffers, content = _patch_buffers(left=small)
    assert buffers == []
    data = content["events"][0]["data"]["entries"][0][1]
    assert data["dtype"] == "float64" and data["shape"] == [256]
    # gzip in base64, as BokehJS decodes it (base64_to_buffer gunzips), holding the array's bytes
    assert gzip.decompress(base64.b64decode(data["array"]["data"])) == small.tobytes()
    buffers, _ = _patch_buffers(left=np.resize(small, large.shape), right=large)
    assert len(buffers) == 2 and all(b.data.nbytes == large.nbytes for b in buffers)
    at_limit = np.arange(inline_arrays.LIMIT // 8, dtype=np.float64)  # exactly 64 KiB: still inline
    assert _patch_buffers(left=at_limit)[0] == []
