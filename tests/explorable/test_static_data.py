"""The static build's data files against the engine and the served app's views: a small export on a reduced grid,
then, for a sample of states, the file's summary (with its `trace_digest`) is the engine's, and its patch is
what the app's own views draw for that state. Also: bad input to the export is one line and writes nothing.
"""
from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import RunConfig, simulate
from explorable.static_site import export, static_data, static_page
from explorable.state.store import ExplorableState
from explorable.state.control_specs import config_fields

ROOT = Path(__file__).resolve().parents[2]
SMALL_GRID = ["max_num_seqs=64,256,512", "pool_gib=2,16", "declared_multiple=1,4", "spread=1,16"]


def run_export(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "explorable.export", "--quiet", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def site(static_build) -> Path:
    """The session's small export (tests/explorable/conftest.py: the article's grid and the guides' steps)."""
    return static_build.out


def page_config(site: Path) -> dict:
    text = (site / "index.html").read_text()
    return json.loads(re.search(r"window\.CB_STATIC_CONFIG = (.*?);</script>", text).group(1).replace("<\\/", "</"))


def values_of(key: str) -> dict:
    """A manifest key back to control values (it lists the grid controls' URL texts in URL order, then
    `&name=text` for each other held control that is not at its start)."""
    state = ExplorableState.__new__(ExplorableState)
    out = {}
    parts = key.split("&")
    for name, text in zip(export.GRID_ORDER, parts):
        p = state.param[name]
        out[name] = text if name in ("allocation", "unit") else (int(text) if name == "max_num_seqs" else float(text))
        assert p.serialize(out[name]) == (text if name in ("allocation", "unit") else json.loads(text))
    for part in parts[len(export.GRID_ORDER):]:
        name, _, text = part.partition("=")
        assert name in export.EXTRA_ORDER
        out[name] = text if name in export.CHOICES else json.loads(text)
        assert export.url_text(name, out[name]) == text
    return out


SAMPLE = (
    "256&16.0&on-demand&4.0&pass&16.0",  # the starting point
    "256&16.0&on-demand&1.0&pass&16.0",  # on demand, declared max_tokens is never read: same outcome as 4.0
    "512&2.0&on-demand&4.0&pass&16.0",  # the memory wall
    "64&16.0&reserve&4.0&request&16.0",  # static batching
    "64&2.0&reserve&1.0&pass&1.0",
    "512&16.0&reserve&1.0&request&1.0",
    "256&16.0&on-demand&4.0&pass&16.0&arrival=rate&request_rate=16.0",  # past the knee, under traffic
    "256&16.0&on-demand&4.0&pass&16.0&enable_prefix_caching=true&system_prompt_len=1024",  # a shared system prompt
)


@pytest.fixture(scope="module")
def pages() -> tuple:
    """The served app's views as the export builds them (every SAMPLE value among the stops), and the shell: the
    same page drawn at its starting point. Built once: a page takes seconds."""
    held = [values_of(key) for key in SAMPLE]
    stops = {name: tuple(dict.fromkeys([*static_page.STOPS.get(name, ()), *(v[name] for v in held if name in v)]))
             for name in {*static_page.STOPS, *(n for v in held for n in v)}}
    page = static_page.build(stops)
    start = static_page.build()
    static_page.set_controls(start, {})
    return page, static_page.run_patch(start)


@pytest.mark.parametrize("key", SAMPLE)
def test_a_state_file_holds_the_engines_summary_and_the_views_data(site, pages, key):
    config = page_config(site)
    data = json.loads((site / "data" / f"{config['states'][key]}.json").read_text())
    values = values_of(key)
    defaults = ExplorableState.__new__(ExplorableState).defaults()
    trace = simulate(RunConfig(**config_fields({**defaults, **values})))
    summary = trace.summary()
    assert data["summary"] == json.loads(json.dumps(summary))
    assert data["summary"]["trace_digest"] == summary["trace_digest"]

    # What the served app's views draw for this state, packed as the export packs it.
    page, shell = pages
    static_page.set_controls(page, values)
    drawn = static_page.run_patch(page)
    # Under traffic, each request's timing, for the goodput the page computes at any SLO target.
    assert data.get("traffic") == (json.loads(json.dumps(static_page.traffic_data(page))) if trace.arrives_over_time
                                   else None)
    if trace.arrives_over_time:
        timing = trace.timing()
        assert sum(data["traffic"]["done"]) == int(np.isfinite(timing.e2el).sum()) > 0
        assert data["traffic"]["makespan"] == trace.makespan_s
    held = resolve(data["patch"], data["arrays"], config["shared"])
    patch, arrays = static_data.pack({name: {a: v for a, v in props.items() if a in held.get(name, {})}
                                  for name, props in drawn.items() if name in held})
    assert resolve(patch, arrays, []) == held
    # What the file leaves out, the page already shows: the shell (drawn at the starting point) has that value.
    left_out = [(n, a) for n, props in drawn.items() for a in props if a not in held.get(n, {})]
    assert all(drawn[n][a] == shell[n][a] for n, a in left_out), left_out
    # ... and the packed arrays decode (as the page decodes them) to the views' own numbers.
    for view, source in (("strips", "kv_source"), ("strips", "batch_source"), ("lanes", "source")):
        drawn = getattr(page.app.views[view], source).data
        name = {"kv_source": "strips.kv", "batch_source": "strips.batch", "source": "lanes.source"}[source]
        for column, ref in dict(data["patch"][name]["data"]["entries"]).items():
            got = decode(data["arrays"][ref["i"]] if "i" in ref else config["shared"][ref["s"]])
            assert got.tobytes() == np.asarray(drawn[column]).tobytes(), (name, column)


def resolve(patch, arrays: list[dict], shared: list[dict]):
    """A packed patch with every array reference replaced by the array's entry (its own or a shared one)."""
    if isinstance(patch, dict) and patch.get("type") == "cb-array":
        return arrays[patch["i"]] if "i" in patch else shared[patch["s"]]
    if isinstance(patch, dict):
        return {k: resolve(v, arrays, shared) for k, v in patch.items()}
    if isinstance(patch, list):
        return [resolve(v, arrays, shared) for v in patch]
    return patch


def decode(a: dict) -> np.ndarray:
    """The page's decoding of one packed array (cb-static.js `unpack`), in numpy."""
    def unplane(b64: str, width: int) -> np.ndarray:
        planes = np.frombuffer(gzip.decompress(base64.b64decode(b64)), dtype=np.uint8)
        return planes.reshape(width, -1).T.copy()

    if "values" in a:
        values = np.frombuffer(gzip.decompress(base64.b64decode(a["values"])), dtype=a["dtype"])
        return values[unplane(a["data"], a["index"]).view(f"<u{a['index']}").ravel()]
    if "grid" in a:
        steps = unplane(a["data"], a["steps"]).view(f"<i{a['steps']}").ravel()
        return (np.cumsum(steps, dtype=np.int64) * 2.0 ** a["grid"]).astype(a["dtype"])
    raw = unplane(a["data"], a["width"])
    if a["delta"]:
        raw = np.cumsum(raw.view(f"<i{a['width']}").ravel(), dtype=f"<i{a['width']}").view(np.uint8)
    return np.frombuffer(raw.tobytes(), dtype=a["dtype"])


def test_identical_outcomes_are_stored_once(site):
    config = page_config(site)
    files = set(config["states"].values())
    # Arrays many files hold (the workload's prompt and output lengths, one pair per spread) are in the page
    # once, and no file repeats them.
    datas = [json.loads((site / "data" / f"{f}.json").read_text()) for f in files]
    shared = [json.dumps(a, sort_keys=True) for a in config["shared"]]
    assert shared
    held = [json.dumps(a, sort_keys=True) for d in datas for a in d["arrays"]]
    assert not set(held) & set(shared)
    refs = [set(re.findall(r'"s":\s*(\d+)', json.dumps(d["patch"]))) for d in datas]
    uses = [sum(str(i) in r for r in refs) for i in range(len(shared))]
    assert all(n > static_data.SHARED_SHARE * len(datas) for n in uses), uses
    assert len(files) < len(config["states"])  # the on-demand declared multiples share a file
    assert {p.stem for p in (site / "data").glob("*.json")} == files
    assert config["states"]["256&16.0&on-demand&1.0&pass&16.0"] == config["states"]["256&16.0&on-demand&4.0&pass&16.0"]
    assert config["states"]["256&16.0&reserve&1.0&pass&16.0"] != config["states"]["256&16.0&reserve&4.0&pass&16.0"]


@pytest.mark.parametrize("args,says", [
    (["--stops", "colour=1"], "--stops takes NAME=V1,V2"),
    (["--stops", "pool_gib=2,abc"], "--stops pool_gib: each value must be"),
    (["--stops", "max_num_seqs=64,512"], "the stops must include the starting point"),
    (["--stops", "spread=16"], "every guided step"),
    (["--jobs", "0"], "--jobs must be at least 1"),
    (["--guides", "traffic,memory"], "--guides takes a comma-separated list of traffic, prefix"),
    (["--guides", "colour"], "--guides takes"),
    (["--stops", "request_rate=4,fast"], "--stops request_rate: each value must be"),
    (["--stops", "burstiness=0.5,2"], "the stops must include the starting point: burstiness=1.0"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, says):
    out = tmp_path / "site"
    done = run_export("--out", str(out), *args)
    assert done.returncode == 2 and says in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_floats_on_a_power_of_two_grid_are_stored_as_small_integers_and_decode_bit_for_bit():
    rng = np.random.default_rng(7)
    on_grid = (np.cumsum(rng.integers(0, 300, 2000)) * 2.0**-9).astype(np.float32)  # the strips' times
    off_grid = rng.random(2000).astype(np.float32)
    gaps = np.r_[on_grid[:10], np.nan].astype(np.float32)  # a curve's gap: not a grid
    for column, as_grid in ((on_grid, True), (on_grid.astype(np.float64), True), (off_grid, False), (gaps, False),
                            (np.zeros(5, np.float32), None)):
        encoded = static_page._encode(column)  # as a patch holds it
        patch, arrays = static_data.pack({"m": {"data": encoded}})
        assert patch["m"]["data"]["type"] == "cb-array"
        got = decode(arrays[0])
        assert got.dtype == column.dtype and got.tobytes() == column.tobytes()
        assert as_grid is None or ("grid" in arrays[0]) == as_grid
    # The grid's integers take a fraction of the floats' bytes.
    plain = static_data.byte_planes(on_grid.tobytes(), 4, False)
    grid = static_data.grid_planes(on_grid.astype(np.float64), static_data.grid_exponent(on_grid.astype(np.float64)))
    assert len(grid["data"]) < 0.7 * len(plain["data"])


def test_the_grid_is_the_articles_product_and_each_held_guides_steps_with_their_one_control_neighbourhoods():
    stops = export.parse_stops([])
    article, article_reach = export.grid(stops, ())
    assert (len(article_reach), len(article)) == (4480, 2800)  # --guides none: the grid before the guides came
    computed, reach = export.grid(stops)
    assert set(article_reach) <= set(reach) and all(reach[k] == v for k, v in article_reach.items())
    defaults = ExplorableState.__new__(ExplorableState).defaults()
    expected = set()
    for spec in static_page.held_guides(static_page.HELD_GUIDES):
        around = export.neighbourhood_stops(stops, spec)
        assert set(around) == set(spec.tries) and len(spec.tries) >= 3
        for step in spec.steps:
            base = {**defaults, **step.settings}
            expected.add(export.state_key(base))
            for name, values in around.items():
                assert set(stops[name]) <= set(values)
                expected |= {export.state_key({**base, name: v}) for v in values}
    assert expected <= set(reach)
    assert set(reach) - set(article_reach) <= expected  # nothing beyond the steps' neighbourhoods
    # Keys extend the article's: the grid's URL texts, then each other control that is not at its start.
    assert "256&16.0&on-demand&4.0&pass&16.0&arrival=rate&request_rate=16.0" in computed
    assert "256&16.0&on-demand&4.0&pass&16.0&enable_prefix_caching=true&system_prompt_len=1024" in computed
    # Narrowed: one guide, fewer rates (a step's own rate stays).
    narrow, _ = export.grid(export.parse_stops(["request_rate=4,16"]), ("traffic",))
    assert not any("prefix" in k for k in narrow)
    rates = {v["request_rate"] for v in narrow.values() if v["arrival"] == "rate"}
    assert rates == {4.0, 8.0, 10.0, 16.0}
    assert export.parse_guides(None) == ("traffic", "prefix") and export.parse_guides("none") == ()
    assert export.parse_guides("prefix,traffic") == ("traffic", "prefix")
