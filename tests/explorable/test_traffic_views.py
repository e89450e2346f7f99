"""The Traffic views without a browser: lanes under traffic, the latency readouts, the steps' claims, the URL."""
import numpy as np
import pytest

from engine import Event, RunConfig, simulate
from engine.latency import good_requests
from explorable.views.guide import TRAFFIC_STEPS, Guide
from explorable.views.lanes import lane_segments, request_details
from explorable.views.readouts import Readouts
from explorable.state.store import ExplorableState
from explorable.views.traffic_curve import rate_curve
from explorable.page.url import apply_query, query_values
from engine.rate_sweep import NUM_POINTS
from explorable.views import palette


def step_config(title: str) -> RunConfig:
    step = next(s for s in TRAFFIC_STEPS if s.title == title)
    return RunConfig(**step.settings)


def test_a_lane_is_blank_before_its_request_arrives_and_grey_until_admitted():
    trace = simulate(RunConfig(arrival="rate", request_rate=16.0))
    seg = lane_segments(trace)
    arrival = trace.arrival_s
    first_left = np.full(len(arrival), np.inf)
    np.minimum.at(first_left, seg["y"].astype(int), seg["left"].astype(np.float64))
    assert (first_left >= arrival.astype(np.float32) - 1e-6).all()
    admit = trace.events_of(Event.ADMIT)
    queued = admit[trace.pass_start[admit[:, 0]] > arrival[admit[:, 1]] + 1e-3, 1]
    assert len(queued) > 0  # past the knee, requests queue: those lanes open grey at their arrival
    grey = seg["state"] == palette.WAITING
    for r in queued[:20]:
        mine = grey & (seg["y"] == r)
        assert np.isclose(seg["left"][mine].min(), arrival[r], atol=1e-4)


def test_a_preemption_is_a_stall_its_users_worst_itl_shows():
    trace = simulate(step_config("A preemption is a stall"))
    t = trace.timing()
    evicted = np.flatnonzero(trace.preemptions_per_request > 0)
    assert len(evicted) > 0
    # Evicted after its first token, a request waits (grey) and recomputes before its next one: its worst gap
    # is far beyond a decode pass, and beyond the worst gap of any request never evicted.
    first = dict(trace.events_of(Event.FIRST_TOKEN)[:, [1, 0]].tolist())
    started = sorted({r for p, r, _ in trace.events_of(Event.PREEMPT).tolist() if p > first[r]})
    assert started
    never = np.setdiff1d(np.arange(trace.workload.num_requests), evicted)
    assert np.nanmax(t.worst_itl[started]) > 1.0
    assert np.nanmax(t.worst_itl[started]) > 5 * np.nanmax(t.worst_itl[never])
    rows = request_details(trace)["rows"]
    r = started[0]
    assert rows["itl"][r] == 10 * round(t.worst_itl[r] * 1e3)  # tenths of a ms, shown to the ms from 0.1 s
    assert rows["arrival"][r] == round(t.arrival[r] * 100)


def test_the_steps_under_traffic_say_what_the_engine_does():
    knee_low = simulate(step_config("Traffic arrives")).summary()
    knee = simulate(step_config("Past the knee")).summary()
    assert knee_low["ttft_ms_p50"] < 100 and knee_low["peak_batch"] < 24
    assert knee["ttft_ms_p99"] > 10 * knee_low["ttft_ms_p99"] and knee["request_throughput"] < 12.5
    assert knee_low["tpot_ms_p50"] < knee["tpot_ms_p50"] < 4 * knee_low["tpot_ms_p50"]  # TPOT rises far less
    capped = simulate(step_config("A cap buys smooth tokens")).summary()
    uncapped = simulate(step_config("A cap buys smooth tokens").replace(max_num_seqs=256)).summary()
    assert capped["tpot_ms_p50"] < uncapped["tpot_ms_p50"] and capped["ttft_ms_p99"] > 10_000 > 10 * uncapped[
        "ttft_ms_p99"]
    small = simulate(step_config("Smaller chunks, steadier streams")).summary()
    large = simulate(step_config("Smaller chunks, steadier streams").replace(max_num_batched_tokens=8192)).summary()
    assert small["itl_ms_p99"] < 0.7 * large["itl_ms_p99"] and small["ttft_ms_p50"] >= large["ttft_ms_p50"]
    assert large["itl_ms_p99"] > 4 * large["itl_ms_p50"]  # decodes waiting behind a whole prompt: the tail
    assert simulate(step_config("A preemption is a stall")).summary()["preemptions"] > 0


def test_latency_readouts_appear_with_traffic_and_goodput_follows_the_targets():
    state = ExplorableState()
    view = Readouts(state=state)
    assert not view.traffic.visible
    guide = Guide(state=state, steps=TRAFFIC_STEPS, css="traffic-step")
    guide.go(1)
    assert view.traffic.visible and 'data-readout="ttft_ms_p99"' in view.traffic.object
    state.param.update(slo_ttft_ms=500.0, slo_tpot_ms=30.0)
    t = state.trace.timing()
    good = good_requests(t, {"ttft": 500.0, "tpot": 30.0}).sum() / state.trace.makespan_s
    assert f'data-value="{good:.6g}"' in view.traffic.object
    assert 'data-step="2"' in guide.text.object and "Past the knee" in guide.text.object


def test_traffic_and_slo_targets_travel_in_the_url():
    state = ExplorableState()
    notices = apply_query(state, {"arrival": "rate", "request_rate": "12", "slo_ttft_ms": "250",
                                  "burstiness": "0.5", "slo_tpot_ms": "nope"})
    assert state.config.arrival == "rate" and state.config.request_rate == 12.0 and state.config.burstiness == 0.5
    assert state.slo_ttft_ms == 250.0 and state.slo_tpot_ms == state.param.slo_tpot_ms.default
    assert len(notices) == 1 and "slo_tpot_ms" in notices[0]
    q = query_values(state)
    assert q["arrival"] == "rate" and float(q["request_rate"]) == 12.0 and float(q["slo_ttft_ms"]) == 250.0


def test_the_rate_curve_has_its_twelve_points_and_ignores_the_rate_it_marks():
    a = rate_curve(RunConfig(arrival="rate", request_rate=3.0, requests=96))
    b = rate_curve(RunConfig(request_rate=20.0, requests=96))
    assert a is b and len(a["rate"]) == NUM_POINTS
    assert np.all(np.diff(a["rate"]) > 0) and a["ttft"][-1] > a["ttft"][0]


@pytest.mark.parametrize("title", [s.title for s in TRAFFIC_STEPS])
def test_every_traffic_step_runs(title):
    assert simulate(step_config(title)).summary()["finished_requests"] == 256


@pytest.mark.parametrize("on_projector", [False, True])
def test_the_rate_curve_is_built_when_traffic_first_arrives(on_projector):
    from bokeh.models import Axis

    from explorable.views import projector
    from explorable.page.layout import ExplorableApp

    state = ExplorableState()
    curve = ExplorableApp(state=state, projector=on_projector).views["traffic_curve"]
    assert not curve.built and not curve.pane.visible and not curve.pane.objects  # an all-at-once page pays nothing
    state.param.update(slo_ttft_ms=500.0)  # a target moved before any traffic: nothing to draw it on yet
    assert not curve.built
    apply_query(state, {"arrival": "rate", "request_rate": "12"})
    curve.refresh()  # as the page's next tick does
    assert curve.built and curve.pane.visible and len(curve.source.data["rate"]) == NUM_POINTS
    assert curve.served_marker.location == 12.0
    sizes = [float(str(getattr(a, p)).rstrip("px")) for fig in (curve.served_fig, curve.latency_fig)
             for a in fig.select(type=Axis) for p in ("major_label_text_font_size", "axis_label_text_font_size")]
    assert (min(sizes) >= projector.TEXT_PX) is on_projector
    apply_query(state, {"arrival": "all-at-once"})
    curve.refresh()
    assert not curve.pane.visible and curve.built  # hidden again, kept for the next time
