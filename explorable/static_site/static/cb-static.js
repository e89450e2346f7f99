// The static explorable's only script: when the reader changes a control, fetch that state's file (made by
// `python -m explorable.export` from the served app's own views) and apply it to the page's Bokeh models as
// one patch, exactly the properties the server would have sent. It runs no engine: it picks files (the nearest
// held one for a setting the build does not hold) and computes only what the served app computes from a run's
// figures, the SLO targets' goodput and lines, from each request's TTFT and TPOT in the file.
(() => {
  "use strict";
  const C = window.CB_STATIC_CONFIG;
  const files = new Map();  // file name -> Promise of its JSON
  let doc = null;
  let values = null;  // the current held controls, as URL text (C.keyed)
  let slo = null;  // the SLO targets (ms), any value: {slo_ttft_ms, slo_tpot_ms}
  let shown = null;  // the file on screen
  let shownKey = null;  // the setting it shows (the served app's run: one per setting)
  // The traffic readouts: the summary their deltas compare with, and the goodput on screen before (which setting,
  // what value), as the served app's Readouts keeps them.
  let trafficBefore = null, lastGood = null;
  // The guides: per guide, the step whose text is shown and whether the reader followed one; whether the page opened
  // from a link to settings of no step; the guide whose tab is shown.
  const G = C.guides;
  const guideState = G.map(() => ({chosen: 0, followed: false}));
  let linked = false, tab = 0;
  let applying = false;  // our own slider and toggle changes must not count as the reader's (see also stop())
  let latest = 0;  // a later action wins over an earlier one still fetching
  const projector = new URLSearchParams(location.search).get("projector");

  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#x27;");  // Python's html.escape, as Panel's HTML pane sends text
  // A state's key in the manifest: the grid's controls, then each other held control that is not at its start.
  const keyOf = (v) => C.grid.map((n) => v[n]).join("&")
    + C.extra.filter((n) => v[n] !== C.defaults[n]).map((n) => `&${n}=${v[n]}`).join("");
  const load = (file) => {
    if (!files.has(file)) {
      files.set(file, fetch(`data/${file}.json`).then((r) => {
        if (!r.ok) throw new Error(`data/${file}.json: ${r.status}`);
        return r.json();
      }).then(unpack));
    }
    return files.get(file);
  };

  async function gunzip(b64) {
    const packed = Uint8Array.from(atob(b64), (ch) => ch.charCodeAt(0));
    const stream = new Blob([packed]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  // Byte planes (every item's first byte, then every second, ...) back to items of `width` bytes.
  function unplane(planes, width) {
    const n = planes.length / width, bytes = new Uint8Array(planes.length);
    for (let b = 0; b < width; b++) for (let i = 0; i < n; i++) bytes[i * width + b] = planes[b * n + i];
    return bytes;
  }

  // The export stores each array once, its bytes in planes, gzipped: back to bytes Bokeh takes as a buffer.
  async function unpack(data) {
    const buffers = await Promise.all((data.arrays || []).map(decode));
    const ref = (i) => `cb-array-${i}`;
    const walk = (v) => {
      if (Array.isArray(v)) return v.map(walk);
      if (v && typeof v === "object") {
        if (v.type === "cb-array") {
          const a = v.s === undefined ? data.arrays[v.i] : C.shared[v.s];
          const array = {type: "bytes", data: {id: v.s === undefined ? ref(v.i) : `cb-shared-${v.s}`}};
          return {type: "ndarray", array, shape: a.shape, dtype: a.dtype, order: a.order};
        }
        return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
      }
      return v;
    };
    data.patch = walk(data.patch);
    // The shared ones copied: each patch gets buffers of its own, as one from the server would.
    const common = (await sharedBuffers()).map(([id, b]) => [id, b.slice(0)]);
    data.buffers = new Map([...buffers.map((b, i) => [ref(i), b]), ...common]);
    return data;
  }

  // Arrays many files share (the workload's prompt and output lengths): in the page, decoded once.
  let shared = null;
  const sharedBuffers = () => {
    shared = shared || Promise.all((C.shared || []).map(decode))
      .then((bs) => bs.map((b, i) => [`cb-shared-${i}`, b]));
    return shared;
  };

  async function decode(a) {
    if (a.values) {  // the distinct items once, and each item's index among them
      const values = await gunzip(a.values);
      const planes = unplane(await gunzip(a.data), a.index);
      const index = a.index === 1 ? planes : new Uint16Array(planes.buffer);
      const bytes = new Uint8Array(index.length * a.width);
      for (let i = 0; i < index.length; i++) {
        bytes.set(values.subarray(index[i] * a.width, (index[i] + 1) * a.width), i * a.width);
      }
      return bytes.buffer;
    }
    if (a.grid !== undefined) {  // floats on the grid of 2**grid: the differences of their multiples
      const planes = unplane(await gunzip(a.data), a.steps);
      const steps = new {1: Int8Array, 2: Int16Array, 4: Int32Array}[a.steps](planes.buffer);
      const out = new {4: Float32Array, 8: Float64Array}[a.width](steps.length);
      const quantum = 2 ** a.grid;
      let k = 0;  // a double holds every multiple exactly, and k * 2**grid is the stored float, bit for bit
      for (let i = 0; i < steps.length; i++) { k += steps[i]; out[i] = k * quantum; }
      return out.buffer;
    }
    const bytes = unplane(await gunzip(a.data), a.width);
    if (a.delta) {  // running sum of the items' bits, as integers of their width (wrapping, as numpy's diff did)
      const items = new {1: Int8Array, 2: Int16Array, 4: Int32Array}[a.width](bytes.buffer);
      for (let i = 1; i < items.length; i++) items[i] += items[i - 1];
    }
    return bytes.buffer;
  }

  // Once the browser has nothing else to do (where it cannot say, in a moment).
  const whenIdle = (f, options) => (window.requestIdleCallback ? requestIdleCallback(f, options) : setTimeout(f, 200));
  const fresh = (value) => JSON.parse(JSON.stringify(value));  // one object per event: Bokeh may keep what it decodes

  // -- Python's number formats, exactly (explorable.views.readouts formats with them) ------------------------
  // format(x, f",.{d}f") / f".{d}f": both round the exact binary value; at an exact tie toFixed rounds up and
  // Python to even. A tie is told exactly from the value's decimal expansion (a double that is not a tie differs
  // from one well within 25 more digits), not from x * 10 ** d, which itself rounds (0.15 * 10 is 1.5).
  function fixed(x, d, comma) {
    let s = x.toFixed(d);
    const longer = x.toFixed(d + 25);
    if (x >= 0 && /^50*$/.test(longer.slice(longer.length - 25))) {  // an exact tie: to the even neighbour
      const k = BigInt(longer.slice(0, longer.length - 25).replace(".", ""));
      const digits = String(k % 2n === 0n ? k : k + 1n).padStart(d + 1, "0");
      s = d ? `${digits.slice(0, -d)}.${digits.slice(-d)}` : digits;
    }
    if (!comma) return s;
    const [whole, frac] = s.split(".");
    const sign = whole.startsWith("-") ? "-" : "";
    const grouped = whole.replace("-", "").replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return sign + grouped + (frac !== undefined ? `.${frac}` : "");
  }
  // format(x, ".6g")
  function g6(x) {
    if (x === 0) return "0";
    if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
    const [m, e] = x.toExponential(5).split("e");
    const exp = Number(e);
    const strip = (t) => (t.includes(".") ? t.replace(/0+$/, "").replace(/\.$/, "") : t);
    if (exp < -4 || exp >= 6) return `${strip(m)}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
    return strip(x.toFixed(5 - exp));
  }

  // -- the traffic readouts, at any SLO target (explorable.views.readouts: traffic_readouts, render) --------------
  const ms = (v) => (v >= 100 ? `${fixed(v, 0, true)} ms` : `${fixed(v, 1, false)} ms`);
  // A readout's change against the one before, as explorable.views.readouts._delta says it (C.changes: its
  // CHANGES, [decimals, comma, unit, higher is better or null, the summary's scale]).
  function delta(key, now, before) {
    if (before === null || before === undefined) return ["", ""];
    const [d, comma, unit, higherIsBetter] = C.changes[key];
    const number = (x) => fixed(x, d, comma);
    const change = now - before;
    if (Math.abs(change) < 1e-9 || number(Math.abs(change)) === number(0)) return ["no change", "same"];
    const text = `${change > 0 ? "+" : "\u2212"}${number(Math.abs(change))}${unit}`;
    if (higherIsBetter === null) return [text, ""];
    return [text, (change > 0) === higherIsBetter ? "better" : "worse"];
  }
  // Requests that met both targets per second of the run (engine.latency.good_requests: value <= target; a
  // request with no TPOT, one token, counts 0).
  function goodput(t, ttft, tpot) {
    let good = 0;
    for (let i = 0; i < t.done.length; i++) {
      if (t.done[i] && t.ttft[i] !== null && t.ttft[i] * 1000.0 <= ttft && (t.tpot[i] ?? 0) * 1000.0 <= tpot) good++;
    }
    return good / t.makespan;
  }
  function trafficHtml(summary, previous, good, goodBefore) {
    const cards = [];
    const card = (key, label, value, text, beside, [d, verdict]) => cards.push(
      `<div class="readout" data-readout="${key}"><div class="readout-label">${esc(label)}</div>`
      + `<div class="readout-main"><span class="readout-value" data-value="${g6(value)}">${text}</span>`
      + `<span class="readout-beside">${esc(beside)}</span></div>`
      + `<div class="readout-delta ${verdict}">${esc(d) || "&nbsp;"}</div></div>`);
    const f2 = (x) => fixed(x, 2, true);
    for (const [key, label] of C.trafficRows) {
      if (key === "goodput_req_s") continue;
      const value = summary[key], target = key.startsWith("ttft") ? slo.slo_ttft_ms : slo.slo_tpot_ms;
      const beside = `target ${fixed(target, 0, true)} ms${value > target ? ", missed" : ""}`;
      card(key, label, value, ms(value), beside, delta(key, value, previous ? previous[key] : null));
    }
    const served = summary.request_throughput;
    const share = served ? good / served : 0.0;
    const [key, label] = C.trafficRows.find(([k]) => k === "goodput_req_s");
    card(key, label, good, f2(good), `${fixed(100 * share, 0, false)}% of ${f2(served)} req/s served`,
      delta(key, good, goodBefore));
    return `<div class="readouts">${cards.join("")}</div>`;
  }

  let wordsBase = null;  // the request-rate curves in words, as drawn at the starting SLO targets
  // The traffic views' patch for the state on screen at the current SLO targets; `fresh`: a new state (its
  // goodput and deltas against the one before), else the same state with other targets.
  function trafficPatch(data, key, isNew) {
    const t = data && data.traffic;
    if (!t || !C.ids["readouts.traffic"]) return {};
    const good = goodput(t, slo.slo_ttft_ms, slo.slo_tpot_ms);
    if (isNew) trafficBefore = shown && shown.summary && "ttft_ms_p50" in shown.summary ? shown.summary : null;
    const goodBefore = lastGood && lastGood.key !== key ? lastGood.good : null;
    lastGood = {key, good};
    const patch = {"readouts.traffic": {text: esc(trafficHtml(data.summary, trafficBefore, good, goodBefore))}};
    if (C.ids["traffic.ttft_slo"]) {
      patch["traffic.ttft_slo"] = {location: slo.slo_ttft_ms};
      patch["traffic.tpot_slo"] = {location: slo.slo_tpot_ms};
      if (t.lat) {
        const lo = Math.min(t.lat[0], slo.slo_ttft_ms, slo.slo_tpot_ms);
        const hi = Math.max(t.lat[1], slo.slo_ttft_ms, slo.slo_tpot_ms);
        patch["traffic.latency_range"] = {start: lo / 1.6, end: hi * 1.6};
      }
      if (data.patch["traffic.words"]) wordsBase = data.patch["traffic.words"].text;
      if (wordsBase) {
        const targets = [slo.slo_ttft_ms, slo.slo_tpot_ms];
        let i = 0;
        const text = wordsBase.replace(/\(target [\d,]+ ms\)/g, (m) => (i < 2 ? `(target ${fixed(targets[i++], 0, true)} ms)` : m));
        patch["traffic.words"] = {text};
      }
    }
    return patch;
  }

  // -- held states and the nearest one to a setting ---------------------------------------------------------
  let held = null;  // [key, values] of every state this page holds
  const heldStates = () => {
    if (!held) {
      held = Object.keys(C.states).map((key) => {
        const parts = key.split("&");
        const v = {...Object.fromEntries(C.keyed.map((n) => [n, C.defaults[n]]))};
        C.grid.forEach((n, i) => { v[n] = parts[i]; });
        for (const p of parts.slice(C.grid.length)) { const i = p.indexOf("="); v[p.slice(0, i)] = p.slice(i + 1); }
        return [key, v];
      });
    }
    return held;
  };
  // How far apart two values of a control are: numbers on a log scale (their stops double), a choice 1.
  function apart(name, a, b) {
    if (a === b) return 0;
    if (!(name in C.numbers)) return 1;
    const x = Number(a), y = Number(b);
    if (x === y) return 0;
    return Math.abs(Math.log(Math.min(x, y) > 0 ? x / y : (x + 1) / (y + 1)));
  }
  // The held state nearest `want`: where `moved` (the control the reader moved) is given, one with its value first,
  // then the fewest other controls changed, then the moved control's nearest value, then the least change of the
  // others (numbers on a log scale). Ties go to the first in the manifest. A link moves nothing: fewest controls
  // changed, then the least change.
  function nearestHeld(want, moved, keep) {
    let best = null, score = null;
    for (const [, v] of heldStates()) {
      let count = 0, rest = 0;
      for (const n of C.keyed) {
        if (n === moved) continue;
        const d = apart(n, v[n], want[n]);
        if (d) { count++; rest += d; }
      }
      const dm = moved ? apart(moved, v[moved], want[moved]) : 0;
      const s = [keep && dm ? 1 : 0, count, dm, rest];
      if (!score || s.some((x, i) => x !== score[i] && s.slice(0, i).every((y, j) => y === score[j]) && x < score[i])) {
        best = v; score = s;
      }
    }
    return {...best};
  }
  // A value as the reader reads it: a switch on or off, a number without the URL's ".0".
  const shownAs = (name, text) => (C.bools.includes(name) ? (text === "true" ? "on" : "off")
    : name in C.numbers && Number.isFinite(Number(text)) ? String(Number(text)) : text);
  // What changed from `want` to the held state `got`, one line per control (the moved control's own snap is the
  // slider's, as between the grid's stops).
  function changes(want, got, moved) {
    return C.keyed.filter((n) => n !== moved && apart(n, want[n], got[n]))
      .map((n) => `${C.labels[n]} ${shownAs(n, want[n])} is not held here`
        + `${moved ? ` with ${C.labels[moved]} ${shownAs(moved, got[moved])}` : ""}: showing ${shownAs(n, got[n])} (${n}).`);
  }

  // BokehJS applies a new `styles` by setting the properties it names and removing only those given as
  // null, so a property the old value had and the new one lacks would stay on the element: name it as null.
  function clearing(id, value) {
    const old = doc.get_model_by_id(id)?.styles;
    const keys = old instanceof Map ? [...old.keys()] : Object.keys(old || {});
    const entries = [...(value.entries || [])];
    for (const k of keys) if (!entries.some(([n]) => n === k)) entries.push([k, null]);
    return {type: "map", entries};
  }

  function events(patch, out) {
    for (const [name, props] of Object.entries(patch)) {
      const id = C.ids[name];
      if (!id) continue;
      for (const [attr, value] of Object.entries(props)) {
        out.push({kind: "ModelChanged", model: {id}, attr, new: attr === "styles" ? clearing(id, value) : value});
      }
    }
    return out;
  }

  // The readouts pane with each figure's change against the state shown before, from the two summaries, as the
  // served app's Readouts says it against the run before (the export leaves the change cells blank).
  function readoutsText(text, data) {
    if (!shown || !shown.summary || !data.summary) return text;
    const keys = [...text.matchAll(/data-readout=&quot;(\w+)&quot;/g)].map((m) => m[1]);
    const parts = text.split(C.blankCell);
    if (parts.length !== keys.length + 1 || !keys.every((k) => k in C.changes)) return text;
    const cells = keys.map((key) => {
      const scale = C.changes[key][4], before = shown.summary[key];
      const [d, verdict] = delta(key, (data.summary[key] ?? 0) * scale, before == null ? null : before * scale);
      return esc(`<div class="readout-delta ${verdict}">${esc(d) || "&nbsp;"}</div>`);
    });
    return parts.map((p, i) => p + (cells[i] ?? "")).join("");
  }

  // A setting that cannot run leaves the last run's figures on screen, greyed, as the served app's Readouts does.
  function stale() {
    const patch = {};
    for (const [name, cls] of [["readouts", "readouts"], ["readouts.traffic", "readouts"], ["results_bar", "results"]]) {
      const m = C.ids[name] && doc.get_model_by_id(C.ids[name]);
      if (m && m.text) patch[name] = {text: m.text.replace(`class=&quot;${cls}&quot;`, `class=&quot;${cls} stale&quot;`)};
    }
    return patch;
  }

  // The request-rate figures are not in the shell: about a fifth of its models, and the page opens at a state
  // that hides them. C.trafficViews is the patch that adds them (the served page, too, builds them when traffic
  // first arrives); it is applied once the page is idle after its first state, or first in the first patch that
  // names one of them (C.trafficIds), whichever comes first.
  const trafficIds = new Set(C.trafficIds || []);
  let trafficViews = C.trafficViews || null;
  function apply(out, buffers) {
    if (trafficViews && out.some((e) => trafficIds.has(e.model.id))) {
      out.unshift(trafficViews);
      trafficViews = null;
    }
    applying = true;
    try {
      doc.apply_json_patch({events: out}, buffers);
    } finally {
      applying = false;
    }
  }
  function buildTrafficViews() {
    if (!trafficViews) return;
    const views = trafficViews;
    trafficViews = null;
    apply([views], new Map());
  }

  // Apply a patch of the page's own controls and panes (no arrays): {name: {property: value}}.
  const patchUi = (patch) => {
    apply(events(patch, []), new Map());
  };

  // Each control's quick stops light the current value's button, none between stops.
  function stopLights(v) {
    const patch = {};
    for (const [control, stops] of Object.entries(C.buttonStops)) {
      const i = stops.findIndex((s) => Number(s) === Number(v[control]));
      if (C.ids[`stops.${control}`]) patch[`stops.${control}`] = {active: i >= 0 ? i : null};
    }
    return patch;
  }

  const position = (name, x) => (C.logScale.includes(name) ? Math.log2(x) : x);

  // The guides as the served app's Guide and GuideTabs views leave them for these settings.
  function guides(v) {
    const key = keyOf(v), patch = {};
    if (linked && key === keyOf(startValues())) linked = false;  // back at the starting point
    const at = G.map((g) => g.steps.indexOf(key));
    G.forEach((g, i) => {
      const st = guideState[i];
      if (at[i] >= 0) st.chosen = at[i];
      st.followed = st.followed || at[i] >= 0;
      const kind = at[i] >= 0 ? "match" : st.followed ? "drifted" : linked ? "link" : "plain";
      Object.assign(patch, fresh(C.guide[g.key][st.chosen][kind]));
    });
    if (at[tab] < 0) { const first = at.findIndex((m) => m >= 0); if (first >= 0) tab = first; }
    if (C.ids["guides.tabs"]) patch["guides.tabs"] = {active: tab};
    G.forEach((_, i) => { patch[`guides.panel.${i}`] = {visible: i === tab}; });
    return patch;
  }

  function widgets(v) {
    const patch = {};
    for (const name of C.keyed) {
      if (!C.ids[`ctl.${name}`]) continue;
      if (name in C.choices) patch[`ctl.${name}`] = {active: C.choices[name].indexOf(v[name])};
      else if (C.bools.includes(name)) patch[`ctl.${name}`] = {active: v[name] === "true"};
      else {
        const x = position(name, Number(v[name]));
        patch[`ctl.${name}`] = {value: x, value_throttled: x};
      }
    }
    for (const name of C.slo) patch[`ctl.${name}`] = {value: slo[name], value_throttled: slo[name]};
    Object.assign(patch, stopLights(v));
    Object.assign(patch, fresh(C.controls[v.allocation] || {}));
    Object.assign(patch, guides(v));
    return patch;
  }

  // The served app's query for these settings (every control, then the projector flag if the link had one).
  function queryOf(v) {
    const q = new URLSearchParams();
    for (const name of C.order) {
      const x = name in v ? v[name] : name in (slo || {}) ? sloText(name) : C.defaults[name];
      q.set(name, x);
    }
    if (projector !== null) q.set("projector", projector);
    return `?${q.toString()}`;
  }
  // An SLO target as the served app writes it (a float: 1000.0, 37.5).
  const sloText = (name) => (Number.isInteger(slo[name]) ? `${slo[name]}.0` : String(slo[name]));

  const writeUrl = (v) => history.replaceState(history.state, "", `${queryOf(v)}${location.hash}`);

  // The share link (the served app's text, built by the same Python): this page's address with these settings.
  // Its href is escaped once as an attribute and once more as the HTML pane's text, as Panel sends it.
  const shareLink = (v) => ({share: {
    text: C.shareText.split(C.shareHref).join(esc(esc(`${location.pathname}${queryOf(v)}`))), visible: true}});

  // `drawn`: the page already shows this state's data (the shell, opened at its own state): only the controls,
  // the guide and the share link change, and the views are not drawn a second time.
  async function go(v, drawn = false) {
    const file = C.states[keyOf(v)];
    if (!file) return;
    const mine = ++latest;
    let data;
    try {
      data = await load(file);
    } catch (err) {
      console.error(err);
      // The clicked stop or step is lit already (BokehJS lights it on the click): light the state on screen.
      if (mine === latest && values) patchUi(widgets(values));
      return;
    }
    if (mine !== latest) return;
    const patch = drawn ? {} : {...data.patch};
    if (patch.readouts) patch.readouts = {...patch.readouts, text: readoutsText(patch.readouts.text, data)};
    if (!data.summary) Object.assign(patch, stale());
    const out = events(patch, []);
    if (data.summary) events(trafficPatch(data, keyOf(v), true), out);
    events(widgets(v), out);
    events(shareLink(v), out);
    apply(out, data.buffers);
    values = {...v};
    if (data.summary) { shown = data; shownKey = keyOf(v); }
    writeUrl(values);
    prefetch();
  }

  // While the reader reads, fetch the steps either side of each guide's current one: a walk through a guide then
  // finds its next state's file in hand.
  let prefetching = 0;
  function prefetch() {
    const mine = ++prefetching;
    whenIdle(() => {
      if (mine !== prefetching) return;
      G.forEach((g, i) => {
        for (const j of [guideState[i].chosen + 1, guideState[i].chosen - 1]) {
          const file = j >= 0 && j < g.steps.length && C.states[g.steps[j]];
          if (file) load(file).catch(() => files.delete(file));
        }
      });
    });
  }

  // A setting the reader asked for: itself where the page holds it, else the nearest it holds, with a notice
  // naming each other control that changed.
  function goNear(want, moved) {
    if (C.states[keyOf(want)]) return go(want);
    const got = nearestHeld(want, moved, true);
    notices(changes(want, got, moved));
    if (keyOf(got) === keyOf(values)) { patchUi(widgets(values)); return undefined; }  // the slider snaps back
    return go(got);
  }

  function notices(lines) {
    if (!lines.length) return;
    const items = lines.map((t) => `<li>${esc(t)}</li>`).join("");
    const text = esc(`<div class="notice" data-notice="link"><ul>${items}</ul></div>`);
    patchUi({"notices.text": {text}, "notices.box": {visible: true}});
  }

  const startValues = () => Object.fromEntries(C.keyed.map((n) => [n, C.defaults[n]]));

  // The link's settings: a bad value goes to the default; a setting the page does not hold to the nearest it
  // holds; each said.
  function fromLink() {
    const q = new URLSearchParams(location.search);
    const v = startValues(), lines = [];
    for (const name of C.keyed) {
      const def = C.defaults[name];
      if (!q.has(name)) continue;
      const raw = q.get(name).trim();
      if (name in C.choices || C.bools.includes(name)) {
        const options = C.choices[name] || ["false", "true"];
        const hit = options.find((c) => c.toLowerCase() === raw.toLowerCase());
        if (hit) v[name] = hit;
        else {
          lines.push(`The link set ${name} to '${raw.slice(0, 40)}', which is not one of `
            + `${options.join(", ")}; using the default, ${def}.`);
        }
        continue;
      }
      const x = Number(raw);
      if (raw === "" || !Number.isFinite(x) || x < 0 || (x === 0 && Number(def) !== 0 && Math.min(...C.numbers[name]) > 0)) {
        lines.push(`The link set ${name} to '${raw.slice(0, 40)}', which is not a positive number; `
          + `using the default, ${def}.`);
        continue;
      }
      // As this page writes it, where it is one of its values (16 and 16.0 are one pool).
      const i = C.numbers[name].findIndex((n) => n === x);
      v[name] = i >= 0 ? C.stops[name][i] : raw.slice(0, 40);
    }
    for (const name of C.slo) {
      if (!q.has(name)) continue;
      const raw = q.get(name).trim(), x = Number(raw), [lo, hi] = C.sloBounds[name];
      if (raw !== "" && Number.isFinite(x) && x >= lo && x <= hi) slo[name] = x;
      else {
        lines.push(`The link set ${name} to '${raw.slice(0, 40)}', which is not a number from ${lo} to ${hi}; `
          + `using the default, ${C.defaults[name]}.`);
      }
    }
    for (const name of C.order) {
      if (C.keyed.includes(name) || C.slo.includes(name) || !q.has(name)) continue;
      const raw = q.get(name).trim();
      if (raw.toLowerCase() !== C.defaults[name].toLowerCase() && Number(raw) !== Number(C.defaults[name])) {
        lines.push(`This page has only the starting value of ${C.labels[name]} (${C.defaults[name]}); the link's `
          + `'${raw.slice(0, 40)}' needs the served explorable. Using ${C.defaults[name]}.`);
      }
    }
    if (C.states[keyOf(v)]) return [v, lines];
    const got = nearestHeld(v, null, false);
    return [got, [...lines, ...changes(v, got, null)]];
  }

  const step = (g, i) => {
    guideState[g].chosen = i;
    guideState[g].followed = true;
    return go({...startValues(), ...G[g].values[i]});
  };
  const guideIndex = (key) => G.findIndex((g) => g.key === key);

  window.cbStatic = {
    fixed,  // (for the tests: Python's number formats, as the readouts use them)
    // A slider released, a radio button chosen or a box ticked (Bokeh's js_on_change on the widget).
    control(name, raw) {
      if (applying || !values) return;
      if (C.slo.includes(name)) {  // computed in the page, at any value
        if (Number(raw) === slo[name]) return;
        slo[name] = Number(raw);
        const key = shownKey && keyOf(values) === shownKey ? shownKey : null;
        if (key) patchUi(trafficPatch(shown, key, false));
        patchUi(shareLink(values));
        writeUrl(values);
        return;
      }
      const v = {...values};
      if (name in C.choices) v[name] = C.choices[name][raw];
      else if (C.bools.includes(name)) v[name] = raw ? "true" : "false";
      else {
        const x = C.logScale.includes(name) ? Number((2 ** Number(raw)).toPrecision(3)) : Number(raw);
        const i = C.numbers[name].findIndex((n) => n === x);
        v[name] = i >= 0 ? C.stops[name][i] : String(x);
      }
      // The widget echoing a value we set (or a release at the current stop) changes nothing, as in the
      // served app, where setting a parameter to its value sends nothing.
      if (keyOf(v) === keyOf(values) && v[name] === values[name]) return;
      if (name in C.numbers && !C.numbers[name].includes(Number(v[name]))) {
        // Between the values it holds, a slider snaps to the nearest one held with the other controls as they are.
        const got = nearestHeld(v, name, false);
        if (keyOf(got) === keyOf(values)) patchUi(widgets(values));
        else go(got);
        return;
      }
      goNear(v, name);
    },
    // A quick stop clicked (Bokeh's js_on_change on the stop group's active button). BokehJS runs these
    // callbacks after the change that caused them, so our own patches (lighting the current stop or step)
    // arrive here too, once `applying` is over: a choice of the settings on screen changes nothing.
    stop(control, i) {
      if (applying || !values || i === null || i === undefined) return;
      const x = Number(C.buttonStops[control][i]);
      const j = C.numbers[control].findIndex((n) => n === x);
      // A stop this build holds; one it does not snaps, as a slider between values does, to the nearest value
      // held with the other controls as they are (the value on screen, perhaps: its stop is lit again).
      const v = {...values, [control]: j >= 0 ? C.stops[control][j] : String(x)};
      const got = j >= 0 ? v : nearestHeld(v, control, false);
      if (keyOf(got) === keyOf(values)) {
        patchUi(stopLights(values));
        return undefined;
      }
      return j >= 0 ? goNear(v, control) : go(got);
    },
    // A guided step clicked (Bokeh's js_on_change on the guide's step group).
    chooseStep(guide, i) {
      if (applying || !values || i === null || i === undefined) return;
      const g = guideIndex(guide);
      if (G[g].steps[i] !== keyOf(values)) step(g, i);
    },
    // A guide's tab chosen (its panel is shown by the tab's own callback).
    tab(i) {
      if (applying || i === null || i === undefined) return;
      tab = i;
    },
    // Previous/next, reset, dismiss (Bokeh's js_on_event on the button).
    button(name) {
      if (!values) return;
      const [guide, which] = name.split(".");
      const g = guideIndex(guide);
      if (g >= 0 && which === "prev") { if (guideState[g].chosen > 0) step(g, guideState[g].chosen - 1); }
      else if (g >= 0 && which === "next") {
        if (guideState[g].chosen < G[g].steps.length - 1) step(g, guideState[g].chosen + 1);
      } else if (name === "reset") {
        for (const n of C.slo) slo[n] = Number(C.defaults[n]);
        go(startValues());
      } else if (name === "notices.dismiss") {
        patchUi({"notices.box": {visible: false}});
      }
    },
    values: () => ({...values}),
    slo: () => ({...slo}),
    ready: null,
  };

  window.cbStatic.ready = new Promise((resolve) => {
    const start = () => {
      const d = window.Bokeh && Bokeh.documents && Bokeh.documents[0];
      if (!d || !d.get_model_by_id(C.ids.readouts)) { setTimeout(start, 30); return; }
      doc = d;
      slo = Object.fromEntries(C.slo.map((n) => [n, Number(C.defaults[n])]));
      const [v, lines] = fromLink();
      const first = startValues();
      const key = keyOf(v);
      const at = G.map((g) => g.steps.indexOf(key));
      at.forEach((m, i) => { guideState[i].chosen = m >= 0 ? m : 0; guideState[i].followed = m >= 0; });
      linked = key !== keyOf(first) && at.every((m) => m < 0);
      tab = Math.max(0, at.findIndex((m) => m >= 0));
      values = first;
      notices(lines);
      // The page was drawn at the starting point; opened there, its file gives the deltas of the first change.
      // A link to another state opens without deltas, as the served app does.
      const opened = go(v, key === keyOf(first));
      opened.then(resolve, resolve);
      opened.then(() => whenIdle(buildTrafficViews, {timeout: 2000}));
    };
    start();
  });
})();
