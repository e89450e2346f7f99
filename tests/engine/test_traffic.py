"""Traffic over time: the arrival process, arrivals in the one loop, and the latency figures of vllm bench serve."""
import json

import numpy as np
import pytest

from engine import Event, RunConfig, Scheduler, Workload, serve, simulate, simulate_stepwise
from engine.cli import main
from engine.traffic import gamma_arrivals
from engine.reference import ReferenceScheduler

N = 20_000


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_arrival_process_has_the_rate_and_the_burstiness_within_sampling_error(burstiness):
    rate = 5.0
    times = gamma_arrivals(N, rate, burstiness, seed=3)
    gaps = np.diff(np.concatenate(([0.0], times)))
    assert (gaps >= 0).all()
    # vLLM scales the summed gaps so the last request lands at N / rate: the mean rate is exact.
    assert times[-1] == pytest.approx(N / rate, rel=1e-12)
    # The scaling factor itself is a sample mean of N gamma draws: within 4 standard errors of 1.
    raw = np.random.default_rng([3, 0x7A11C]).gamma(burstiness, 1 / (rate * burstiness), N).sum()
    assert abs(raw / (N / rate) - 1) < 4 / np.sqrt(N * burstiness)
    # Gamma with shape k: coefficient of variation 1 / sqrt(k) (standard error ~ cv / sqrt(2N) x a small factor).
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1 / np.sqrt(burstiness), rel=8 / np.sqrt(N) * (1 + 1 / burstiness))
    if burstiness == 1.0:  # Poisson: P(gap < mean / 10) = 1 - e^-0.1
        share = (gaps < 0.1 / rate).mean()
        p = 1 - np.exp(-0.1)
        assert abs(share - p) < 4 * np.sqrt(p * (1 - p) / N)


def test_arrivals_are_seeded_and_leave_the_workload_alone():
    a, b = RunConfig(arrival="rate", seed=7), RunConfig(arrival="rate", seed=8)
    assert np.array_equal(a.arrival_times(a.build_workload()), RunConfig(arrival="rate", seed=7).arrival_times(
        a.build_workload()))
    assert not np.array_equal(a.arrival_times(a.build_workload()), b.arrival_times(b.build_workload()))
    assert np.array_equal(a.build_workload().prompt_len, RunConfig(seed=7).build_workload().prompt_len)


CONFIGS = [
    RunConfig(arrival="rate", request_rate=4.0),
    RunConfig(arrival="rate", request_rate=20.0, burstiness=0.3, pool_gib=2.0),  # bursts that preempt
    RunConfig(arrival="rate", request_rate=12.0, requests=96, max_num_batched_tokens=1024, max_num_seqs=64),
    RunConfig(arrival="rate", request_rate=3.0, unit="request", allocation="reserve", max_num_seqs=32, requests=64),
    RunConfig(arrival="rate", request_rate=50.0, scheduler_reserve_full_isl=True, pool_gib=1.5, requests=128),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"cfg{i}" for i in range(len(CONFIGS))])
def test_a_request_never_runs_before_it_arrives(cfg):
    trace = simulate(cfg)
    arrival = trace.arrival_s
    for kind in (Event.ADMIT, Event.FIRST_TOKEN, Event.FINISH):
        ev = trace.events_of(kind)
        assert (trace.pass_start[ev[:, 0]] >= arrival[ev[:, 1]]).all()
    # ... and joins at the first pass that starts at or after its arrival (when it is not blocked, it runs there).
    admit = trace.events_of(Event.ADMIT)
    first_admit = np.full(len(arrival), -1)
    first_admit[admit[::-1, 1]] = admit[::-1, 0]
    joined = np.searchsorted(trace.pass_start, arrival, side="left")
    assert (first_admit >= joined).all()
    if cfg is CONFIGS[0]:  # light traffic: nobody is held back, so each joins and runs at exactly that pass
        np.testing.assert_array_equal(first_admit, joined)
    assert trace.summary()["finished_requests"] == cfg.build_workload().num_requests


@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"cfg{i}" for i in range(len(CONFIGS))])
def test_ttft_covers_queueing_and_every_prefill_pass_and_itl_gaps_sum_to_e2el_minus_ttft(cfg):
    scheduled = []

    class Recorder:
        def __init__(self):
            from engine import RooflineClock
            self.clock = RooflineClock(cfg)

        def execute(self, plan):
            scheduled.append(plan.request_ids.copy())
            return self.clock.execute(plan)

        def completed(self, plan, outcome):
            pass

    trace = serve(Scheduler(cfg), Recorder()).trace()
    t = trace.timing()
    first_pass = {}
    for p, ids in enumerate(scheduled):
        for r in ids.tolist():
            first_pass.setdefault(r, p)
    first_token_pass = dict(trace.events_of(Event.FIRST_TOKEN)[:, [1, 0]].tolist())
    for r in range(trace.workload.num_requests):
        queueing = trace.pass_start[first_pass[r]] - t.arrival[r]
        prefill = sum(trace.pass_duration[p] for p in range(first_pass[r], first_token_pass[r] + 1)
                      if r in scheduled[p])
        assert t.ttft[r] >= queueing + prefill - 1e-9
    sums = np.zeros(trace.workload.num_requests)
    np.add.at(sums, t.itl_owner, t.itl)
    np.testing.assert_allclose(sums, t.e2el - t.ttft, rtol=1e-12, atol=1e-9)
    assert len(t.itl) == trace.workload.total_output_tokens - trace.workload.num_requests


def test_idle_gaps_jump_the_clock_and_a_waiting_executor_waits_them_out():
    wl = Workload(np.array([100, 50]), np.array([5, 5]), np.array([0.0, 1000.0]))
    cfg = RunConfig(workload=wl, arrival="workload")
    trace = simulate(cfg)
    start_b = trace.pass_start[trace.events_of(Event.ADMIT)[1, 0]]
    assert start_b == 1000.0  # the pass starts at the arrival itself
    assert trace.num_passes == 10 and trace.makespan_s < 1001.0  # no empty passes in between
    assert trace.pass_end[4] < 1.0
    waits = []

    class Waiting:
        def execute(self, plan):
            return 0.25

        def completed(self, plan, outcome):
            pass

        def wait(self, seconds):
            waits.append(seconds)

    stepped = serve(Scheduler(cfg), Waiting()).trace()
    assert waits == [1000.0 - 5 * 0.25] and stepped.pass_start[5] == 1000.0


class OneSecond:
    """Every pass takes exactly one second: the figures can be worked out by hand."""

    def execute(self, plan):
        return 1.0

    def completed(self, plan, outcome):
        pass


def test_three_requests_by_hand():
    # A (4 + 3 tokens) at 0 s, B (4 + 2) at 0.5 s, C (4 + 2) at 5 s; every pass lasts 1 s.
    # pass 0 [0,1): A prefills -> A1 at 1.  B arrived meanwhile and joins at the next pass boundary.
    # pass 1 [1,2): A decodes, B prefills -> A2, B1 at 2.   pass 2 [2,3): A3, B2 at 3; both finish.
    # idle: the clock jumps to 5.   pass 3 [5,6): C prefills -> C1 at 6.   pass 4 [6,7): C2 at 7.
    wl = Workload(np.array([4, 4, 4]), np.array([3, 2, 2]), np.array([0.0, 0.5, 5.0]))
    cfg = RunConfig(workload=wl, arrival="workload", goodput="ttft:1000")
    trace = serve(Scheduler(cfg), OneSecond()).trace()
    assert trace.pass_start.tolist() == [0.0, 1.0, 2.0, 5.0, 6.0]
    t = trace.timing()
    assert t.ttft.tolist() == [1.0, 1.5, 1.0]
    assert t.e2el.tolist() == [3.0, 2.5, 2.0]
    assert t.tpot.tolist() == [1.0, 1.0, 1.0]
    assert t.itl.tolist() == [1.0, 1.0, 1.0, 1.0]
    s = trace.summary()
    assert s["request_throughput"] == 3 / 7
    assert s["ttft_ms_mean"] == pytest.approx(3500 / 3, rel=1e-12)
    assert s["ttft_ms_p50"] == 1000.0 and s["ttft_ms_p99"] == pytest.approx(1490.0)
    assert s["e2el_ms_p50"] == 2500.0 and s["tpot_ms_p99"] == 1000.0 and s["itl_ms_mean"] == 1000.0
    assert s["goodput_req_s"] == 2 / 7  # B's TTFT is 1,500 ms > 1,000 ms
    assert s["throughput_tok_s"] == 7 / 7


def test_goodput_counts_exactly_the_requests_meeting_every_target():
    base = RunConfig(arrival="rate", request_rate=14.0, pool_gib=4.0)
    t = simulate(base).timing()
    ttft_cut, tpot_cut, e2el_cut = (float(np.nanmedian(x) * 1000) for x in (t.ttft, t.tpot, t.e2el))
    for targets in ({"ttft": ttft_cut}, {"tpot": tpot_cut}, {"ttft": ttft_cut, "tpot": tpot_cut},
                    {"ttft": ttft_cut, "tpot": tpot_cut, "e2el": e2el_cut}):
        text = " ".join(f"{k}:{v!r}" for k, v in targets.items())
        trace = simulate(base.replace(goodput=text))
        good = np.ones(len(t.ttft), dtype=bool)
        for k, v in targets.items():
            values = {"ttft": t.ttft, "tpot": np.nan_to_num(t.tpot), "e2el": t.e2el}[k]
            good &= values * 1000 <= v
        assert 0 < good.sum() < len(good)
        assert trace.summary()["goodput_req_s"] == good.sum() / trace.makespan_s
    assert simulate(base).summary()["goodput_req_s"] is None


@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"cfg{i}" for i in range(len(CONFIGS))])
def test_compiled_fast_path_equals_the_loop_with_arrivals(cfg):
    whole, stepwise = simulate(cfg), simulate_stepwise(cfg)
    assert stepwise.summary() == whole.summary()
    np.testing.assert_array_equal(stepwise.passes, whole.passes)
    np.testing.assert_array_equal(stepwise.events, whole.events)
    np.testing.assert_array_equal(stepwise.pass_start, whole.pass_start)
    np.testing.assert_array_equal(stepwise.samples, whole.samples)


def replay(trace_json: dict, cfg: RunConfig) -> ReferenceScheduler:
    """The schedule again from --trace-out alone: the plain-Python scheduler, each request added to waiting at
    the first pass whose t_start_s is at or after its arrival_s (what the hidden check does with vLLM's)."""
    wl = trace_json["workload"]
    ref = ReferenceScheduler(cfg, Workload(np.array(wl["prompt_len"]), np.array(wl["output_len"])))
    pending = list(ref.waiting)
    ref.waiting.clear()
    arrival = trace_json["arrival_s"]
    for t_start in trace_json["t_start_s"]:
        while pending and arrival[pending[0].id] <= t_start:
            ref.waiting.append(pending.pop(0))
        ref.complete(record := ref.schedule())
        ref.passes.append(record)
    return ref


@pytest.mark.parametrize("cfg", CONFIGS, ids=[f"cfg{i}" for i in range(len(CONFIGS))])
def test_trace_out_replays_to_the_same_schedule(cfg, tmp_path):
    out = tmp_path / "t.json"
    simulate(cfg).write_schedule(str(out))
    data = json.loads(out.read_text())
    assert len(data["t_start_s"]) == len(data["n_seqs"]) and len(data["arrival_s"]) == cfg.build_workload().num_requests
    ref = replay(data, cfg)
    assert [len(p.scheduled) for p in ref.passes] == data["n_seqs"]
    assert [sum(n for _, n in p.scheduled) for p in ref.passes] == data["n_tokens"]
    assert [p.preempted for p in ref.passes] == data["preempted"]
    assert all(r.status == "FINISHED" for r in ref.requests)


def test_workload_files_carry_arrival_times(tmp_path):
    from engine.workload import load_workload

    a = tmp_path / "a.csv"
    a.write_text("prompt_len,output_len,arrival_s\n10,5,2.0\n20,3,0.5\n30,4,0.5\n")
    w = load_workload(a)
    assert w.prompt_len.tolist() == [20, 30, 10] and w.arrival_s.tolist() == [0.0, 0.0, 1.5]
    b = tmp_path / "b.csv"
    b.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,396,109\n")
    w = load_workload(b)
    assert w.prompt_len.tolist() == [374, 396] and w.arrival_s[1] == pytest.approx(4.314579)
    assert load_workload(tmp_path.joinpath("c.json").write_text('{"prompt_len": [1, 2], "output_len": [3, 4], '
                                                                '"arrival_s": [0, 1]}') and tmp_path / "c.json").arrival_s.tolist() == [0, 1]


def test_cli_request_rate_prints_the_bench_block_and_the_sweep_prints_latency(capsys, tmp_path):
    assert main(["run", "--request-rate", "4", "--requests", "64", "--goodput", "ttft:100", "tpot:20"]) == 0
    out = capsys.readouterr().out
    assert "============ Serving Benchmark Result ============" in out
    for label in ("Request throughput (req/s):", "Request goodput (req/s):", "Median TTFT (ms):", "P99 TPOT (ms):",
                  "Mean ITL (ms):", "P99 E2EL (ms):", "Burstiness factor: 1.0 (Poisson process)"):
        assert label in out
    assert main(["sweep", "--param", "request_rate", "--values", "1,4,inf", "--requests", "64", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["request_rate"] for r in rows] == [1.0, 4.0, "inf"]
    assert rows[0]["ttft_ms_p99"] < rows[2]["ttft_ms_p99"]
    assert rows[2]["trace_digest"] == simulate(RunConfig(requests=64)).digest  # inf: all at once
    assert main(["sweep", "--param", "request_rate", "--values", "1,4", "--requests", "64"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert "TTFT p99 ms" in table[0] and len(table) == 3
    wl = tmp_path / "w.csv"
    wl.write_text("prompt_len,output_len,arrival_s\n100,10,0\n50,20,30\n")
    assert main(["run", "--workload", str(wl), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan_s"] > 30  # the file's times are used


@pytest.mark.parametrize("args", [
    ["--request-rate", "0"], ["--request-rate", "fast"], ["--burstiness", "0"], ["--goodput", "ttft"],
    ["--goodput", "latency:5"], ["--goodput", "ttft:-1"], ["--arrival", "workload"],
])
def test_bad_traffic_input_is_one_line(args, capsys):
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_rate_sweep_spans_light_traffic_to_overload_and_threads_change_nothing():
    from engine.rate_sweep import capacity, default_rates, sweep_rates

    cfg = RunConfig(requests=96)
    rates = default_rates(cfg)
    assert len(rates) == 12 and list(rates) == sorted(rates)
    assert rates[0] < 0.3 * capacity(cfg) < 2 * capacity(cfg) < rates[-1]
    threaded, serial = sweep_rates(cfg, rates, workers=4), sweep_rates(cfg, rates, workers=1)
    assert threaded == serial
    assert serial[3] == {"request_rate": rates[3], **simulate(cfg.replace(arrival="rate", request_rate=rates[3])).summary()}
    # The knee: light traffic is served as it comes; overload queues it (TTFT explodes, throughput flattens).
    assert serial[0]["request_throughput"] == pytest.approx(rates[0], rel=0.1)
    assert serial[-1]["ttft_ms_p99"] > 4 * serial[0]["ttft_ms_p99"]
    assert serial[-1]["request_throughput"] < 1.1 * capacity(cfg)


def test_a_burstiness_sweep_is_a_sweep_of_traffic(capsys):
    assert main(["sweep", "--param", "burstiness", "--values", "0.25,4", "--requests", "64", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["ttft_ms_p99"] > rows[1]["ttft_ms_p99"]  # bursts queue: the p99 first token comes later
    assert rows[0]["trace_digest"] != rows[1]["trace_digest"]
