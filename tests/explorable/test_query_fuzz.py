"""Fuzzing every link value and every control through the state layer (hypothesis).

Whatever a URL or a control sends -- out of range, the wrong type, huge, negative, NaN/inf as text, empty,
unknown names, many at once -- the page must end in a valid, runnable configuration (a trace on screen, the
standard summary), say which value it refused, and never raise. Settings the engine refuses (a pool too
small for what reserve mode must set aside) keep the last good run and say why.

The link path the served page really takes (`explorable.page.url.sync_url` on a Panel `Location`) is fuzzed
too: Panel's own query parser and `Location.sync` used to let refused values back in (blank pages).
"""
from __future__ import annotations

import math
import os
import re
from urllib.parse import urlencode

import param
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from panel.io.location import Location

from explorable.state import runs
from explorable.state.store import CONTROLS, ExplorableState
from explorable.page.url import apply_query

SUMMARY_KEYS = {
    "throughput_tok_s", "peak_batch", "mean_batch", "preemptions", "recomputed_prompt_tokens", "recomputed_tokens",
    "live_cache_fraction", "passes", "makespan_s", "finished_requests", "kv_cache_tokens", "max_concurrency",
    "trace_digest",
}
P = ExplorableState.param
NUMERIC = [n for n in CONTROLS if isinstance(P[n], param.Number)]  # Integer is a Number
SELECTORS = [n for n in CONTROLS if isinstance(P[n], param.Selector)]
BOOLEANS = [n for n in CONTROLS if isinstance(P[n], param.Boolean)]
# CB_FUZZ_EXAMPLES=5000 for a deeper search than the suite's (which stays well under 30 s on 2 cores).
FUZZ = settings(max_examples=int(os.environ.get("CB_FUZZ_EXAMPLES", "200")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# Text a link may carry: numbers in every spelling Python or JSON accepts or almost accepts, markup, paths,
# code, control characters, and sizes far past anything sensible.
NASTY = [
    "", " ", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "-Infinity", "1e999", "-1e999", "1e-999", "1e308",
    "0", "-0", "-1", "-5", "0.0", "0.5", "1", "1.0", "64", " 64 ", "64.0", "64.5", "1e3", "1_000", "1,024", "0x10",
    "0b1", "+8", "٣٢", "²", "①", "9" * 400, "9" * 5000, "true", "false", "True", "yes", "off", "None", "null",
    "[]", "[1,2]", "{}", '{"a":1}', "[[[[[[[[", "<script>alert(1)</script>", '"><img src=x onerror=alert(1)>',
    "../../etc/passwd", "/etc/passwd", "file:///etc/passwd", "__import__('os').system('id')", "{{7*7}}", "%s%n",
    "\x00", "\u202e", "\ufeff64", "🙂", "a" * 10_000, "reserve up front", "RESERVE", "per request", "Qwen3-8B",
    "h100 sxm", "TPU", "GPT-5",
]


def _choices(name: str) -> list:
    p = P[name]
    if isinstance(p, param.Boolean):
        return [True, False, "true", "false", "1", "0", "on", "no"]
    if isinstance(p, param.Selector):
        return [*p.objects, *(p.names or {}), *(str(o).upper() for o in p.objects)]
    lo, hi = p.bounds
    return [lo, hi, p.default, lo - 1, hi + 1, (lo + hi) / 2, str(lo), str(hi), f"{hi}.5", f"{lo - 0.5}"]


scalar = st.one_of(
    st.sampled_from(NASTY),
    st.sampled_from([v for n in CONTROLS for v in _choices(n)]),
    st.text(max_size=30),
    st.integers(-(10**300), 10**300),  # ints past 1e308 overflow float(): pinned separately below
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-2.0, max_value=2000.0).map(lambda x: f"{x:g}"),
    st.booleans(),
    st.none(),
)
raw_value = st.one_of(scalar, st.lists(scalar, max_size=3), st.tuples(scalar, scalar))
name = st.one_of(st.sampled_from(CONTROLS), st.text(max_size=20), st.sampled_from(["utm_source", "evil", "", "Pool_GiB"]))
query = st.dictionaries(name, raw_value, max_size=14)


# -- the oracle: what a link value should become, written independently of explorable.state.store ----------------
INVALID = object()


UNSET = ("", "none", "null", "default")  # how a link leaves an optional control (default None) unset


def expected(name: str, raw):
    if isinstance(raw, (list, tuple)):
        raw = raw[-1] if raw else ""
    p = P[name]
    v = raw.strip() if isinstance(raw, str) else raw
    if p.default is None and (v is None or (isinstance(v, str) and v.lower() in UNSET)):
        return None
    if isinstance(p, param.Boolean):
        words = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}
        if isinstance(v, bool):
            return v
        if isinstance(v, (int, float)) and v in (0, 1):
            return bool(v)
        return words.get(v.lower(), INVALID) if isinstance(v, str) else INVALID
    if isinstance(p, param.Selector):
        if not isinstance(v, str):
            return INVALID
        lookup = {str(o).lower(): o for o in p.objects} | {k.lower(): o for k, o in (p.names or {}).items()}
        return lookup.get(v.lower(), INVALID)
    if p.allow_None and (v is None or (isinstance(v, str) and v.lower() in ("", "none", "null"))):
        return None  # an optional control (the two-number form's) left empty
    if v is None or isinstance(v, bool):
        return INVALID
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return INVALID
    lo, hi = p.bounds
    if not math.isfinite(x) or not lo <= x <= hi:
        return INVALID
    if isinstance(p, param.Integer):
        return int(x) if x.is_integer() else INVALID
    return x


def assert_valid_and_runnable(state: ExplorableState) -> None:
    """The page shows a run of exactly these controls, and every control holds a value of its own kind."""
    for n in CONTROLS:
        v, p = getattr(state, n), P[n]
        if v is None and p.allow_None:  # an optional control left empty (the two-number form's)
            continue
        if isinstance(p, param.Boolean):
            assert isinstance(v, bool), (n, v)
        elif isinstance(p, param.Selector):
            assert v in p.objects, (n, v)
        elif v is None:
            assert p.allow_None and p.default is None, (n, v)
        else:
            assert not isinstance(v, bool) and isinstance(v, int if isinstance(p, param.Integer) else (int, float)), (n, v)
            assert math.isfinite(v) and p.bounds[0] <= v <= p.bounds[1], (n, v)
    assert state.run_error == "", state.run_error
    assert state.trace is not None and SUMMARY_KEYS <= set(state.summary)
    assert state.trace.config == state.run_config()
    assert runs.config_problem({**state.control_values(), **{k: float(getattr(state, k)) for k in
                                                             ("pool_gib", "declared_multiple", "spread")}}) is None


# -- link values through the state layer ------------------------------------------------------------------
@FUZZ
@given(query)
@example({"max_num_seqs": "abc", "pool_gib": "-5", "evil": "<script>"})
@example({n: "nan" for n in CONTROLS})
@example({n: "" for n in CONTROLS})
@example({"allocation": "reserve", "declared_multiple": "8", "pool_gib": "1", "spread": "32"})
@example({"allocation": "reserve up front", "declared_multiple": 8.0, "pool_gib": 1, "unit": "per request",
          "max_num_seqs": 1024, "spread": 32})
@example({"max_num_seqs": ["8", "64"], "pool_gib": [], "spread": ("1", "x")})
def test_any_link_leaves_a_valid_runnable_state_and_names_what_it_refused(q):
    state = ExplorableState()
    notices = apply_query(state, q)  # never raises
    assert_valid_and_runnable(state)
    assert state.notices == notices
    assert all(len(n) < 600 for n in notices), "a notice must not echo a huge value"
    reverted = {name for text in notices if "cannot run" in text
                for name in re.search(r"using the defaults? for (.+)\.$", text).group(1).split(", ")}
    for n in CONTROLS:
        if n not in q:
            continue
        want = expected(n, q[n])
        if want is INVALID:
            assert getattr(state, n) == P[n].default, (n, q[n])
            assert any(n in text and "default" in text for text in notices), (n, q[n], notices)
        elif n in reverted:  # each value fine, the mix cannot run: the engine named this one
            assert getattr(state, n) == P[n].default
        else:
            assert getattr(state, n) == want, (n, q[n], getattr(state, n))


@FUZZ
@given(st.dictionaries(st.sampled_from(CONTROLS), st.sampled_from([v for v in NASTY if v != "9" * 400]),
                      min_size=1, max_size=10))
def test_links_as_panel_parses_them_leave_a_valid_state(q):
    """The same through Panel's own parser of the address bar (numbers and JSON arrive typed)."""
    try:
        parsed = Location(search="?" + urlencode(q)).query_params
        assert not any(isinstance(v, int) and abs(v) > 1e308 for v in parsed.values())
    except ValueError:  # Panel's parse_query chokes on '²' and friends: see the served-path test below
        return
    state = ExplorableState()
    apply_query(state, parsed)
    assert_valid_and_runnable(state)


def test_a_huge_query_is_handled_quickly_and_says_so_briefly():
    state = ExplorableState()
    q = {n: "9" * 5000 for n in CONTROLS} | {f"x{i}": "y" * 100 for i in range(2000)}
    notices = apply_query(state, q)
    assert_valid_and_runnable(state)
    assert len(notices) == len(CONTROLS) and all(len(n) < 300 for n in notices)


@pytest.mark.parametrize("control", NUMERIC)
def test_an_integer_past_float_range_is_refused_with_a_notice(control):
    state = ExplorableState()
    notices = apply_query(state, {control: 10**400})
    assert_valid_and_runnable(state)
    assert len(notices) == 1 and control in notices[0]


# -- the link path of the served page: Location.query_params -> apply_query -> Location.sync ---------------
def served_link(search: str) -> ExplorableState:
    """A fresh page's state after explorable.page.url.sync_url has read this address-bar query."""
    import panel as pn

    from explorable.page.url import sync_url

    state = ExplorableState()
    saved, pn.state._location = pn.state._location, Location(search=search)  # what pn.state.location returns
    try:
        sync_url(state)
    finally:
        pn.state._location = saved
    return state


@FUZZ
@given(st.dictionaries(st.sampled_from([*CONTROLS, "utm_source"]), st.sampled_from(NASTY + [
    v for n in CONTROLS for v in map(str, _choices(n))]), max_size=6))
@example({"max_num_seqs": "true"})
@example({"pool_gib": "true"})
@example({"allocation": "reserve", "declared_multiple": "8", "pool_gib": "1"})
@example({"utm_source": "²"})
def test_the_served_link_path_leaves_a_valid_runnable_state(q):
    assert_valid_and_runnable(served_link("?" + urlencode(q)))


# -- direct control changes: what widgets, stop buttons, guided steps and reset do ------------------------
def _valid(name: str):
    p = P[name]
    if isinstance(p, param.Boolean):
        return st.booleans()
    if isinstance(p, param.Selector):
        return st.sampled_from(list(p.objects))
    lo, hi = p.bounds
    edges = st.sampled_from([lo, hi, p.default])
    if isinstance(p, param.Integer):
        return st.one_of(edges, st.integers(lo, hi))
    # Halves keep the runs few; clamped, since a range may start below 0.5 (burstiness, the request rate).
    return st.one_of(edges, st.floats(lo, hi, allow_nan=False).map(lambda x: min(max(round(x * 2) / 2, lo), hi)))


update = st.fixed_dictionaries({}, optional={n: _valid(n) for n in CONTROLS})
# Combinations the engine refuses although each value is in range.
REFUSED = [
    {"allocation": "reserve", "declared_multiple": 8.0, "pool_gib": 1.0},
    {"allocation": "reserve", "declared_multiple": 8.0, "pool_gib": 1.0, "spread": 32.0, "max_num_seqs": 1024,
     "unit": "request"},
    {"allocation": "reserve", "declared_multiple": 8.0, "pool_gib": 1.0, "model": "Llama-3.1-8B", "spread": 32.0},
]


@FUZZ
@given(st.lists(st.one_of(update, st.sampled_from(REFUSED)), min_size=1, max_size=5))
def test_any_sequence_of_control_changes_keeps_a_good_run_on_screen(changes):
    state = ExplorableState()
    for change in changes:
        good_trace, good_summary = state.trace, state.summary
        state.param.update(**change)  # never raises: the engine's refusal becomes run_error
        assert state.trace is not None and SUMMARY_KEYS <= set(state.summary)
        if state.run_error:
            assert state.trace is good_trace and state.summary == good_summary
        else:
            assert state.trace.config == state.run_config()
    state.reset()
    assert state.run_error == "" and state.control_values() == state.defaults()


@pytest.mark.parametrize("refused", REFUSED)
def test_a_refused_setting_keeps_the_run_and_the_next_good_one_clears_the_error(refused):
    state = ExplorableState()
    good = state.trace
    state.param.update(**refused)
    assert "pool_gib must be at least" in state.run_error
    assert state.trace is good and state.summary == good.summary()
    state.pool_gib = 80.0
    assert_valid_and_runnable(state)


bad_direct = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1, 0, 10**9, -(10**9), 1e308, "64", "", None, [], {}, object()]),
    st.text(max_size=10), st.floats(allow_nan=True), st.integers(),
)


@FUZZ
@given(st.sampled_from(CONTROLS), bad_direct)
@example("output_p50", 1)  # a lone p50 (found by this test): unset with a notice, not a page that cannot run
@example("prompt_p99", 5)
def test_a_wrong_value_set_directly_is_refused_by_param_and_changes_nothing(control, value):
    """A crafted websocket message reaches the state as a direct set; param refuses what is out of bounds."""
    state = ExplorableState()
    before = (state.control_values(), state.trace, state.run_error)
    try:
        setattr(state, control, value)
    except (ValueError, TypeError):
        assert (state.control_values(), state.trace, state.run_error) == before
        return
    # Accepted: it must have been a valid value of the control, and the page runs it.
    assert_valid_and_runnable(state)


@pytest.mark.parametrize("half", ["output_p50", "output_p99", "prompt_p50", "prompt_p99"])
def test_a_quantile_set_without_its_partner_is_unset_with_a_notice(half):
    state = ExplorableState()
    shown = state.trace
    setattr(state, half, 700)
    assert getattr(state, half) is None and state.run_error == "" and state.trace is shown
    assert state.notices == [f"{half} came without its partner (a p50 and a p99 go together); left unset."]
    state.param.update(output_p50=300, output_p99=900)  # the pair together runs
    assert state.run_error == "" and state.trace.config.output_p50 == 300


@pytest.mark.parametrize("control", [n for n in NUMERIC if P[n].bounds[0] <= 1 <= P[n].bounds[1]
                                     and not n.endswith(("_p50", "_p99"))])  # (alone, those are unset: above)
def test_param_takes_true_as_the_number_1_and_the_engine_then_refuses_it(control):
    """Documents why a bool must never reach a numeric control (the served-path test above)."""
    state = ExplorableState()
    good = state.trace
    state.param.update(**{control: True})
    assert getattr(state, control) is True
    if control == "max_num_seqs":  # the engine's integer check refuses a bool
        assert "max_num_seqs must be an integer" in state.run_error and state.trace is good


# -- links as course platforms write them: a second '?', several '#', odd hosts ------------------------------
@pytest.mark.parametrize("search, seqs", [("?max_num_seqs=64?utm_source=lms", 64), ("??", 256),
                                          ("?utm_source=lms?max_num_seqs=32", 32)])
def test_a_second_question_mark_is_read_as_an_ampersand_with_a_notice(search, seqs):
    from explorable.page.url import SECOND_QUESTION_MARK_NOTICE

    state = served_link(search)
    assert_valid_and_runnable(state)
    assert state.max_num_seqs == seqs
    assert SECOND_QUESTION_MARK_NOTICE in state.notices


def test_a_link_value_between_steps_is_snapped_with_a_notice():
    state = served_link("?spread=1.000000123&pool_gib=7.3&max_num_batched_tokens=8200")
    assert_valid_and_runnable(state)
    assert (state.spread, state.pool_gib, state.max_num_batched_tokens) == (1.0, 7.5, 8192)
    assert sum("moves in steps of" in n for n in state.notices) == 3


@FUZZ
@given(st.text(alphabet="?#&=/:%abc019[]", max_size=40), st.sampled_from([None, "localhost:5006", "[::1]:5006",
                                                                         "a:b:c", "example.edu"]))
def test_panel_reads_any_request_uri_without_raising(uri, host):
    from explorable.patches.odd_links import tolerant_location_params

    params = tolerant_location_params("http", host, "/app" + uri)
    assert params.get("pathname", "/app").startswith("/app")
    assert params.get("search", "?").count("?") == 1
