"""Prefix sharing as a tree of groups (a request's prompt a chain of blocks): the core, the reference and the
definition agree, and plain prefix groups are the tree without branches."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from engine import Event, RunConfig, Workload, WorkloadError, simulate
from engine.prefix_tree import content_chains, shared_prompt_tokens
from engine.reference import ReferenceScheduler
from tests.engine.helpers import tree_runs


def _chain_ids(workload: Workload, r: int, block_size: int) -> list[int]:
    """Content ids of request r's shared blocks, read off its chain as the core reads it."""
    chain_at, chain = content_chains(workload, block_size)
    rows = chain[chain_at[r]:chain_at[r + 1]]
    out = []
    for j in range(int(rows[-1, 0]) if len(rows) else 0):
        end, offset = next((int(e), int(o)) for e, o in rows if j < e)
        out.append(offset + j)
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_runs())
def test_core_and_reference_make_the_same_schedule_on_prefix_trees(cfg):
    trace = simulate(cfg)
    ref = ReferenceScheduler(cfg)
    passes = ref.run()
    assert trace.digest == ref.digest_hex
    assert trace.admit_lists() == [[list(a) for a in p.admitted] for p in passes]
    assert trace.cache_hits_per_request.tolist() == [r.cache_hits for r in ref.requests]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_runs())
def test_two_requests_share_a_content_id_exactly_where_their_prompts_agree(cfg):
    wl, bs = cfg.build_workload(), cfg.block_size
    ids = [_chain_ids(wl, r, bs) for r in range(wl.num_requests)]
    for i in range(wl.num_requests):
        for j in range(i + 1, wl.num_requests):
            common = shared_prompt_tokens(wl, i, j) // bs  # full blocks both prompts agree on
            same = [a == b for a, b in zip(ids[i], ids[j])]
            assert same == [k < common for k in range(len(same))], (i, j)


def test_prefix_groups_are_one_segment_per_request_numbered_as_before():
    wl = Workload([100, 200, 300, 50], [5, 5, 5, 5], prefix_group=[7, 7, -1, 2], prefix_len=[64, 100, 0, 48])
    chain_at, chain = content_chains(wl, 16)
    assert chain_at.tolist() == [0, 1, 2, 2, 3]
    # groups renumbered 2 -> 0 and 7 -> 1: group 0 has 3 blocks, group 1 six (100 // 16), after it
    assert chain.tolist() == [[4, 3], [6, 3], [3, 0]]


def test_a_first_child_s_ids_run_on_from_its_parent_so_its_chain_is_one_segment():
    wl = Workload([2048, 2048], [4, 4], prefix_group=[1, 1], prefix_len=[1024, 1536],
                  group_parent=[-1, 0], group_start=[0, 512])
    chain_at, chain = content_chains(wl, 16)
    assert chain.tolist() == [[64, 0], [96, 0]]


@pytest.mark.parametrize("tree, message", [
    (dict(group_parent=[0], group_start=[0]), "numbered before"),
    (dict(group_parent=[-1, 0], group_start=[5, 10]), "0 for a root"),
    (dict(group_parent=[-1, 0], group_start=[0, 300]), "must reach"),
    (dict(group_parent=[-1]), "go together"),
])
def test_a_malformed_tree_is_refused_with_what_is_wrong(tree, message):
    with pytest.raises(WorkloadError, match=message):
        Workload([400, 400], [4, 4], prefix_group=[1 if len(tree.get("group_parent", [])) > 1 else 0, 0],
                 prefix_len=[200, 100], **tree)


def test_a_tree_workload_is_equal_to_its_copy_and_hashes_alike():
    make = lambda: Workload([100, 200], [5, 6], prefix_group=[0, 1], prefix_len=[64, 80],  # noqa: E731
                            group_parent=[-1, 0], group_start=[0, 32])
    a, b = make(), make()
    assert a == b and hash(a) == hash(b) and a is not b
    assert a != Workload([100, 200], [5, 6])
    assert RunConfig(workload=a) == RunConfig(workload=b)


def test_a_child_group_s_request_is_served_its_parents_blocks_from_the_cache():
    # Request 0 computes 4 blocks of group 0; request 1's group leaves group 0 at token 32 (block 2): it
    # can take blocks 0 and 1 from the cache, not block 2 onwards.
    wl = Workload([64, 80], [40, 2], prefix_group=[0, 1], prefix_len=[64, 80], group_parent=[-1, 0],
                  group_start=[0, 32])
    cfg = RunConfig(workload=wl, enable_prefix_caching=True, block_size=16, max_num_seqs=1,
                    num_gpu_blocks_override=64, model="tiny")
    trace = simulate(cfg)
    admits = trace.events[trace.event_kind == Event.ADMIT]
    cached = dict(zip(admits[:, 1].tolist(), trace.event_cached[trace.event_kind == Event.ADMIT].tolist()))
    assert cached == {0: 0, 1: 32}
    assert np.array_equal(trace.cache_hits_per_request, [0, 32])


def test_live_prompts_agree_exactly_where_the_tree_says_they_share():
    from engine.live.executor import prompt_tokens

    wl = Workload([96, 96, 96, 40], [4, 4, 4, 4], prefix_group=[1, 2, 0, -1], prefix_len=[80, 90, 30, 0],
                  group_parent=[-1, 0, 0], group_start=[0, 32, 48])
    cfg = RunConfig(workload=wl, model="tiny")
    tokens = prompt_tokens(cfg, wl.prompt_len, 256)
    for i in range(4):
        for j in range(i + 1, 4):
            common = shared_prompt_tokens(wl, i, j)
            assert tokens[i][:common] == tokens[j][:common]
            if common < 40:  # (random tokens of a 256-word vocabulary: the next one differs)
                assert tokens[i][:common + 8] != tokens[j][:common + 8]
