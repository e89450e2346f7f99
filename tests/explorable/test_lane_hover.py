"""The lane hover's text, formatted in the browser (`lanes.HOVER_JS`) from the numbers `request_details` sends:
run in headless Chromium on real traces and compared with the text the hover must show, written out here."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine import Event, RunConfig, simulate
from explorable.views.lanes import HOVER_JS, MAX_LISTED_TIMES, request_details
from tests.explorable import served_app

pytestmark = pytest.mark.browser
pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")


def _ms(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1e3:,.0f} ms" if seconds >= 0.1 else f"{seconds * 1e3:.1f} ms"


def _times(ts: list[float]) -> str:
    if len(ts) > MAX_LISTED_TIMES:
        return ", ".join(f"{t:.2f}" for t in ts[:MAX_LISTED_TIMES - 1]) + f", ..., {ts[-1]:.2f} s"
    return ", ".join(f"{t:.2f}" for t in ts) + " s"


def expected(trace, r: int) -> str:
    """What the hover says about request r, from the trace."""
    mine = trace.events[trace.event_request == r]
    at = lambda kinds: [float(trace.pass_start[p]) for p in sorted(mine[np.isin(mine[:, 2], kinds), 0])]  # noqa: E731
    admitted, evicted = at((Event.ADMIT, Event.RESUME)), at((Event.PREEMPT,))
    t = trace.timing()
    w = trace.workload
    text = (f"request {r}: {w.prompt_len[r]:,} prompt / {w.output_len[r]:,} output tokens\n"
            f"arrived at {t.arrival[r]:.2f} s; TTFT {_ms(t.ttft[r])}, TPOT {_ms(t.tpot[r])}, "
            f"worst ITL {_ms(t.worst_itl[r])}\nadmitted at {_times(admitted)}\npreempted at "
            + (f"{_times(evicted)} ({len(evicted)} time{'s' if len(evicted) > 1 else ''})" if evicted else "never"))
    cached = [(int(trace.event_cached[(trace.event_request == r) & (trace.event_kind == kind)].sum()), when)
              for kind, when in ((Event.ADMIT, "at admission"), (Event.RESUME, "on readmission"))]
    parts = [f"{k:,} tokens {when}" for k, when in cached if k > 0]
    return text + ("\nfrom cache: " + ", ".join(parts) if parts else "")


@pytest.fixture(scope="module")
def page(request):
    served_app.skip_without_chromium()
    # The run's one Chromium (tests/explorable/conftest.py): a second Playwright driver cannot start while it is open.
    context, page, _ = served_app.new_page(request.getfixturevalue("browser"), 800)
    yield page
    context.close()


@pytest.mark.parametrize("cfg", [
    RunConfig(),  # evictions and readmissions
    RunConfig(max_num_seqs=64, pool_gib=1.0, spread=32.0, max_num_batched_tokens=1024),  # evicted dozens of times
    RunConfig(pool_gib=2.0, enable_prefix_caching=True, system_prompt_len=1024),  # cache at (re)admission
    RunConfig(arrival="rate", request_rate=2.0, max_num_seqs=8),  # arrivals spread out; TPOT under 0.1 s
], ids=["default", "evicted-often", "cached", "traffic"])
def test_the_hover_says_what_happened_to_every_request(page, cfg):
    trace = simulate(cfg)
    details = request_details(trace)
    rows = {k: v.tolist() for k, v in details["rows"].items()}
    got = page.evaluate("""([rows, t, code]) => {
        const hover = new Function('rows', 'times', 'value', code);
        return rows.prompt.map((_, r) => hover({data: rows}, {data: {t: Int32Array.from(t)}}, r));
    }""", [rows, details["times"]["t"].tolist(), HOVER_JS])
    want = [expected(trace, r) for r in range(trace.workload.num_requests)]
    assert got == want
