"""The prefix-caching views without a browser: the steps' claims against the engine, the readout, the lanes'
"from cache" part, the URL and the log."""
import numpy as np
import pytest

from engine import Event, RunConfig, simulate
from explorable.views import palette
from explorable.views.guide import PREFIX_STEPS, Guide
from explorable.views.lanes import lane_segments, legend_html, request_details
from explorable.views.logs_view import LogView
from explorable.views.readouts import Readouts
from explorable.state.store import ExplorableState
from explorable.page.url import apply_query, query_values


def step_config(title: str, **changes) -> RunConfig:
    step = next(s for s in PREFIX_STEPS if s.title == title)
    return RunConfig(**{**step.settings, **changes})


def summary(cfg: RunConfig) -> dict:
    return simulate(cfg).summary()


def test_caching_refunds_about_two_thirds_of_the_default_runs_recompute():
    on = summary(step_config("Caching refunds an eviction"))
    off = summary(step_config("Caching refunds an eviction", enable_prefix_caching=False))
    assert 38_000 < off["recomputed_prompt_tokens"] < 42_000  # "about 40,000"
    assert 11_000 < on["recomputed_prompt_tokens"] < 13_000  # "about 12,000"
    assert off["recomputed_prompt_tokens"] > 3 * on["recomputed_prompt_tokens"] * 0.95  # "a third"
    assert on["prefix_cache_readmission_hit_tokens"] == on["prefix_cache_hit_tokens"] > 0  # all of it a refund


def test_at_the_memory_wall_the_refund_wins_but_throughput_hardly_moves():
    on = summary(step_config("The race at the memory wall"))
    off = summary(step_config("The race at the memory wall", enable_prefix_caching=False))
    assert 55_000 < off["recomputed_prompt_tokens"] < 59_000 and on["recomputed_prompt_tokens"] < 10_000
    assert on["preemptions"] > 0 and abs(on["throughput_tok_s"] / off["throughput_tok_s"] - 1) < 0.05


def test_a_shared_system_prompt_fills_every_slot_only_with_caching():
    on = summary(step_config("A shared system prompt"))
    off = summary(step_config("A shared system prompt", enable_prefix_caching=False))
    assert off["peak_batch"] == 88 and on["peak_batch"] == 256 and on["preemptions"] == 0
    assert 1.6 < on["throughput_tok_s"] / off["throughput_tok_s"] < 1.9  # "about three quarters" more
    assert 1.6 < on["throughput_tok_s"] / summary(RunConfig(enable_prefix_caching=True))["throughput_tok_s"] < 1.9


def test_the_cache_readout_shows_only_with_caching_and_follows_the_steps():
    state = ExplorableState()
    view = Readouts(state=state)
    assert 'data-readout="prefix_cache_hit_tokens"' not in view.pane.object
    guide = Guide(state=state, steps=PREFIX_STEPS, css="prefix-step")
    guide.go(2)
    hits = state.summary["prefix_cache_hit_tokens"]
    assert hits > 0 and f'data-value="{float(hits):.6g}">{hits:,}<' in view.pane.object
    assert f"hit rate {100 * state.summary['prefix_cache_hit_rate']:.1f}%" in view.pane.object
    assert 'data-step="3"' in guide.text.object


def test_lanes_draw_the_cached_part_of_a_readmission_and_shrink_the_recompute():
    cfg = step_config("Caching refunds an eviction")
    on, off = simulate(cfg), simulate(cfg.replace(enable_prefix_caching=False))
    seg_on, seg_off = lane_segments(on), lane_segments(off)
    width = lambda seg, state: float((seg["right"] - seg["left"])[seg["state"] == state].sum())  # noqa: E731
    assert width(seg_off, palette.CACHED) == 0 and width(seg_on, palette.CACHED) > 0
    assert width(seg_on, palette.LOST) < width(seg_off, palette.LOST)
    # Every request served from cache has a light-teal stretch, and only those.
    served = set(on.event_request[on.event_cached > 0].tolist())
    assert set(seg_on["y"][seg_on["state"] == palette.CACHED].tolist()) == served
    r = next(iter(served))
    cached = int(on.event_cached[(on.event_request == r) & (on.event_kind == Event.RESUME)].sum())
    assert request_details(on)["rows"]["cached_resume"][r] == cached
    assert "from cache" in legend_html(True) and "from cache" not in legend_html(False)


def test_a_system_prompt_run_draws_cached_prefill_at_admission():
    trace = simulate(step_config("A shared system prompt"))
    seg = lane_segments(trace)
    cached_rows = np.unique(seg["y"][seg["state"] == palette.CACHED])
    assert len(cached_rows) >= 250  # all but the first requests find the system prompt cached
    assert request_details(trace)["rows"]["cached_admit"][255] == 1024


def test_caching_controls_travel_in_the_url_and_the_log_names_the_flag():
    state = ExplorableState()
    notices = apply_query(state, {"enable_prefix_caching": "true", "system_prompt_len": "512", "turns": "99"})
    assert state.config.enable_prefix_caching and state.config.system_prompt_len == 512 and state.config.turns == 1
    assert len(notices) == 1 and "turns" in notices[0]
    q = query_values(state)
    assert q["enable_prefix_caching"] == "true" and q["system_prompt_len"] == "512"
    log = LogView(state=state)
    assert "Prefix cache hit rate" in log.pane.object and "--no-enable-prefix-caching" not in log.pane.object
    state.enable_prefix_caching = False
    # Off, the command says so, and a comment says why the flag is there (vLLM V1 caches by default).
    assert log.pane.object.count("--no-enable-prefix-caching") >= 2
    assert "Prefix cache hit rate" not in log.pane.object


@pytest.mark.parametrize("title", [s.title for s in PREFIX_STEPS])
def test_every_prefix_step_runs(title):
    assert summary(step_config(title))["finished_requests"] == 256


def test_the_static_build_without_its_guides_names_the_caching_controls_fixed_and_leaves_the_steps_out():
    from explorable.static_site import static_page
    page = static_page.build(guides=())  # --guides none: the article's grid alone
    c = page.app.views["controls"]
    drawn = set(page.doc.models)
    for name in ("enable_prefix_caching", "system_prompt_len", "turns", "arrival", "model"):  # named, not drawn
        assert not any(m in drawn for m in getattr(c, name)._models.values() for m in m[:1]), name
    assert "prefix caching (vLLM V1's default): off" in c.advanced_note and "conversation turns: 1" in c.advanced_note
    assert not page.app.prefix and page.app.state.enable_prefix_caching is False
    assert {"enable_prefix_caching", "system_prompt_len", "turns"} <= set(static_page.FIXED)


def test_the_default_static_build_draws_the_caching_controls_and_holds_the_prefix_steps():
    from explorable.static_site import static_page
    page = static_page.build()
    c = page.app.views["controls"]
    drawn = set(page.doc.models)
    for name in ("enable_prefix_caching", "system_prompt_len", "turns", "arrival"):  # drawn now
        assert any(m in drawn for m in getattr(c, name)._models.values() for m in m[:1]), name
    assert not any(m in drawn for m in c.model._models.values() for m in m[:1])  # still fixed: named only
    assert page.app.prefix and page.app.traffic
    assert "prefix_guide.steps" in page.ui_models and "traffic_guide.steps" in page.ui_models
    assert "conversation turns" not in c.advanced_note and "Qwen3-8B" in c.advanced_note
