"""What one update sends: every reachable state's PATCH-DOC stays at a few hundred kB (issue 15).

The page is built in a Bokeh document as a served session builds it; a change of the controls is made
as a slider release makes it, and the document events it caused are serialised as the PATCH-DOC
message Bokeh would send (JSON text plus binary buffers), the curves' follow-up included.
"""
from __future__ import annotations

import panel as pn
import pytest
from bokeh.document import Document
from bokeh.protocol import Protocol

from explorable.patches import inline_arrays
from explorable.views.curves import Curves
from explorable.page.layout import build_app
from explorable.state.time_grid import time_quantum

MAX_UPDATE_BYTES = 400_000

# The example (6.2 MB per release before the lanes sent their hover text once per request),
# the memory wall, and the corners of the sliders that make the longest, most evicting runs.
HEAVY = {
    "1 GiB, 64 slots, 32x spread, 1,024-token budget": dict(max_num_seqs=64, pool_gib=1.0, spread=32.0,
                                                            max_num_batched_tokens=1024),
    "1 GiB, 1,024 slots, 1x spread, 1,024-token budget": dict(max_num_seqs=1024, pool_gib=1.0, spread=1.0,
                                                              max_num_batched_tokens=1024),
    "memory wall": dict(pool_gib=2.0, max_num_seqs=512),
}


def patch_bytes(events) -> int:
    """The message as the served app sends it: small arrays inline (explorable.patches.inline_arrays), large ones as
    binary frames."""
    inline_arrays.install()  # what configure() does in a served process; idempotent
    message = Protocol().create("PATCH-DOC", events)
    return len(message.content_json.encode()) + sum(len(b.to_bytes()) for b in message.buffers)


@pytest.fixture
def page(monkeypatch):
    pending = []
    monkeypatch.setattr(Curves, "changed", lambda self, *_: pending.append(self.refresh))
    app = build_app(sync=False)
    doc = Document()
    doc.add_root(pn.panel(app).get_root(doc))
    events = []
    doc.on_change(events.append)

    def change(**settings) -> int:
        events.clear()
        app.state.param.update(**settings)
        while pending:
            pending.pop()()
        assert not app.state.run_error, app.state.run_error
        return patch_bytes(list(events))

    return app, change


@pytest.mark.parametrize("name", list(HEAVY))
def test_an_update_to_a_heavy_state_sends_a_few_hundred_kb(page, name):
    app, change = page
    size = change(**HEAVY[name])
    assert 10_000 < size <= MAX_UPDATE_BYTES, f"{name}: {size:,} bytes"
    # The thinned lanes still show every request and the whole run.
    lanes = app.views["lanes"].source.data
    assert len(set(lanes["y"].tolist())) == app.state.trace.workload.num_requests
    end = app.state.trace.makespan_s  # to the time grid the lanes keep (about 1/65,536 of the run)
    assert float(lanes["right"].max()) == pytest.approx(end, abs=time_quantum(end) / 2)


def test_the_default_update_is_small(page):
    _, change = page
    change(max_num_seqs=64)
    assert change(max_num_seqs=256) <= 100_000
