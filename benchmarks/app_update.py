"""Server-side cost of one slider release in the explorable, without a browser.

For three starting states (the default, the memory wall at 2 GiB with 512 slots, static batching at 64
slots) it releases the --max-num-seqs slider at values not tried before and times:
  response  the run plus every view's data update that goes out at once (readouts, lanes, strips, log,
            guide) -- what the reader waits for after letting go;
  curves    the follow-up update of the throughput curves and the request-rate curve (scheduled just after
            the response when served; up to ~30 + 13 runs for settings nobody has tried);
  patch     serialising the resulting Bokeh PATCH-DOC message (what a served page sends), and its size.
Figures are medians and 95th percentiles over the releases.

The last line times what a class costs per page: releases to states whose runs, curves and views' data
another page has already computed (explorable.state.runs, explorable.state.view_data), so only the page's own work
remains -- the server time each of 60 pages releasing together waits for, one page after another.

The PATCH-DOC message is encoded as the served app encodes it (arrays up to 64 KiB inline,
explorable.patches.inline_arrays); --binary-arrays encodes it as Bokeh alone would (one binary buffer per array).

    python benchmarks/app_update.py [--releases 30] [--binary-arrays] [--only-class]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import panel as pn  # noqa: E402
import param  # noqa: E402
from bokeh.document import Document  # noqa: E402
from bokeh.protocol import Protocol  # noqa: E402

from explorable.patches import inline_arrays
from explorable.state import runs# noqa: E402
from explorable.views.curves import Curves  # noqa: E402
from explorable.page.layout import build_app  # noqa: E402
from explorable.views.traffic_curve import TrafficCurve  # noqa: E402

SCENARIOS = {
    "default (256 slots, 16 GiB)": ({}, 255),
    "memory wall (512 slots, 2 GiB)": ({"pool_gib": 2.0, "max_num_seqs": 512}, 511),
    "static batching (64 slots, per request, reserve)": (
        {"max_num_seqs": 64, "unit": "request", "allocation": "reserve"}, 63),
    # Issue 15's bandwidth example: a 1 GiB pool evicting requests dozens of times (6.2 MB per release once).
    "thrashing (1 GiB, 64 slots, 32x spread, 1,024 tokens)": (
        {"max_num_seqs": 64, "pool_gib": 1.0, "spread": 32.0, "max_num_batched_tokens": 1024}, 63),
    # Issue 12: traffic arriving at 8 req/s (every curve point is a run under traffic; the request-rate
    # curve's twelve runs join the follow-up).
    "traffic (8 req/s arriving, 256 slots)": ({"arrival": "rate", "request_rate": 8.0}, 255),
}


def pct(values, q):
    return float(np.percentile(np.asarray(values), q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=30)
    parser.add_argument("--binary-arrays", action="store_true", help="every array as a binary buffer (Bokeh's own)")
    parser.add_argument("--only-class", action="store_true", help="only the last line (states already computed)")
    args = parser.parse_args()
    if not args.binary_arrays:
        inline_arrays.install()

    runs.warm()
    pending = []
    Curves.changed = lambda self, *_: pending.append(self.refresh)  # time the follow-up separately
    TrafficCurve.changed = lambda self, *_: pending.append(self.refresh)

    print(f"{'scenario':<55} {'response ms':>17} {'curves ms':>17} {'patch ms':>15} {'patch kB':>9}")
    print(f"{'':<55} {'median':>8} {'p95':>8} {'median':>8} {'p95':>8} {'median':>7} {'p95':>7} {'median':>9}")
    for name, (settings, top) in ({} if args.only_class else SCENARIOS).items():
        app = build_app(sync=False)
        doc = Document()
        doc.add_root(pn.panel(app).get_root(doc))
        events = []
        doc.on_change(lambda event: events.append(event))
        slider = app.views["controls"].max_num_seqs
        app.state.param.update(**settings)
        for update in pending:
            update()
        pending.clear()
        response, curves, patch_ms, patch_kb = [], [], [], []
        for value in range(top, top - args.releases, -1):  # values nobody has tried: every run is computed
            events.clear()
            t0 = time.perf_counter()
            with param.edit_constant(slider):
                slider.value_throttled = value
            t1 = time.perf_counter()
            for update in pending:
                update()
            pending.clear()
            t2 = time.perf_counter()
            message = Protocol().create("PATCH-DOC", events) if events else None
            size = (len(message.content_json) + sum(len(b.to_bytes()) for b in message.buffers)) if message else 0
            t3 = time.perf_counter()
            assert app.state.trace.config.max_num_seqs == value and not app.state.run_error
            response.append(1e3 * (t1 - t0))
            curves.append(1e3 * (t2 - t1))
            patch_ms.append(1e3 * (t3 - t2))
            patch_kb.append(size / 1e3)
        print(f"{name:<55} {statistics.median(response):8.1f} {pct(response, 95):8.1f} "
              f"{statistics.median(curves):8.1f} {pct(curves, 95):8.1f} "
              f"{statistics.median(patch_ms):7.1f} {pct(patch_ms, 95):7.1f} {statistics.median(patch_kb):9.1f}")
    # A class: every run, sweep and view's data is already known; what is left is each page's own work.
    app = build_app(sync=False)
    doc = Document()
    doc.add_root(pn.panel(app).get_root(doc))
    events = []
    doc.on_change(lambda event: events.append(event))
    slider = app.views["controls"].max_num_seqs
    response, patch_ms, patch_kb = [], [], []
    for i in range(2 * args.releases + 4):
        events.clear()
        t0 = time.perf_counter()
        with param.edit_constant(slider):
            slider.value_throttled = (128, 64)[i % 2]
        for update in pending:
            update()
        pending.clear()
        t1 = time.perf_counter()
        message = Protocol().create("PATCH-DOC", events)
        size = len(message.content_json) + sum(len(b.to_bytes()) for b in message.buffers)
        t2 = time.perf_counter()
        frames = 1 + 2 * len(message.buffers)  # the message, then a header and a binary frame per buffer
        if i >= 4:  # the first releases compute what the others find cached
            response.append(1e3 * (t1 - t0))
            patch_ms.append(1e3 * (t2 - t1))
            patch_kb.append(size / 1e3)
    print(f"(a page's update goes out as {frames} websocket frame(s))")
    name = "class: states another page computed (64 <-> 128)"
    print(f"{name:<55} {statistics.median(response):8.1f} {pct(response, 95):8.1f} {'(in response)':>17} "
          f"{statistics.median(patch_ms):7.1f} {pct(patch_ms, 95):7.1f} {statistics.median(patch_kb):9.1f}")
    print(f"\n{args.releases} releases per scenario; budget: response under 100 ms for the default scenario.")


if __name__ == "__main__":
    main()
