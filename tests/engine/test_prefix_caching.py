"""Prefix caching (vLLM 0.11's KVCacheManager/BlockPool): invariants on every pass, and the numba core equal
to the plain-Python reference on random workloads with shared prefixes."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from engine import RunConfig, Scheduler, Workload, simulate, simulate_stepwise
from engine.trace import Event
from tests.engine.helpers import cached_runs
from engine.reference import ReferenceScheduler


def _identity(wl: Workload, r: int, j: int, bs: int) -> tuple:
    """What two requests' block j must agree on to be one physical block (see the workload's definition)."""
    g, shared = int(wl.prefix_group[r]), int(wl.prefix_len[r])
    return ("group", g, j) if g >= 0 and (j + 1) * bs <= shared else ("own", r, j)


def _check_pass(sched: Scheduler, cfg: RunConfig, wl: Workload) -> None:
    refs = sched.block_ref_counts()
    assert (refs >= 0).all()
    holders: dict[int, list[tuple[int, int]]] = {}
    for r in sched.running_ids().tolist():
        for j, b in enumerate(sched.block_table(r).tolist()):
            holders.setdefault(b, []).append((r, j))
    # Each block's count is the number of running requests holding it; idle blocks are exactly the free ones.
    counted = np.zeros_like(refs)
    for b, owners in holders.items():
        counted[b] = len(owners)
        assert b >= 1
        # A block two requests hold at once is one full block of content both of them have.
        ids = {_identity(wl, r, j, cfg.block_size) for r, j in owners}
        assert len(owners) == 1 or (len(ids) == 1 and next(iter(ids))[0] == "group"), owners
        assert len({r for r, _ in owners}) == len(owners)  # never twice in one table
    np.testing.assert_array_equal(refs, counted)
    assert sched.free_blocks == cfg.usable_blocks - len(holders)


# Pass by pass through the step loop, with Python checks after every pass: fewer examples than the whole-run
# properties. The reference checks the same counts after every pass of the 150 workloads below, and the numba
# core is proven equal to it there (schedule, admissions and cached tokens).
@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cached_runs())
def test_reference_counts_and_sharing_hold_on_every_pass(cfg):
    wl = cfg.build_workload()
    sched = Scheduler(cfg)
    while not sched.finished:
        plan = sched.schedule()
        _check_pass(sched, cfg, wl)
        sched.complete(plan)
        _check_pass(sched, cfg, wl)
    assert (sched.block_ref_counts() == 0).all()
    assert sched.free_blocks == cfg.usable_blocks
    trace = sched.trace()  # a shared block's tokens are live once, as memory holds them once
    if cfg.allocation == "on-demand":
        assert (trace.live_tokens <= trace.held_slots).all()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cached_runs())
def test_hits_never_exceed_what_is_shared(cfg):
    trace = simulate(cfg)
    wl, bs = trace.workload, cfg.block_size
    admissions = np.isin(trace.event_kind, [Event.ADMIT, Event.RESUME])
    for (p, r, kind), cached in zip(trace.events[admissions].tolist(), trace.event_cached[admissions].tolist()):
        assert cached % bs == 0
        if kind == Event.ADMIT:
            # A first admission can only find blocks of the prefix it shares with its group, and never its last
            # prompt token (which must be computed for the logits).
            others = (wl.prefix_group == wl.prefix_group[r]) & (np.arange(wl.num_requests) != r)
            shared = int(np.minimum(wl.prefix_len[others], wl.prefix_len[r]).max()) if (
                wl.prefix_group[r] >= 0 and others.any()) else 0
            assert cached <= shared // bs * bs
            assert cached <= wl.prompt_len[r] - 1
    assert trace.summary()["prefix_cache_hit_tokens"] == int(trace.cache_hits_per_request.sum())
    assert 0.0 <= trace.summary()["prefix_cache_hit_rate"] <= 1.0


def _same(cfg: RunConfig) -> None:
    trace = simulate(cfg)
    ref = ReferenceScheduler(cfg)
    passes = ref.run()  # checks reference counts and the free queue after every pass
    assert trace.digest == ref.digest_hex
    assert trace.n_tokens.tolist() == [sum(n for _, n in p.scheduled) for p in passes]
    assert trace.preempted_lists() == [p.preempted for p in passes]
    assert trace.admit_lists() == [[list(a) for a in p.admitted] for p in passes]
    assert trace.recomputed_per_request.tolist() == [r.recomputed for r in ref.requests]
    assert trace.recomputed_prompt_per_request.tolist() == [r.recomputed_prompt for r in ref.requests]
    assert trace.cache_hits_per_request.tolist() == [r.cache_hits for r in ref.requests]
    assert trace.lookup_queries.tolist() == [sum(q for q, _ in p.lookups) for p in passes]
    assert trace.lookup_hits.tolist() == [sum(h for _, h in p.lookups) for p in passes]
    assert all(b.ref_cnt == 0 for b in ref.pool.blocks)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cached_runs())
def test_numba_core_matches_reference_with_shared_prefixes(cfg):
    _same(cfg)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cached_runs())
def test_step_at_a_time_equals_whole_run_with_caching(cfg):
    whole, stepwise = simulate(cfg), simulate_stepwise(cfg)
    assert stepwise.digest == whole.digest
    np.testing.assert_array_equal(stepwise.passes, whole.passes)
    np.testing.assert_array_equal(stepwise.events, whole.events)
    np.testing.assert_array_equal(stepwise.event_cached, whole.event_cached)


@pytest.mark.parametrize("changes", [
    {}, {"pool_gib": 2.0, "max_num_seqs": 512}, {"system_prompt_len": 1000}, {"samples_per_prompt": 4},
    {"turns": 4, "pool_gib": 4.0}, {"system_prompt_len": 2000, "pool_gib": 2.0, "max_num_batched_tokens": 2048},
])
def test_numba_core_matches_reference_on_article_scenarios_with_caching(changes):
    _same(RunConfig(enable_prefix_caching=True, **changes))


def test_caching_refunds_part_of_the_preemptions_cost():
    """The article's default run with caching on: same passes and preemptions (distinct prompts), but the
    readmissions find their own surviving leading blocks, so recompute falls several-fold."""
    off, on = simulate(RunConfig()).summary(), simulate(RunConfig(enable_prefix_caching=True)).summary()
    assert off["prefix_cache_hit_tokens"] == 0
    assert on["preemptions"] > 0
    assert on["prefix_cache_readmission_hit_tokens"] == on["prefix_cache_hit_tokens"] > 0
    # What is not recomputed is exactly what the cache gave back on readmission.
    assert off["recomputed_prompt_tokens"] - on["recomputed_prompt_tokens"] <= on["prefix_cache_hit_tokens"]
    assert on["recomputed_prompt_tokens"] * 2 < off["recomputed_prompt_tokens"]


def test_shared_system_prompt_lets_more_requests_fit():
    cfg = RunConfig(system_prompt_len=1024, pool_gib=2.0, max_num_seqs=512)
    off, on = simulate(cfg).summary(), simulate(cfg.replace(enable_prefix_caching=True)).summary()
    assert on["peak_batch"] > off["peak_batch"]
    assert on["passes"] < off["passes"]
    assert on["prefix_cache_hit_tokens"] >= 1024 // 16 * 16 * (cfg.requests - 1) * 0.9
    assert 0.9 < on["live_cache_fraction"] <= 1.0  # the shared prompt is held once, and counted once


def test_caching_off_ignores_prefixes():
    """With caching off, shared prefixes change nothing: the same run bit for bit."""
    plain = simulate(RunConfig(pool_gib=2.0))
    shared = simulate(RunConfig(pool_gib=2.0, system_prompt_len=800))
    assert plain.digest == shared.digest and plain.summary() == shared.summary()


def test_generated_prefix_idioms():
    from engine.workload import generate_workload, share_prefixes
    base = generate_workload(12, 16.0, 3)
    assert share_prefixes(base) is base
    sp = share_prefixes(base, system_prompt_len=500)
    assert (sp.prefix_group == 0).all() and (sp.prefix_len == np.minimum(base.prompt_len, 500)).all()
    n = share_prefixes(base, samples=3)
    assert n.prefix_group.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert (n.prompt_len.reshape(4, 3) == n.prompt_len[::3, None]).all() and (n.prefix_len == n.prompt_len).all()
    t = share_prefixes(base, turns=3)
    assert t.prefix_group.tolist() == [0, 1, 2, 3] * 3
    assert (t.prompt_len[4:] > t.prompt_len[:-4] + t.output_len[:-4]).all()
    with pytest.raises(ValueError):
        RunConfig(system_prompt_len=10, turns=2)


def test_workload_files_carry_prefix_groups(tmp_path):
    from engine.workload import WorkloadError, load_workload, parse_workload
    wl = parse_workload("prompt_len,output_len,prefix_group,prefix_len\n100,5,0,64\n90,7,0,90\n30,2,-1,0\n")
    assert wl.prefix_group.tolist() == [0, 0, -1] and wl.prefix_len.tolist() == [64, 90, 0]
    js = parse_workload('{"prompt_len": [100, 90], "output_len": [5, 7], "prefix_group": [3, 3], "prefix_len": [64, 90]}')
    assert js.prefix_group.tolist() == [3, 3] and js.dense_groups().tolist() == [0, 0]
    assert not parse_workload("prompt_len,output_len\n1,2\n").has_shared_prefixes
    for bad, words in (
        ("prompt_len,output_len,prefix_group,prefix_len\n100,5,0,101\n", "prefix_len[0] = 101 is outside 0..100"),
        ("prompt_len,output_len,prefix_group,prefix_len\n100,5,-2,0\n", "prefix_group[0] = -2 is outside -1"),
        ("prompt_len,output_len,prefix_group,prefix_len\n100,5,x,0\n", "not four integers"),
        ("prompt_len,output_len,prefix_group,prefix_len\n100,5,0\n", "has 3 fields, expected 4"),
        ('{"prompt_len": [1], "output_len": [1], "prefix_group": [0]}', "go together"),
        ('{"prompt_len": [9], "output_len": [1], "prefix_group": [-1], "prefix_len": [4]}', "prefix_group is -1"),
    ):
        with pytest.raises(WorkloadError, match=words.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
            parse_workload(bad)


def test_cli_switch_spells_vllms_flags(capsys):
    """In process: engine.cli.main is what `python -m engine` runs (tests/engine/test_cli.py runs the command)."""
    import json

    from engine.cli import main
    base = ["run", "--json", "--requests", "32", "--system-prompt-len", "512", "--pool-gib", "1"]

    def run(flag: str) -> dict:
        assert main(base + [flag]) == 0
        return json.loads(capsys.readouterr().out)

    on, off = run("--enable-prefix-caching"), run("--no-enable-prefix-caching")
    assert on["prefix_cache_hit_tokens"] > 0 and off["prefix_cache_hit_tokens"] == 0
    assert on["prefix_cache_hit_rate"] > 0.2 and off["prefix_cache_hit_rate"] == 0.0
