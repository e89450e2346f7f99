"""The state layer without a browser: controls in, the engine's run out, bad link values refused politely."""
from __future__ import annotations

import math

import pytest
from panel.io.location import Location

from engine import RunConfig, simulate
from explorable.state.store import CONTROLS, ExplorableState
from explorable.page.url import apply_query, parse_control


@pytest.fixture
def state() -> ExplorableState:
    return ExplorableState()


def test_defaults_are_the_articles_starting_point_and_run_as_the_engine_says(state):
    assert state.run_config() == RunConfig()
    assert state.summary == simulate(RunConfig()).summary()
    assert 80 <= state.summary["peak_batch"] <= 89  # "the largest batch ... was in the 80s"
    assert state.previous_summary is None and state.run_error == ""


def test_cap_at_64_is_faster_and_preempts_nobody(state):
    before = state.summary
    state.max_num_seqs = 64
    assert state.summary == simulate(RunConfig(max_num_seqs=64)).summary()
    assert state.summary["throughput_tok_s"] > before["throughput_tok_s"]
    assert state.summary["preemptions"] == 0
    assert state.previous_summary == before  # the readouts' deltas compare with the setting before


def test_past_the_memory_wall_the_cap_is_inert(state):
    state.max_num_seqs = 512
    digest_512 = state.summary["trace_digest"]
    state.max_num_seqs = 256
    assert state.summary["trace_digest"] == digest_512


def test_one_update_runs_once_for_several_controls(state):
    seen = []
    state.param.watch(lambda e: seen.append(e.new), "trace")
    state.param.update(max_num_seqs=64, unit="request", allocation="reserve")
    assert len(seen) == 1
    assert seen[0].config.unit == "request" and seen[0].config.allocation == "reserve"


def test_a_setting_the_engine_refuses_keeps_the_last_run_and_says_why(state):
    state.allocation = "reserve"
    good = state.trace
    state.param.update(declared_multiple=8.0, pool_gib=1.0)
    assert "pool_gib must be at least" in state.run_error
    assert state.trace is good  # still on screen
    state.pool_gib = 4.0
    assert state.run_error == "" and state.trace.config.pool_gib == 4.0


def test_reset_returns_every_control_to_its_default(state):
    state.param.update(max_num_seqs=8, pool_gib=2.0, spread=1.0, model="Llama-3.1-8B")
    state.reset()
    assert state.control_values() == state.defaults()
    assert state.summary["trace_digest"] == simulate(RunConfig()).summary()["trace_digest"]


def test_every_control_maps_onto_a_runconfig_field():
    fields = set(RunConfig.__dataclass_fields__)
    assert set(CONTROLS) <= fields


# -- link values ------------------------------------------------------------------------------------
def test_a_link_sets_the_controls(state):
    notices = apply_query(state, {"max_num_seqs": "64", "pool_gib": "8", "unit": "request",
                                  "allocation": "reserve up front", "scheduler_reserve_full_isl": "true"})
    assert notices == []
    assert (state.max_num_seqs, state.pool_gib, state.unit, state.allocation) == (64, 8.0, "request", "reserve")
    assert state.scheduler_reserve_full_isl is True
    assert state.trace.config.max_num_seqs == 64


def test_values_as_panels_location_parses_them_are_accepted(state):
    query = Location(search="?max_num_seqs=64&pool_gib=2.5&spread=1&scheduler_reserve_full_isl=false"
                            "&gpu=H100+SXM").query_params
    assert apply_query(state, query) == []
    assert (state.max_num_seqs, state.pool_gib, state.spread, state.gpu) == (64, 2.5, 1.0, "H100 SXM")


@pytest.mark.parametrize("name, raw", [
    ("max_num_seqs", "abc"), ("max_num_seqs", "0"), ("max_num_seqs", "2000"), ("max_num_seqs", "64.5"),
    ("max_num_seqs", ""), ("pool_gib", "NaN"), ("pool_gib", "inf"), ("pool_gib", "-3"), ("pool_gib", "1e999"),
    ("allocation", "sometimes"), ("unit", "<script>"), ("spread", "100"), ("declared_multiple", "0.5"),
    ("model", "GPT-5"), ("gpu", "TPU"), ("scheduler_reserve_full_isl", "maybe"), ("max_num_batched_tokens", "7"),
    ("max_num_seqs", True), ("pool_gib", None), ("spread", ["1", "x"]),
])
def test_a_bad_link_value_falls_back_to_the_default_with_a_notice(state, name, raw):
    notices = apply_query(state, {name: raw, "max_num_seqs" if name != "max_num_seqs" else "spread": "32"})
    assert getattr(state, name) == state.param[name].default
    assert len(notices) == 1 and name in notices[0] and "default" in notices[0]
    assert state.notices == notices
    assert state.trace is not None and state.run_error == ""


def test_good_values_in_a_link_survive_a_bad_neighbour(state):
    apply_query(state, {"max_num_seqs": "garbage", "pool_gib": "8"})
    assert state.max_num_seqs == 256 and state.pool_gib == 8.0


def test_a_mix_that_cannot_run_falls_back_to_what_the_engine_names(state):
    notices = apply_query(state, {"allocation": "reserve", "declared_multiple": "8", "pool_gib": "1"})
    assert state.run_error == ""
    assert state.pool_gib == 16.0  # the engine's message names pool_gib
    assert state.allocation == "reserve" and state.declared_multiple == 8.0
    assert any("cannot run" in n for n in notices)


def test_the_token_budget_may_equal_the_cap_but_not_fall_below_its_range(state):
    assert apply_query(state, {"max_num_seqs": "1024", "max_num_batched_tokens": "1024"}) == []
    assert state.run_error == "" and state.trace.config.max_num_batched_tokens == 1024
    fresh = ExplorableState()
    assert len(apply_query(fresh, {"max_num_batched_tokens": "1000"})) == 1
    assert fresh.max_num_batched_tokens == 8192


def test_unknown_names_are_ignored_and_repeated_names_take_the_last(state):
    assert apply_query(state, {"utm_source": "course", "max_num_seqs": ["8", "64"]}) == []
    assert state.max_num_seqs == 64


@pytest.mark.parametrize("name", CONTROLS)
def test_parse_control_round_trips_the_default(state, name):
    default = state.param[name].default
    assert parse_control(state, name, str(default)) == default


def test_parse_control_refuses_non_finite_numbers(state):
    for raw in (math.nan, math.inf, "nan", "Infinity"):
        with pytest.raises(ValueError):
            parse_control(state, "pool_gib", raw)


@pytest.mark.parametrize("async_on, gate", [(True, True), (False, True), (True, False)])
def test_the_vllm_version_and_its_overridden_settings_go_through_a_link_and_back(async_on, gate):
    from explorable.page.url import apply_query, query_values
    state = ExplorableState()
    state.vllm_version = "0.34"  # its defaults: async scheduling and the full-prompt gate
    assert state.async_scheduling and state.scheduler_reserve_full_isl
    state.param.update(async_scheduling=async_on, scheduler_reserve_full_isl=gate)
    query = query_values(state)
    assert query["vllm_version"] == "0.34"
    opened = ExplorableState()
    apply_query(opened, query)  # the version first, then the link's own settings
    assert (opened.vllm_version, opened.async_scheduling, opened.scheduler_reserve_full_isl) == ("0.34", async_on, gate)
    summary = opened.trace.summary() if opened.trace is not None else None
    cfg = opened.config
    assert (cfg.vllm_version, cfg.async_scheduling, cfg.scheduler_reserve_full_isl) == ("0.34", async_on, gate)
    assert summary is None or summary["async_scheduling"] == async_on
