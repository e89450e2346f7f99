"""vLLM V1's scheduling rules, one behaviour per test, on workloads small enough to reason about by hand."""
import numpy as np
import pytest

from engine import Event, RunConfig, Scheduler, simulate
from tests.engine.helpers import small_workload


def _cfg(prompts, outputs, **kw) -> RunConfig:
    kw.setdefault("block_size", 4)
    return RunConfig(workload=small_workload(prompts, outputs), **kw)


def test_running_requests_are_served_before_waiting_ones_in_admission_order():
    s = Scheduler(_cfg([8, 8, 8], [5, 5, 5], max_num_seqs=2, max_num_batched_tokens=64, num_gpu_blocks_override=100))
    first = s.schedule()
    assert first.request_ids.tolist() == [0, 1]  # the cap of 2 stops admission at request 2
    s.complete(first)
    second = s.schedule()
    assert second.request_ids.tolist() == [0, 1] and second.new_tokens.tolist() == [1, 1]


def test_prefill_is_chunked_by_the_token_budget_and_new_requests_get_what_is_left():
    s = Scheduler(_cfg([30, 30], [3, 3], max_num_seqs=4, max_num_batched_tokens=40, num_gpu_blocks_override=100))
    plan = s.schedule()
    assert plan.request_ids.tolist() == [0, 1]
    assert plan.new_tokens.tolist() == [30, 10]  # request 1 admitted with a partial chunk
    s.complete(plan)
    plan = s.schedule()
    assert plan.new_tokens.tolist() == [1, 20]  # 0 decodes, 1 finishes its prompt


def test_blocks_are_allocated_on_demand_in_whole_blocks():
    s = Scheduler(_cfg([5], [10], num_gpu_blocks_override=20))
    plan = s.schedule()
    assert s.request(0).num_blocks == 2  # 5 tokens need 2 blocks of 4
    s.complete(plan)
    for _ in range(3):
        s.complete(s.schedule())  # decode positions 5, 6, 7: still 2 blocks
    assert s.request(0).num_blocks == 2
    s.complete(s.schedule())  # position 8 opens a third block
    assert s.request(0).num_blocks == 3


def test_null_block_is_never_handed_out():
    # 4 blocks in vLLM's count = 3 usable (block 0 is the null block): 12 tokens of 4-token blocks.
    cfg = _cfg([12], [1], num_gpu_blocks_override=4)
    assert cfg.usable_blocks == 3
    assert simulate(cfg).kv_blocks.max() == 3
    with pytest.raises(Exception, match="num_gpu_blocks_override must be at least 5"):
        simulate(_cfg([13], [1], num_gpu_blocks_override=4))


def _tight() -> Scheduler:
    # Three 8-token prompts fill 6 of 6 usable blocks; the first decode of request 0 needs a 7th.
    return Scheduler(_cfg([8, 8, 8, 4], [16, 16, 16, 16], max_num_seqs=8, max_num_batched_tokens=64,
                          num_gpu_blocks_override=7))


def test_allocation_failure_preempts_the_newest_running_request():
    s = _tight()
    s.complete(s.schedule())
    plan = s.schedule()
    assert plan.preempted.tolist() == [2]
    assert s.request(2).num_computed_tokens == 0 and s.request(2).num_blocks == 0
    assert s.request(2).num_output_tokens == 1  # keeps its sampled token
    assert s.waiting_ids()[0] == 2  # at the head of waiting


def test_pass_that_preempts_admits_nobody():
    s = _tight()
    s.complete(s.schedule())
    plan = s.schedule()
    assert plan.preempted.size > 0
    assert plan.admitted.size == 0
    assert set(plan.request_ids.tolist()) == {0, 1}


def test_preempted_request_reprefills_prompt_plus_generated_tokens_on_readmission():
    s = _tight()
    s.complete(s.schedule())
    s.complete(s.schedule())  # request 2 preempted, holding 1 generated token
    for _ in range(200):
        plan = s.schedule()
        if 2 in plan.admitted.tolist():
            k = plan.request_ids.tolist().index(2)
            assert plan.computed_before[k] == 0
            assert plan.new_tokens[k] == 8 + s.request(2).num_output_tokens
            assert plan.resumed[plan.admitted.tolist().index(2)]
            return
        s.complete(plan)
    pytest.fail("request 2 was never readmitted")


def test_request_being_scheduled_can_preempt_itself():
    # One request, the only one running, cannot be preempted by anyone but itself; two requests where the
    # newer one is scheduled last and finds no block: it evicts itself.
    s = Scheduler(_cfg([4, 4], [9, 9], max_num_seqs=4, max_num_batched_tokens=64, num_gpu_blocks_override=4))
    s.complete(s.schedule())  # both admitted: 1 block each, 1 free
    for _ in range(100):
        plan = s.schedule()
        if plan.preempted.size:
            # Request 0 is served first and takes the last free block; request 1 then evicts itself.
            assert plan.preempted.tolist() == [1]
            assert plan.request_ids.tolist() == [0]
            return
        s.complete(plan)
    pytest.fail("no preemption happened")


def test_admission_stops_at_the_head_of_waiting_head_of_line_blocking():
    # Request 1's prompt does not fit; request 2's would, but it is never tried.
    s = Scheduler(_cfg([16, 40, 4], [5, 5, 5], max_num_seqs=8, max_num_batched_tokens=256, num_gpu_blocks_override=12))
    plan = s.schedule()
    assert plan.request_ids.tolist() == [0]


def test_max_num_seqs_is_only_an_admission_cap():
    tr = simulate(RunConfig(max_num_seqs=512))
    assert tr.summary()["peak_batch"] < 512
    assert tr.summary() == simulate(RunConfig(max_num_seqs=256)).summary()


def test_full_prompt_gate_admits_only_when_the_whole_prompt_fits():
    kw = dict(max_num_seqs=8, max_num_batched_tokens=16, num_gpu_blocks_override=12)
    wl = ([8, 40], [30, 5])
    off = Scheduler(_cfg(*wl, **kw)).schedule()
    assert off.request_ids.tolist() == [0, 1]  # v0.11: a first chunk of 8 tokens fits
    on = Scheduler(_cfg(*wl, scheduler_reserve_full_isl=True, **kw)).schedule()
    assert on.request_ids.tolist() == [0]  # v0.33 gate: 40 tokens = 10 blocks > 9 free


def test_full_prompt_gate_counts_prefix_cache_hits_as_allocate_slots_does():
    """vLLM's gate asks get_num_blocks_to_allocate for the whole prompt, which leaves out the blocks the prefix
    cache already holds (kv_cache_manager.py, allocate_slots with full_sequence_must_fit): a long prompt that is
    mostly cached is admitted into a pool that could not hold it afresh."""
    from engine import Workload
    # Two 36-token prompts sharing their first 32 tokens; blocks of 4: request 0 takes 9 of 12 usable blocks,
    # request 1 finds 8 of its 9 in the cache (held by request 0) and needs 1 more of the 3 left.
    wl = Workload(np.array([36, 36]), np.array([5, 5]), prefix_group=np.array([0, 0]), prefix_len=np.array([32, 32]))
    kw = dict(workload=wl, block_size=4, max_num_seqs=8, max_num_batched_tokens=64, num_gpu_blocks_override=13,
              enable_prefix_caching=True, scheduler_reserve_full_isl=True)
    plan = Scheduler(RunConfig(**kw)).schedule()
    assert plan.request_ids.tolist() == [0, 1] and plan.new_tokens.tolist() == [36, 4]
    # Without the shared prefix the same gate keeps request 1 waiting: 9 blocks > 3 free.
    alone = Workload(np.array([36, 36]), np.array([5, 5]))
    assert Scheduler(RunConfig(**{**kw, "workload": alone})).schedule().request_ids.tolist() == [0]


def test_reserve_admits_only_while_declared_footprints_fit():
    # 64 usable tokens; each request reserves 8 + 2 x 4 = 16 tokens: four fit, the fifth waits.
    cfg = _cfg([8] * 6, [4] * 6, allocation="reserve", declared_multiple=2, max_num_seqs=16,
               max_num_batched_tokens=256, num_gpu_blocks_override=17)
    plan = Scheduler(cfg).schedule()
    assert plan.request_ids.tolist() == [0, 1, 2, 3]


def test_static_batching_forms_next_batch_only_after_last_member_finishes():
    cfg = _cfg([4] * 4, [2, 9, 2, 2], unit="request", max_num_seqs=2, max_num_batched_tokens=64,
               num_gpu_blocks_override=40)
    trace = simulate(cfg)
    admits = trace.events_of(Event.ADMIT)
    finish = {int(r): int(p) for p, r, _ in trace.events_of(Event.FINISH)}
    admitted_at = {int(r): int(p) for p, r, _ in admits}
    assert admitted_at[0] == admitted_at[1] == 0
    # Request 0 finishes early, but 2 waits for 1 (the batch's longest) to finish.
    assert finish[0] < finish[1]
    assert admitted_at[2] == finish[1] + 1


def test_continuous_batching_refills_a_slot_the_pass_after_it_frees():
    cfg = _cfg([4] * 4, [2, 9, 2, 2], unit="pass", max_num_seqs=2, max_num_batched_tokens=64,
               num_gpu_blocks_override=40)
    trace = simulate(cfg)
    finish = {int(r): int(p) for p, r, _ in trace.events_of(Event.FINISH)}
    admitted_at = {int(r): int(p) for p, r, _ in trace.events_of(Event.ADMIT)}
    assert admitted_at[2] == finish[0] + 1


def test_recomputed_tokens_count_prompt_and_generated_tokens_separately():
    s = simulate(RunConfig()).summary()
    assert 0 < s["recomputed_prompt_tokens"] <= s["recomputed_tokens"]
    fx = np.array(simulate(RunConfig(pool_gib=2, max_num_seqs=512)).recomputed_per_request)
    assert fx.sum() > 0
