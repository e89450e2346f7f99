"""Each chart's data as a table, on demand: a "The data as a table" disclosure under the lanes, the strips,
the throughput curves and the request-rate curves. Opened, the table is built in the browser from the very
columns the chart draws (its ColumnDataSources, found by name), and rebuilt while open when they change: no
server work and nothing sent for a table nobody opens, and the static build has its tables with no byte
more in its state files. Each chart's text alternative is explorable.views.in_words.

A table lists what the chart shows: the lanes one row per request (arrival, first admission, finish,
preemptions and the time they threw away, as drawn); the strips at most `STRIP_ROWS` stretches of time, each
with its largest batch and cache use (the strips keep every peak, and so does the table); the curves every
point, the reader's own setting marked.
"""
from __future__ import annotations

import json

import panel as pn

from explorable.views.assets import stylesheet
from explorable.views import palette

# The ColumnDataSources a table reads, by the `name` their view gives them.
SOURCES = {
    "lanes": ("cb-lanes-segments", "cb-lanes-details", "cb-lanes-times"),
    "strips": ("cb-strips-batch", "cb-strips-kv"),
    "curves": ("cb-curve-max_num_seqs", "cb-curve-max_num_seqs-point", "cb-curve-pool_gib", "cb-curve-pool_gib-point"),
    "traffic": ("cb-traffic",),
}
STRIP_ROWS = 40
CAPTIONS = {
    "lanes": "Every request: when it arrived, was first admitted and finished, how often it was preempted and how "
             "much running time that threw away (seconds)",
    "strips": "Batch size and KV cache use over time: the largest of each stretch",
    "curves": "Throughput (output tokens/s) at each setting along the curves, everything else as set",
    "traffic": "Requests served and p99 latencies at each offered request rate",
}


def table_toggle(kind: str) -> pn.pane.HTML:
    """The disclosure under chart `kind` (its table is filled in by the page's script when opened)."""
    return pn.pane.HTML(
        f'<details class="data-table" data-table="{kind}"><summary>The data as a table</summary>'
        f'<div class="table-slot" tabindex="0" role="region" aria-label="{CAPTIONS[kind]}"></div></details>',
        sizing_mode="stretch_width", stylesheets=[stylesheet()], margin=(0, 10, 4, 10), css_classes=["table-toggle"])


SCRIPT = """<script>
(() => {
  if (window.__cbTables) return;
  window.__cbTables = true;
  const SOURCES = %(sources)s, CAPTIONS = %(captions)s, STRIP_ROWS = %(strip_rows)d, LOST = %(lost)s;
  const fmt = (v, digits = 0) => v == null || !Number.isFinite(Number(v)) ? "-" :
    Number(v).toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;");
  const table = (caption, head, rows) => `<table><caption>${esc(caption)}</caption><thead><tr>` +
    head.map((h) => `<th scope="col">${esc(h)}</th>`).join("") + "</tr></thead><tbody>" +
    rows.map((r) => "<tr>" + r.map((c, i) => i ? `<td>${esc(c)}</td>` : `<th scope="row">${esc(c)}</th>`).join("") +
      "</tr>").join("") + "</tbody></table>";
  const BUILD = {
    lanes(d) {
      const seg = d["cb-lanes-segments"], req = d["cb-lanes-details"], t = d["cb-lanes-times"].t;
      const n = req.prompt.length, end = new Float64Array(n), lost = new Float64Array(n);
      for (let i = 0; i < seg.y.length; i++) {
        const r = seg.y[i];
        end[r] = Math.max(end[r], seg.right[i]);
        if (LOST.includes(seg.state[i])) lost[r] += seg.right[i] - seg.left[i];
      }
      const rows = [];
      for (let r = 0; r < n; r++) {
        rows.push([r, fmt(req.arrival[r] / 100, 2), req.admitted[r] ? fmt(t[req.first[r]] / 100, 2) : "-",
                   fmt(end[r], 2), req.preempted[r], fmt(lost[r], 2), fmt(req.prompt[r]), fmt(req.output[r])]);
      }
      return table(CAPTIONS.lanes, ["request", "arrived", "first admitted", "finished", "preempted (times)",
                                    "running time lost", "prompt tokens", "output tokens"], rows);
    },
    strips(d) {
      const b = d["cb-strips-batch"], k = d["cb-strips-kv"];
      const end = Math.max(b.x[b.x.length - 1] || 0, k.x[k.x.length - 1] || 0);
      const count = Math.max(1, Math.min(STRIP_ROWS, b.x.length));
      const most = (line, a, z) => {  // the largest value a step line holds anywhere in [a, z)
        let best = null;
        for (let i = 0; i < line.x.length; i++) {
          const from = line.x[i], to = i + 1 < line.x.length ? line.x[i + 1] : from;
          if (from < z && (to > a || (to === from && from >= a))) best = best === null ? line.y[i] : Math.max(best, line.y[i]);
        }
        return best;
      };
      const rows = [];
      for (let w = 0; w < count; w++) {
        const a = end * w / count, z = end * (w + 1) / count;
        const kv = most(k, a, z);
        rows.push([`${fmt(a, 1)} to ${fmt(z, 1)}`, fmt(most(b, a, z)), kv === null ? "-" : `${fmt(100 * kv, 1)}%%`]);
      }
      return table(CAPTIONS.strips, ["time (s)", "largest batch", "KV cache used"], rows);
    },
    curves(d) {
      const one = (name, label, unit) => {
        const line = d[`cb-curve-${name}`], here = d[`cb-curve-${name}-point`].x[0];
        return Array.from(line.x, (x, i) => [  // (a typed array's own map would make numbers of the rows)
          `${label} ${fmt(x, x %% 1 ? 1 : 0)}${unit}` + (x === here ? " (you are here)" : ""), fmt(line.y[i])]);
      };
      return table(CAPTIONS.curves, ["setting", "output tokens/s"],
                   [...one("max_num_seqs", "--max-num-seqs", ""), ...one("pool_gib", "pool", " GiB")]);
    },
    traffic(d) {
      const s = d["cb-traffic"];
      return table(CAPTIONS.traffic, ["offered (req/s)", "served (req/s)", "output tokens/s", "p99 TTFT (ms)",
                                      "p99 TPOT (ms)"],
                   Array.from(s.rate, (r, i) => [fmt(r, 2), fmt(s.served[i], 2), fmt(s.tok_s[i]), fmt(s.ttft[i]),
                                                 fmt(s.tpot[i], 1)]));
    },
  };
  const open = new Set();  // the disclosures open now
  const watched = new WeakSet();
  const fill = (details) => {
    const doc = window.Bokeh && Bokeh.documents && Bokeh.documents[0];
    const kind = details.dataset.table, slot = details.querySelector(".table-slot");
    if (!doc || !BUILD[kind] || !slot) return;
    const data = {};
    for (const name of SOURCES[kind]) {
      const model = doc.get_model_by_name(name);
      if (model == null) { slot.textContent = "This chart has no data yet."; return; }
      data[name] = Object.fromEntries(model.data instanceof Map ? model.data : Object.entries(model.data));
      if (!watched.has(model)) {  // rebuilt while open, when the chart's data changes
        watched.add(model);
        model.change.connect(() => { for (const d of [...open]) if (d.dataset.table === kind) fill(d); });
      }
    }
    try { slot.innerHTML = BUILD[kind](data); } catch (e) { slot.textContent = "This chart's data could not be read."; }
  };
  document.addEventListener("click", (event) => {
    const details = event.composedPath().find((el) => el.tagName === "DETAILS" && el.dataset && el.dataset.table);
    if (!details) return;
    // The click opens or closes the disclosure once it has been handled.
    setTimeout(() => {
      if (!details.isConnected) return;
      if (details.open) { open.add(details); fill(details); } else open.delete(details);
    }, 0);
  }, true);
})();
</script>"""


def tables_script() -> pn.pane.HTML:
    """An invisible pane whose script builds a chart's table when its disclosure is opened."""
    script = SCRIPT % {"sources": json.dumps(SOURCES), "captions": json.dumps(CAPTIONS).replace("</", "<\\/"),
                       "strip_rows": STRIP_ROWS, "lost": json.dumps([palette.LOST, palette.THRASH])}
    return pn.pane.HTML(script, margin=0, height=0, sizing_mode="stretch_width", css_classes=["data-tables"])
