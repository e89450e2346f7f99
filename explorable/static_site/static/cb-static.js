// The static explorable's only script: when the reader changes a control, fetch that state's file (made by
// `python -m explorable.export` from the served app's own views) and apply it to the page's Bokeh models as
// one patch, exactly the properties the server would have sent. It computes no outcome; it picks files.
(() => {
  "use strict";
  const C = window.CB_STATIC_CONFIG;
  const files = new Map();  // file name -> Promise of its JSON
  let doc = null;
  let values = null;  // current grid controls, as URL text
  let shown = null;  // the file on screen
  let chosen = 0, followed = false;  // the guide: the step whose text is shown; whether the reader followed one
  let applying = false;  // our own slider and toggle changes must not count as the reader's (see also stop())
  let latest = 0;  // a later action wins over an earlier one still fetching
  const projector = new URLSearchParams(location.search).get("projector");

  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#x27;");  // Python's html.escape, as Panel's HTML pane sends text
  const keyOf = (v) => C.grid.map((n) => v[n]).join("&");
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

  const fresh = (value) => JSON.parse(JSON.stringify(value));  // one object per event: Bokeh may keep what it decodes

  // The nearest stop of a numeric control (on a log scale: the stops double), as URL text.
  function nearest(name, x) {
    const nums = C.numbers[name];
    let best = 0;
    nums.forEach((v, i) => { if (Math.abs(Math.log(v / x)) < Math.abs(Math.log(nums[best] / x))) best = i; });
    return C.stops[name][best];
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
      for (const [attr, value] of Object.entries(props)) {
        out.push({kind: "ModelChanged", model: {id}, attr, new: attr === "styles" ? clearing(id, value) : value});
      }
    }
    return out;
  }

  // The readouts pane with the change cells of this step (the export drew them with Python's readouts()).
  function readoutsText(text, data) {
    if (!shown || !shown.sid || !data.sid) return text;
    const cells = (data.after || {})[shown.sid] || (shown.before || {})[data.sid];
    const parts = text.split(C.blankCell);
    if (!cells || parts.length !== cells.length + 1) return text;
    return parts.map((p, i) => p + (cells[i] ?? "")).join("");
  }

  // Apply a patch of the page's own controls and panes (no arrays): {name: {property: value}}.
  const patchUi = (patch) => doc.apply_json_patch({events: events(patch, [])}, new Map());

  // Each control's quick stops light the current value's button, none between stops.
  function stopLights(v) {
    const patch = {};
    for (const [control, stops] of Object.entries(C.buttonStops)) {
      const i = stops.findIndex((s) => Number(s) === Number(v[control]));
      if (C.ids[`stops.${control}`]) patch[`stops.${control}`] = {active: i >= 0 ? i : null};
    }
    return patch;
  }

  function widgets(v) {
    const patch = {};
    for (const name of C.grid) {
      const m = doc.get_model_by_id(C.ids[`ctl.${name}`]);
      if (name in C.choices) patch[`ctl.${name}`] = {active: C.choices[name].indexOf(v[name])};
      else patch[`ctl.${name}`] = {value: Number(v[name]), value_throttled: Number(v[name])};
      if (!m) delete patch[`ctl.${name}`];
    }
    Object.assign(patch, stopLights(v));
    Object.assign(patch, fresh(C.controls[v.allocation] || {}));
    const match = C.steps.indexOf(keyOf(v));
    if (match >= 0) { chosen = match; followed = true; }
    const kind = match >= 0 ? "match" : followed ? "drifted" : "link";
    Object.assign(patch, fresh(C.guide[chosen][kind]));
    return patch;
  }

  // The served app's query for these settings (every control, then the projector flag if the link had one).
  function queryOf(v) {
    const q = new URLSearchParams();
    for (const name of C.order) q.set(name, name in v ? v[name] : C.defaults[name]);
    if (projector !== null) q.set("projector", projector);
    return `?${q.toString()}`;
  }

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
    const out = events(patch, []);
    events(widgets(v), out);
    events(shareLink(v), out);
    applying = true;
    try {
      doc.apply_json_patch({events: out}, data.buffers);
    } finally {
      applying = false;
    }
    values = {...v};
    if (data.summary) shown = data;
    writeUrl(values);
  }

  function notices(lines) {
    if (!lines.length) return;
    const items = lines.map((t) => `<li>${esc(t)}</li>`).join("");
    const text = esc(`<div class="notice" data-notice="link"><ul>${items}</ul></div>`);
    patchUi({"notices.text": {text}, "notices.box": {visible: true}});
  }

  // The link's settings: a value between stops goes to the nearest stop, a bad one to the default; each said.
  function fromLink() {
    const q = new URLSearchParams(location.search);
    const v = {}, said = [];
    for (const name of C.grid) {
      const def = C.defaults[name];
      v[name] = def;
      if (!q.has(name)) continue;
      const raw = q.get(name).trim();
      if (name in C.choices) {
        const hit = C.choices[name].find((c) => c.toLowerCase() === raw.toLowerCase());
        if (hit) v[name] = hit;
        else {
          said.push(`The link set ${name} to '${raw.slice(0, 40)}', which is not one of `
            + `${C.choices[name].join(", ")}; using the default, ${def}.`);
        }
        continue;
      }
      const x = Number(raw);
      if (raw === "" || !Number.isFinite(x) || x <= 0) {
        said.push(`The link set ${name} to '${raw.slice(0, 40)}', which is not a positive number; `
          + `using the default, ${def}.`);
        continue;
      }
      v[name] = nearest(name, x);
      if (Number(v[name]) !== x) {
        said.push(`The link set ${name} to ${raw.slice(0, 40)}, which is not one of this page's stops `
          + `(${C.stops[name].join(", ")}); using the nearest, ${v[name]}.`);
      }
    }
    for (const name of C.order) {
      if (C.grid.includes(name) || !q.has(name)) continue;
      const raw = q.get(name).trim();
      if (raw.toLowerCase() !== C.defaults[name].toLowerCase() && Number(raw) !== Number(C.defaults[name])) {
        said.push(`This page has only the starting value of ${C.labels[name]} (${C.defaults[name]}); the link's `
          + `'${raw.slice(0, 40)}' needs the served explorable. Using ${C.defaults[name]}.`);
      }
    }
    return [v, said];
  }

  const step = (i) => {
    chosen = i;
    followed = true;
    return go(Object.fromEntries(C.grid.map((n) => [n, C.stepValues[i][n]])));
  };

  window.cbStatic = {
    // A slider released or a radio button chosen (Bokeh's js_on_change on the widget).
    control(name, raw) {
      if (applying || !values) return;
      const v = {...values};
      v[name] = name in C.choices ? C.choices[name][raw] : nearest(name, Number(raw));
      // The widget echoing a value we set (or a release at the current stop) changes nothing, as in the
      // served app, where setting a parameter to its value sends nothing.
      if (keyOf(v) === keyOf(values) && v[name] === values[name]) return;
      go(v);
    },
    // A quick stop clicked (Bokeh's js_on_change on the stop group's active button). BokehJS runs these
    // callbacks after the change that caused them, so our own patches (lighting the current stop or step)
    // arrive here too, once `applying` is over: a choice of the settings on screen changes nothing.
    stop(control, i) {
      if (applying || !values || i === null || i === undefined) return;
      const v = {...values, [control]: nearest(control, Number(C.buttonStops[control][i]))};
      if (keyOf(v) !== keyOf(values)) return go(v);  // every stop control is in the key
      // A stop off this build's grid snaps to the value on screen: light that value's stop again.
      patchUi(stopLights(values));
    },
    // A guided step clicked (Bokeh's js_on_change on the guide's step group).
    chooseStep(i) {
      if (applying || !values || i === null || i === undefined) return;
      if (C.steps[i] !== keyOf(values)) step(i);
    },
    // Previous/next, reset, dismiss (Bokeh's js_on_event on the button).
    button(name) {
      if (!values) return;
      if (name === "guide.prev") { if (chosen > 0) step(chosen - 1); }  // greyed at an end: nothing
      else if (name === "guide.next") { if (chosen < C.steps.length - 1) step(chosen + 1); }
      else if (name === "reset") go(Object.fromEntries(C.grid.map((n) => [n, C.defaults[n]])));
      else if (name === "notices.dismiss") {
        patchUi({"notices.box": {visible: false}});
      }
    },
    values: () => ({...values}),
    ready: null,
  };

  window.cbStatic.ready = new Promise((resolve) => {
    const start = () => {
      const d = window.Bokeh && Bokeh.documents && Bokeh.documents[0];
      if (!d || !d.get_model_by_id(C.ids.readouts)) { setTimeout(start, 30); return; }
      doc = d;
      const [v, said] = fromLink();
      const first = Object.fromEntries(C.grid.map((n) => [n, C.defaults[n]]));
      const match = C.steps.indexOf(keyOf(v));
      chosen = match >= 0 ? match : 0;
      followed = match >= 0;
      values = first;
      notices(said);
      // The page was drawn at the starting point; opened there, its file gives the deltas of the first change.
      // A link to another state opens without deltas, as the served app does.
      const opened = go(v, keyOf(v) === keyOf(first));
      opened.then(resolve, resolve);
    };
    start();
  });
})();
