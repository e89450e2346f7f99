"""The live executor obeys the simulator's schedule exactly: same digest, same passes, same preemptions."""
import threading

import numpy as np
import pytest

pytest.importorskip("torch")

from engine import simulate  # noqa: E402
from engine.live.errors import LiveCancelled  # noqa: E402
from engine.live.executor import run_live  # noqa: E402
from tests.live.helpers import tight_config  # noqa: E402

CONFIGS = {
    "preemption_heavy": dict(num_gpu_blocks_override=12, max_num_seqs=8),
    "chunked_prefill_small_budget": dict(max_num_batched_tokens=16, max_num_seqs=4, num_gpu_blocks_override=20),
    "reserve_up_front": dict(allocation="reserve", declared_multiple=1.5, num_gpu_blocks_override=24),
    "static_batching": dict(unit="request", num_gpu_blocks_override=40),
    "full_prompt_admission_gate": dict(scheduler_reserve_full_isl=True),
    # The batch queue's order: pass p + 1 runs on p's sampled token before p's output is processed.
    "async_scheduling_preempting": dict(async_scheduling=True, num_gpu_blocks_override=12, max_num_seqs=8),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_live_run_reproduces_the_simulator_schedule(name):
    cfg = tight_config(**CONFIGS[name])
    sim = simulate(cfg)
    live = run_live(cfg, model_preset="tiny", device="cpu")
    assert live.measured and not sim.measured
    assert live.summary()["trace_digest"] == sim.summary()["trace_digest"]
    assert live.n_seqs.tolist() == sim.n_seqs.tolist()
    assert live.n_tokens.tolist() == sim.n_tokens.tolist()
    assert live.preempted_lists() == sim.preempted_lists()
    np.testing.assert_array_equal(live.passes, sim.passes)
    np.testing.assert_array_equal(live.requests, sim.requests)
    assert live.summary()["finished_requests"] == cfg.build_workload().num_requests


def test_preemption_heavy_config_really_preempts_and_recomputes():
    live = run_live(tight_config(**CONFIGS["preemption_heavy"]), model_preset="tiny", device="cpu")
    assert live.summary()["preemptions"] >= 3
    assert live.summary()["recomputed_tokens"] > 0


def test_every_request_generates_exactly_its_workload_output_length():
    cfg = tight_config()
    live = run_live(cfg, model_preset="tiny", device="cpu")
    assert live.output_tokens == int(cfg.build_workload().output_len.sum())
    np.testing.assert_array_equal(live.generated_per_request, cfg.build_workload().output_len)


def test_live_trace_carries_measured_and_predicted_figures():
    cfg = tight_config()
    live = run_live(cfg, model_preset="tiny", device="cpu")
    stats, passes = live.live, live.live.passes
    assert stats.measured_tok_s > 0 and stats.predicted_tok_s > 0
    assert len(passes.gpu_ms) == live.num_passes == len(passes.pass_bytes) == len(passes.pass_flops)
    np.testing.assert_allclose(live.pass_duration, passes.gpu_ms / 1e3)
    assert stats.attention == "gather + SDPA" and stats.cuda_graph_passes == 0


def test_default_model_with_tiny_live_shapes_keeps_the_pool_block_count():
    # The run's model (Qwen3-8B) sizes the pool in blocks; the tiny preset only shapes the tensors.
    cfg = tight_config(num_gpu_blocks_override=None, pool_gib=0.05)
    assert cfg.num_gpu_blocks == 22
    live = run_live(cfg, model_preset="tiny", device="cpu")
    assert live.summary()["trace_digest"] == simulate(cfg).summary()["trace_digest"]


def test_progress_reports_pass_index_and_finished_requests():
    calls = []
    cfg = tight_config()
    run_live(cfg, model_preset="tiny", device="cpu", progress=lambda *a: calls.append(a))
    assert [c[0] for c in calls] == list(range(len(calls)))
    assert all(c[2] == 12 for c in calls) and calls[-1][1] == 12
    assert [c[1] for c in calls] == sorted(c[1] for c in calls)


def test_a_set_cancel_event_stops_the_run_between_passes():
    cancel = threading.Event()
    calls = []

    def progress(index, finished, total):
        calls.append(index)
        if index == 3:
            cancel.set()

    with pytest.raises(LiveCancelled, match="after 4 passes"):
        run_live(tight_config(), model_preset="tiny", device="cpu", progress=progress, cancel=cancel)
    assert calls == [0, 1, 2, 3]


def test_triton_kernels_that_fail_on_this_gpu_fall_back_to_torch_ops(monkeypatch):
    # A Triton compile or launch failure (an unmet driver, say) must cost speed, not the run.
    import dataclasses

    import torch

    from engine.live import backend, executor
    from engine.live.runner import ModelRunner
    from engine.presets import MODELS

    real_init = ModelRunner.__init__

    def init(self, *args, kernels, **kwargs):
        if kernels.triton:
            raise RuntimeError("PTX .version 8.7 does not support .target sm_90a\nmore detail")
        real_init(self, *args, kernels=kernels, **kwargs)

    monkeypatch.setattr(ModelRunner, "__init__", init)
    monkeypatch.setattr(backend, "choose_kernels", lambda device: dataclasses.replace(backend.TORCH, triton=True))
    runner, why = executor._start(torch, tight_config(), MODELS["tiny"], torch.device("cpu"), torch.float32, None,
                                  True, ["starting"])
    assert runner.kernels is backend.TORCH and not runner.graphs
    assert why.startswith("Triton kernels failed here (RuntimeError: PTX .version 8.7") and "more detail" not in why



def test_a_live_run_honours_arrivals_on_its_clock_and_waits_out_idle_gaps():
    import time

    from engine import Event, Workload

    base = tight_config()
    wl = base.build_workload()
    arrival = np.array([0.0, 0.0, 0.0, 0.0, 0.05, 0.05, 0.1, 0.1, 0.4, 0.4, 0.4, 0.8])
    cfg = base.replace(workload=Workload(wl.prompt_len, wl.output_len, arrival), arrival="workload")
    t0 = time.perf_counter()
    live = run_live(cfg, model_preset="tiny", device="cpu")
    wall = time.perf_counter() - t0
    assert live.measured and live.summary()["finished_requests"] == 12
    admit = live.events_of(Event.ADMIT)
    assert (live.pass_start[admit[:, 0]] >= arrival[admit[:, 1]]).all()  # nobody ran before it arrived
    last = admit[admit[:, 1] == 11, 0][0]
    assert live.pass_start[last] >= 0.8 and wall >= 0.8  # the loop waited for the last request in real time
    s = live.summary()
    assert s["ttft_ms_p50"] > 0 and s["tpot_ms_p50"] > 0 and s["request_throughput"] > 0
    assert (np.diff(live.pass_start) >= live.pass_duration[:-1] - 1e-12).all()  # passes never overlap


def test_prefix_caching_shares_pages_and_keeps_the_simulators_schedule():
    """With prefix caching on, requests of one group run on the same physical pages for their shared prefix,
    the prompts really share that text, and the live run still makes the simulator's schedule."""
    from engine import Scheduler, Workload
    from engine.live.executor import prompt_tokens

    base = tight_config().build_workload()
    shared = np.minimum(base.prompt_len, 32)
    workload = Workload(base.prompt_len, base.output_len, prefix_group=np.zeros(base.num_requests, dtype=np.int64),
                        prefix_len=shared)
    cfg = tight_config(workload=workload, enable_prefix_caching=True, num_gpu_blocks_override=16)
    sim = simulate(cfg)
    assert sim.summary()["prefix_cache_hit_tokens"] > 0
    live = run_live(cfg, model_preset="tiny", device="cpu")
    assert live.summary()["trace_digest"] == sim.summary()["trace_digest"]
    np.testing.assert_array_equal(live.passes, sim.passes)
    np.testing.assert_array_equal(live.events, sim.events)
    tokens = prompt_tokens(cfg, workload.prompt_len, 1000)
    long = [r for r in range(base.num_requests) if base.prompt_len[r] >= 32]
    assert len(long) > 2 and all(tokens[r][:32] == tokens[long[0]][:32] for r in long)
    assert tokens[long[0]][32:] != tokens[long[1]][32:32 + len(tokens[long[0]]) - 32]  # the rest differs
    assert tokens[0] == tokens[long[0]][:20]  # request 0's whole 20-token prompt is the shared prefix
    # Two requests admitted with a hit hold the same first page.
    sched = Scheduler(cfg)
    seen_shared = False
    while not sched.finished and not seen_shared:
        plan = sched.schedule()
        hit = plan.admitted[plan.cached > 0]
        tables = {r: sched.block_table(r) for r in sched.running_ids().tolist()}
        for r in hit.tolist():
            owners = [o for o, t in tables.items() if o != r and len(t) and t[0] == tables[r][0]]
            seen_shared |= bool(owners)
        sched.complete(plan)
    assert seen_shared


def test_live_mode_refuses_what_one_gpu_cannot_run_and_serves_what_max_model_len_lets_in():
    from engine.live.errors import LiveError

    for changes, said in (({"tensor_parallel_size": 2}, "runs on one GPU"), ({"kv_cache_dtype": "fp8"}, "fp8")):
        with pytest.raises(LiveError, match=said):
            run_live(tight_config(**changes), model_preset="tiny", device="cpu")
    cfg = tight_config(max_model_len=int(np.median(tight_config().build_workload().prompt_len)) + 8)
    sim = simulate(cfg)
    assert sim.summary()["refused_requests"] > 0
    assert run_live(cfg, model_preset="tiny", device="cpu").summary()["trace_digest"] == sim.summary()["trace_digest"]
