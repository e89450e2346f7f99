"""`python -m explorable.export --out DIR`: the explorable as a static site, for a course page with no server.

DIR gets `index.html` (the served app's page, built by the same views, with its first state drawn) and
`projector.html` (the same in the app's projector view, which `?projector=1` opens), the
Bokeh and Panel JavaScript and CSS they load, copied from the installed packages, `static/cb-static.js`
(which swaps a state's data into the page's models when the reader changes a control) and `data/`, one
JSON file per distinct outcome, named by a hash of its content, so identical outcomes are stored once.
Every state it holds is simulated by the engine and drawn by the app's own view code in worker processes: the
full product of the grid controls' stops (the article's guide), and each step of the guides under traffic and
with prefix caching with each control the guide names moved to its stops (`--guides`). The page runs no engine
(it computes only goodput against the SLO targets, from each request's timing in the file). DIR holds only what
a host should serve.
Interrupted, the build resumes: each group of states, once done, is kept outside DIR (under the system's
temporary folder, or --work), and that cache is removed when the build completes.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import functools
import html
import itertools
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from explorable.state.control_specs import CONTROL_SPECS, GRID_CONTROLS, HELD_CONTROLS, STEP_CONTROLS
from explorable.static_site import static_data

LEGACY_WORK = ".work"  # where builds before this one kept their resume cache: inside the site (removed)
STATIC_JS = Path(__file__).resolve().parent / "static" / "cb-static.js"
# The grid's controls in URL order: those whose declaration gives static stops (explorable.state.control_specs).
GRID_ORDER = GRID_CONTROLS
# Controls held only around the held guides' steps (declared with step_stops), in URL order: a state's key names
# each one that differs from its starting value, after the grid's (so every key of the article's grid is as before).
EXTRA_ORDER = STEP_CONTROLS
CHOICES = tuple(n for n in HELD_CONTROLS if CONTROL_SPECS[n].setting.choices)  # choices; the rest numbers or bools
BOOLS = tuple(n for n in HELD_CONTROLS if CONTROL_SPECS[n].setting.kind is bool)
# The guides the default build holds beside the article's, by GuideSpec.needs (--guides).
from explorable.static_site.static_page import HELD_GUIDES, NEEDS, held_guides  # noqa: E402


class ExportError(Exception):
    """Bad input for the export, said in one line."""


# -- the grid -------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None, typed=True)
def url_text(name: str, value: Any) -> str:
    """A control's value as the served app writes it in the URL (`layout.query_values`)."""
    from explorable.state.store import ExplorableState

    text = ExplorableState.param[name].serialize(value)
    return text if isinstance(text, str) else json.dumps(text)


@functools.cache
def _defaults() -> dict[str, Any]:
    """The starting value of each held control (read, never changed, by every caller)."""
    from explorable.state.store import ExplorableState

    return {n: ExplorableState.param[n].default for n in HELD_CONTROLS}


@functools.cache
def _default_texts() -> dict[str, str]:
    """Each held control's starting value as the URL writes it (a key leaves those out)."""
    return {n: url_text(n, v) for n, v in _defaults().items()}


def state_key(values: dict[str, Any]) -> str:
    """The key of a state in the manifest: its grid controls' URL texts, in URL order, then `&name=text` for each
    control held around the guides' steps that differs from its starting value (absent: at its start)."""
    defaults = _default_texts()
    key = "&".join(url_text(n, values[n]) for n in GRID_ORDER)
    return key + "".join(f"&{n}={text}" for n in EXTRA_ORDER
                         if n in values and (text := url_text(n, values[n])) != defaults[n])


def _ordered(name: str, values: Iterable) -> tuple:
    values = tuple(dict.fromkeys(values))
    return values if name in CHOICES or name in BOOLS else tuple(sorted(values))


def neighbourhood_stops(stops: dict[str, tuple], spec) -> dict[str, tuple]:
    """The values a held guide's neighbourhood gives each control it asks to try: the control's stops and every
    value the guide's own steps give it (the rate of 10/s the third step under traffic uses)."""
    return {c: _ordered(c, [*stops[c], *(st.settings[c] for st in spec.steps if c in st.settings)])
            for c in spec.tries}


def grid(stops: dict[str, tuple], guides=HELD_GUIDES) -> tuple[dict[str, dict], dict[str, str]]:
    """(computed states by key, every reachable key -> the key whose outcome it shows): the full product of the
    grid controls' stops, and, for each step of each held guide, the step and each control the guide asks the reader
    to try moved to each of its stops (the step's one-control neighbourhood).

    On demand, declared max_tokens is never read: every declared stop shows the run at the default one."""
    defaults = _defaults()
    default_declared = defaults["declared_multiple"]
    computed: dict[str, dict] = {}
    reach: dict[str, str] = {}

    def hold(values: dict) -> None:
        shown = dict(values)
        if values["allocation"] == "on-demand":
            shown["declared_multiple"] = default_declared
        key = state_key(shown)
        computed.setdefault(key, shown)
        reach[state_key(values)] = key

    for combo in itertools.product(*(stops[n] for n in GRID_ORDER)):
        hold({**defaults, **dict(zip(GRID_ORDER, combo))})
    for spec in held_guides(guides):
        around = neighbourhood_stops(stops, spec)
        for step in spec.steps:
            base = {**defaults, **step.settings}
            hold(base)
            for name, values in around.items():
                for v in values:
                    hold({**base, name: v})
    return computed, reach


def all_stops(stops: dict[str, tuple], guides=HELD_GUIDES) -> dict[str, tuple]:
    """Every value the build holds of each held control (its stops, and the held guides' steps' own values)."""
    out = {n: list(stops[n]) for n in HELD_CONTROLS}
    defaults = _defaults()
    for spec in held_guides(guides):
        for step in spec.steps:
            for n, v in step.settings.items():
                out[n].append(v)
    for n in HELD_CONTROLS:
        out[n].append(defaults[n])
    return {n: _ordered(n, v) for n, v in out.items()}


def parse_guides(text: str | None) -> tuple[str, ...]:
    """`--guides traffic,prefix` (the default), a part of it, or `none`: the guides held beside the article's."""
    if text is None:
        return HELD_GUIDES
    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["none"]:
        return ()
    bad = [n for n in names if n not in HELD_GUIDES]
    if bad or not names:
        served = ", ".join(sorted(set(NEEDS) - set(HELD_GUIDES)))
        raise ExportError(f"--guides takes a comma-separated list of {', '.join(HELD_GUIDES)} (or none; {served} "
                          f"stays a guide of the served explorable): {text!r}")
    return tuple(n for n in HELD_GUIDES if n in names)


def parse_stops(items: Iterable[str]) -> dict[str, tuple]:
    """`--stops name=v1,v2` overrides, checked against each control's own bounds and choices."""
    from explorable.state.store import ExplorableState
    from explorable.page.url import parse_control
    from explorable.static_site.static_page import STOPS

    stops = dict(STOPS)
    probe = ExplorableState.__new__(ExplorableState)  # parse_control only reads the parameters' declarations
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or name not in STOPS:
            raise ExportError(f"--stops takes NAME=V1,V2 with NAME one of {', '.join(STOPS)}: {item!r}")
        try:
            values = tuple(dict.fromkeys(parse_control(probe, name, v) for v in raw.split(",") if v.strip()))
        except ValueError as exc:
            raise ExportError(f"--stops {name}: each value must be {exc}") from None
        if not values:
            raise ExportError(f"--stops {name}: no values")
        stops[name] = _ordered(name, values)
    defaults = {n: ExplorableState.param[n].default for n in STOPS}
    missing = [n for n in STOPS if defaults[n] not in stops[n]]
    if missing:
        needed = ", ".join(f"{n}={url_text(n, defaults[n])}" for n in missing)
        raise ExportError(f"the stops must include the starting point: {needed}")
    return stops


def guided_step_keys(stops: dict[str, tuple], guides=HELD_GUIDES) -> dict[str, list[str]]:
    """The key of each guided step's state, by guide (the page's step buttons go there): the article's steps must
    be on the grid; the held guides' steps are held with their neighbourhoods."""
    from explorable.views.guide import GUIDES

    _, reach = grid(stops, guides)
    defaults = _defaults()
    out: dict[str, list[str]] = {}
    for spec in GUIDES:
        if spec.needs and spec.needs not in guides:
            continue
        keys = []
        for step in spec.steps:
            unheld = [n for n in step.settings if n not in HELD_CONTROLS]
            key = None if unheld else reach.get(state_key({**defaults, **step.settings}))
            if key is None:
                raise ExportError(f"the stops must include every guided step's settings ({step.title}: "
                                  f"{step.settings})")
            keys.append(key)
        out[spec.key] = keys
    return out


# -- worker: one group of states -------------------------------------------------------------------
_PAGE = None


def _export_group(stops: dict[str, tuple], guides: tuple, states: list[dict], target: str) -> int:
    """Draw each state with the app's views; write their summaries and patches to `target` (atomically)."""
    global _PAGE
    from explorable.static_site import static_page

    if _PAGE is None:
        _PAGE = static_page.build(stops, guides=guides)
    page = _PAGE
    out = []
    for values in states:
        static_page.set_controls(page, values)
        ok = not page.state.run_error
        out.append({
            "key": state_key(values), "values": values,
            "summary": page.state.summary if ok else None,
            "patch": static_page.run_patch(page) if ok else
            static_page.patch({"run_error": page.run_models["run_error"]}),
            "traffic": static_page.traffic_data(page) if ok else None,
        })
    tmp = Path(target + ".tmp")
    tmp.write_text(json.dumps(out, separators=(",", ":")))
    tmp.replace(target)
    return len(states)


# -- assembling the site ---------------------------------------------------------------------------
def _digest(data: bytes, n: int = 16) -> str:
    return hashlib.sha256(data).hexdigest()[:n]


def _write_data(out: Path, results: dict[str, dict]) -> tuple[dict[str, str], list[dict]]:
    """One file per distinct outcome under data/; returns key -> file name (without .json), and the arrays
    that are shared by many files (the page carries those)."""
    data_dir = out / "data"
    data_dir.mkdir(exist_ok=True)
    for tmp in data_dir.glob("*.tmp"):  # left by an interrupted build
        tmp.unlink()
    files: dict[str, str] = {}
    fixed = static_data.constant_props(results)
    varying = {key: {name: {a: v for a, v in props.items() if (name, a) not in fixed}
                     for name, props in r["patch"].items()} for key, r in results.items()}
    packs, shared = static_data.share({key: static_data.pack({n: p for n, p in patch.items() if p}) for key, patch in varying.items()})
    for key, r in results.items():
        packed, arrays = packs[key]
        body: dict[str, Any] = {"patch": packed, "arrays": arrays}
        s = r["summary"]
        if r.get("traffic"):
            body["traffic"] = r["traffic"]
        if s is not None:  # (the page says each readout's change against the state before from the two summaries)
            body["summary"] = s
        raw = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
        name = _digest(raw)
        path = data_dir / f"{name}.json"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(raw)
            tmp.replace(path)
        files[key] = name
    return files, shared


PANEL_CDN = re.compile(r"https://cdn\.holoviz\.org/panel/[^/]+/dist/")


def _copy_assets(page_html: str, out: Path) -> str:
    """Point the page at copies of Bokeh's and Panel's files (from the installed packages) under static/."""
    import bokeh
    import panel

    page_html = PANEL_CDN.sub("static/extensions/panel/", page_html)
    page_html = page_html.replace("./static/", "static/")
    sources = {"static/js/": Path(bokeh.__file__).parent / "server" / "static" / "js",
               "static/extensions/panel/": Path(panel.__file__).parent / "dist"}
    pending = {(rel, True) for rel in re.findall(r"static/(?:js|extensions/panel)/[^\"'?\s)&;]+", page_html)}
    done: set[str] = set()
    while pending:
        rel, required = pending.pop()
        if rel in done or not rel.startswith(tuple(sources)):
            continue
        done.add(rel)
        prefix = next(p for p in sources if rel.startswith(p))
        src = sources[prefix] / rel[len(prefix):]
        if not src.is_file():
            if not required:  # a font format a stylesheet offers and the package does not ship
                continue
            raise ExportError(f"the page loads {rel}, which the installed package does not have")
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        if src.suffix == ".css":  # fonts and images a stylesheet loads, relative to it
            for ref in re.findall(r"url\(['\"]?([^'\")]+)['\"]?\)", src.read_text(errors="replace")):
                # woff2 only: every browser that runs Bokeh 3 takes it, and skips the older formats listed beside
                if not re.match(r"^(data:|https?:|#)", ref) and not re.search(r"\.(eot|ttf|woff|svg)([?#]|$)", ref):
                    ref = ref.split("?")[0].split("#")[0]
                    pending.add((os.path.normpath(os.path.join(os.path.dirname(rel), ref)), False))
    return page_html


def page_resources(doc):
    """Bokeh's and Panel's resources for the page of `doc`, without Bokeh's WebGL bundle unless a plot draws
    with WebGL (the page draws on canvas)."""
    from bokeh.resources import Resources
    from panel.io.resources import Resources as PnResources

    webgl = any(getattr(m, "output_backend", None) == "webgl" for m in doc.models)
    components = [c for c in Resources(mode="server").components if c != "bokeh-gl" or webgl]
    return PnResources.from_bokeh(Resources(mode="server", root_url="./", components=components), absolute=True)


def unused_files(doc) -> set[str]:
    """Files (paths under static/, no query) that Bokeh and Panel list for every model class imported but that
    no model of `doc` uses: es-module-shims for Panel's ESM components, notyf and Font Awesome for its
    notification area (a static page has no server connection to report on). Each is fetched, parsed and
    run on every page open before the page draws."""
    import panel as pn
    from bokeh.model import Model

    def files(owner, attrs) -> list[str]:
        out = []
        for attr in attrs:
            value = getattr(owner, attr, None)
            out += [value] if isinstance(value, str) else [f for f in value or [] if isinstance(f, str)]
        return out

    held = {type(m) for m in doc.models}
    used: set[str] = set()
    unused: set[str] = set()
    for cls in Model.model_class_reverse_map.values():
        listed = files(cls, ("__javascript__", "__css__"))
        (used if any(issubclass(h, cls) for h in held) else unused).update(listed)
    area = pn.state.notifications
    if area is not None and not any(type(m).__name__ == "NotificationArea" for m in doc.models):
        unused.update(files(type(area), ("__javascript__", "__css__")))
    norm = lambda f: re.sub(r"^.*?static/", "static/", PANEL_CDN.sub("static/extensions/panel/", f)).split("?")[0]  # noqa: E731
    return {norm(f) for f in unused} - {norm(f) for f in used}


def _drop_unused(page_html: str, unused: set[str]) -> str:
    """The page without the <script> and <link> tags of `unused` files."""
    def keep(m: re.Match) -> str:
        return "" if m.group(2).split("?")[0] in unused else m.group(0)
    return re.sub(r'<(?:script|link)[^>]*(?:src|href)="(\./)?([^"]+)"[^>]*>(?:</script>)?\n?', keep, page_html)


# The page and its projector view (`?projector=1`, as on the served app): each a shell of its own, drawn by the
# app's own projector code; a link to either with the other's flag goes to the other before anything loads.
PAGES = (("index.html", False), ("projector.html", True))
_SWITCH = """<script>(() => {  // ?projector=1 is the projector page's, as on the served explorable
  const flag = (new URLSearchParams(location.search).get("projector") || "").trim().toLowerCase();
  const want = ["1", "true", "yes", "on"].includes(flag);
  if (want !== %s) location.replace(%s + location.search + location.hash);
})();</script>
"""


def _config(page, stops: dict[str, tuple], held: dict[str, tuple], files: dict[str, str], reach: dict[str, str],
            step_keys: dict[str, list[str]], results: dict[str, dict], shared: list[dict],
            guides: tuple) -> dict[str, Any]:
    """What the page's script needs to swap states (the same for both pages but for the models' ids)."""
    from explorable.static_site import static_page
    from explorable.page.layout import EMBED_MESSAGE
    from explorable.views.readouts import CHANGES, PERCENT, Readout, delta_cell, traffic_readouts
    from explorable.state.control_specs import SIDEBAR_CONTROLS, SLO_CONTROLS, URL_CONTROLS
    from explorable.state.store import ExplorableState

    # Every control of the served app's link, in its order (the section of a reader's own workload is left out).
    controls = [n for n in URL_CONTROLS if n in SIDEBAR_CONTROLS]
    on_page = static_page.held_controls(guides)
    keyed = [n for n in HELD_CONTROLS if n in on_page]  # the controls a state's key names
    numbers = [n for n in keyed if n not in CHOICES and n not in BOOLS]
    specs = [spec for spec in page.app.guide_specs()]
    rows = traffic_readouts({k: 1.0 for k in ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99",
                                              "request_throughput")}, None, 1.0, None, {"ttft": 1.0, "tpot": 1.0})
    return {
        "order": controls,
        "grid": list(GRID_ORDER),
        "extra": [n for n in EXTRA_ORDER if n in keyed],
        "keyed": keyed,
        "stops": {n: [url_text(n, v) for v in held[n]] for n in keyed},
        "numbers": {n: [float(v) for v in held[n]] for n in numbers},
        "choices": {n: [url_text(n, v) for v in ExplorableState.param[n].objects] for n in keyed if n in CHOICES},
        "bools": [n for n in keyed if n in BOOLS],
        "slo": [n for n in SLO_CONTROLS if n in on_page],
        "defaults": {n: url_text(n, ExplorableState.param[n].default) for n in controls},
        "labels": {n: ExplorableState.param[n].label for n in controls},
        "logScale": [n for n in keyed if CONTROL_SPECS[n].log_scale],
        "sloBounds": {n: list(ExplorableState.param[n].bounds) for n in SLO_CONTROLS},
        "states": {k: files[v] for k, v in reach.items()},
        "guides": [{"key": spec.key, "steps": step_keys[spec.key],
                    "values": [{n: url_text(n, results[k]["values"][n]) for n in keyed} for k in step_keys[spec.key]]}
                   for spec in specs],
        "guide": static_page.guide_fragments(page),
        "controls": static_page.control_fragments(page),
        "blankCell": html.escape(delta_cell(Readout("", "", 0.0, "", "", "", ""))),
        "trafficRows": [[r.key, r.label] for r in rows],
        "changes": {key: [c.decimals, c.comma, c.unit, c.higher_is_better, PERCENT.get(key, 1)]
                    for key, c in CHANGES.items()},
        "buttonStops": {n: [url_text(n, CONTROL_SPECS[n].typed(v)) for v in (
            page.app.views["controls"].pool_stops if n == "pool_gib" else CONTROL_SPECS[n].stops)]
            for n in keyed if CONTROL_SPECS[n].stops},
        "embedMessage": EMBED_MESSAGE,
        "shareText": page.ui_models["share"].text,
        "shareHref": static_page.SHARE_HREF,
        "shared": shared,
    }


def _shell(out: Path, stops: dict[str, tuple], held: dict[str, tuple], files: dict[str, str], reach: dict[str, str],
           step_keys: dict[str, list[str]], results: dict[str, dict], shared: list[dict], guides: tuple) -> None:
    """index.html and projector.html: the page at its starting point, its resources, and what the script needs."""
    from panel.config import config as pn_config
    from panel.io.resources import set_resource_mode
    from bokeh.core.validation import silenced
    from bokeh.core.validation.warnings import EMPTY_LAYOUT
    from panel.io.save import file_html

    from explorable.static_site import static_page
    from explorable.page.layout import TITLE
    from explorable.page.template import VIEWPORT_META

    (out / "static").mkdir(exist_ok=True)
    shutil.copyfile(STATIC_JS, out / "static" / "cb-static.js")
    config = None
    for name, projector in PAGES:
        page = static_page.build(stops, projector=projector, guides=guides)
        config = config or _config(page, stops, held, files, reach, step_keys, results, shared, guides)
        ids = {n: m.id for n, m in {**page.run_models, **page.ui_models}.items()}
        static_page.set_controls(page, {})  # back at the starting point, which the shell draws
        static_page.forget_traffic(page)
        page.state.dismiss_notices()
        static_page.on_change_js(page)
        resources, unused = page_resources(page.doc), unused_files(page.doc)  # (with the request-rate figures)
        traffic = static_page.detach_traffic_views(page, ids)  # (the script adds them: C.trafficViews)
        # No notification area: a static page has no server to lose (and the area loads its own JS and CSS).
        # (Bokeh would warn that the request-rate figures' pane is empty: it is, until the script fills it.)
        with set_resource_mode("server"), pn_config.set(notifications=False), silenced(EMPTY_LAYOUT):
            text = file_html(page.doc, resources, TITLE)
        text = _copy_assets(_drop_unused(text, unused), out)
        other = next(n for n, p in PAGES if p != projector)
        switch = _SWITCH % ("true" if projector else "false", json.dumps(other))
        assert "<head>" in text
        text = text.replace("<head>", "<head>\n" + VIEWPORT_META + "\n" + switch, 1)
        script = json.dumps({**config, "ids": ids, **traffic}, separators=(",", ":")).replace("</", "<\\/")
        tail = f'<script>window.CB_STATIC_CONFIG = {script};</script>\n<script src="static/cb-static.js"></script>\n'
        text = text.replace("</body>", tail + "</body>", 1)
        tmp = out / f"{name}.tmp"
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out / name)


# -- figures -------------------------------------------------------------------------------------
def _size(paths: Iterable[Path]) -> tuple[int, int]:
    raw = gz = 0
    for p in paths:
        data = p.read_bytes()
        raw += len(data)
        gz += len(gzip.compress(data, 9))
    return raw, gz


def figures(out: Path) -> dict[str, Any]:
    """Sizes of the site: all of it, the shell (everything but data/), and the largest state file."""
    every = [p for p in out.rglob("*") if p.is_file()]
    data = [p for p in every if p.parent == out / "data"]
    shell = [p for p in every if p not in set(data)]
    largest = max(data, key=lambda p: len(gzip.compress(p.read_bytes(), 9)), default=None)
    return {
        "total": _size(every), "shell": _size(shell), "data_files": len(data),
        "largest": (largest.name, *_size([largest])) if largest else None,
    }


def _kb(n: int) -> str:
    return f"{n / 1024:,.1f} kB" if n < 1024 * 1024 else f"{n / 2**20:,.2f} MB"


# -- the resume cache ------------------------------------------------------------------------------
def default_work_root() -> Path:
    """Where builds keep their resume caches unless told (--work): the system's temporary folder."""
    return Path(tempfile.gettempdir()) / "cb-explorable-export"


def code_digest() -> str:
    """A digest of the code that draws the states (the engine, its kernels, the explorable and its stylesheet):
    an interrupted build resumed after the code changed starts afresh instead of mixing two versions' states."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for path in sorted([*root.glob("engine/**/*.py"), *root.glob("kernels/**/*.py"), *root.glob("explorable/**/*.py"),
                        *root.glob("explorable/**/*.js"), *root.glob("assets/*.css")]):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def work_dir(out: Path, stops: dict[str, tuple], root: Path | None = None, guides=HELD_GUIDES) -> Path:
    """The resume cache of a build of `stops` into `out`: outside `out`, one per site folder, grid and version of
    the code (two builds into different folders, of different grids or by different code never share one)."""
    key = json.dumps({"out": str(out.resolve()), "stops": {n: [str(v) for v in stops[n]] for n in sorted(stops)},
                      "guides": list(guides), "code": code_digest()})
    return (root or default_work_root()) / _digest(key.encode(), 16)


def _tidy(out: Path) -> None:
    """Leave in `out` only what a host should serve: no resume cache of an older build, no half-written file."""
    legacy = out / LEGACY_WORK
    if legacy.is_dir():
        shutil.rmtree(legacy)
    for tmp in [*out.glob("*.tmp"), *out.glob("data/*.tmp")]:
        tmp.unlink()


# -- command line --------------------------------------------------------------------------------
def export(out: Path, stops: dict[str, tuple], jobs: int, progress: bool = True,
           work_root: Path | None = None, guides=HELD_GUIDES) -> dict[str, Any]:
    """Build the site in `out` (resuming from the cache under `work_root`, removed once done); returns the
    figures it prints."""
    started = time.perf_counter()
    computed, reach = grid(stops, guides)
    step_keys = guided_step_keys(stops, guides)
    held = all_stops(stops, guides)

    work = work_dir(out, stops, work_root, guides)
    work.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple, list[dict]] = {}
    for values in computed.values():
        # Everything but the swept controls (and the rate, which the request-rate curve sweeps): a group's curves
        # share their runs in one worker's cache.
        group = tuple(url_text(n, values[n]) for n in HELD_CONTROLS if n not in ("max_num_seqs", "pool_gib",
                                                                                  "request_rate"))
        groups.setdefault(group, []).append(values)
    todo = {str(work / f"group-{i:03d}.json"): g for i, g in enumerate(groups.values())}
    pending = {t: g for t, g in todo.items() if not Path(t).exists()}
    bar = _bar(len(computed), len(computed) - sum(len(g) for g in pending.values()), progress)
    if pending:
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(pending))), mp_context=get_context("spawn")) as pool:
            # The largest groups first (the traffic states' with their request-rate curves are the slowest).
            order = sorted(pending.items(), key=lambda tg: -len(tg[1]))
            futures = [pool.submit(_export_group, stops, tuple(guides), g, t) for t, g in order]
            for f in as_completed(futures):
                bar(f.result())
    bar(0, done=True)

    results: dict[str, dict] = {}
    for target in todo:
        for r in json.loads(Path(target).read_text()):
            results[r["key"]] = r
    files, shared = _write_data(out, results)
    _shell(out, stops, held, files, reach, step_keys, results, shared, tuple(guides))
    stale = set((out / "data").glob("*.json")) - {out / "data" / f"{f}.json" for f in files.values()}
    for p in stale:  # outcomes of an earlier build with other stops
        p.unlink()
    _tidy(out)
    shutil.rmtree(work, ignore_errors=True)  # done: nothing to resume
    elapsed = time.perf_counter() - started
    fig = figures(out)
    fig.update(states=len(reach), computed=len(computed), outcomes=len(set(files.values())),
               seconds=elapsed, jobs=jobs, errors=sum(r["summary"] is None for r in results.values()),
               guides=tuple(guides))
    return fig


def _bar(total: int, initial: int, enabled: bool):
    """A progress bar over states (tqdm when installed, else a line on stderr)."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    count = [initial]
    bar = tqdm(total=total, initial=initial, unit="state", desc="states", disable=not enabled) if tqdm else None

    def advance(n: int, done: bool = False) -> None:
        count[0] += n
        if bar is not None:
            bar.update(n)
            if done:
                bar.close()
        elif enabled:
            print(f"\rstates {count[0]}/{total}", end="\n" if done else "", file=sys.stderr, flush=True)

    return advance


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m explorable.export", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path,
                        help="folder to write the site into (created): it gets only the files a host serves, so "
                             "upload it as it is. An interrupted build resumes; its cache of finished states is "
                             "kept outside the folder (see --work) and removed when the build completes")
    parser.add_argument("--work", type=Path, default=None, metavar="DIR",
                        help="where an unfinished build keeps finished states to resume from (default: "
                             f"{default_work_root()}); never inside --out")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes (default: one per CPU, %(default)s here)")
    parser.add_argument("--stops", action="append", default=[], metavar="NAME=V1,V2",
                        help="a reduced grid for one control (default: the static stops of every control)")
    parser.add_argument("--guides", default=None, metavar="GUIDE,GUIDE",
                        help="the guides held beside the article's, each step with its one-control neighbourhood "
                             f"(default: {','.join(HELD_GUIDES)}; 'none' for the article's grid alone; the memory-wall "
                             "fixes stay a guide of the served explorable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    try:
        if args.jobs < 1:
            raise ExportError("--jobs must be at least 1")
        if args.out.exists() and not args.out.is_dir():
            raise ExportError(f"--out {args.out} exists and is not a folder")
        if args.work is not None and args.work.resolve().is_relative_to(args.out.resolve()):
            raise ExportError(f"--work {args.work} is inside --out {args.out}: a host would serve it")
        if args.work is not None and args.work.exists() and not args.work.is_dir():
            raise ExportError(f"--work {args.work} exists and is not a folder")
        stops = parse_stops(args.stops)
        guides = parse_guides(args.guides)
        guided_step_keys(stops, guides)
        args.out.mkdir(parents=True, exist_ok=True)
        fig = export(args.out, stops, args.jobs, progress=not args.quiet, work_root=args.work, guides=guides)
    except ExportError as exc:
        print(f"explorable.export: {exc}", file=sys.stderr)
        return 2
    t_raw, t_gz = fig["total"]
    s_raw, s_gz = fig["shell"]
    name, l_raw, l_gz = fig["largest"]
    print(f"states (reachable settings):  {fig['states']:,} ({fig['computed']:,} simulated, "
          f"{fig['errors']} that cannot run)")
    print(f"distinct outcomes (files):    {fig['outcomes']:,}")
    others = "".join(", " + g for g in fig["guides"])
    print(f"guides held:                  all at once{others}"
          + (" (each step of the others with its one-control neighbourhood)" if others else " (the article's grid)"))
    print(f"build time:                   {fig['seconds']:,.0f} s with {fig['jobs']} worker(s)"
          f" (load average {os.getloadavg()[0]:.2f}; resumed groups are not re-timed)")
    print(f"total size:                   {_kb(t_raw)} raw, {_kb(t_gz)} gzipped")
    print(f"shell (page + JS + CSS):      {_kb(s_raw)} raw, {_kb(s_gz)} gzipped")
    print(f"largest state file:           {_kb(l_raw)} raw, {_kb(l_gz)} gzipped (data/{name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
