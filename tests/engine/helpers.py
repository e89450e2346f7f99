"""Small workloads and configs shared by the engine tests."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from engine import RunConfig, Workload


def small_workload(prompts: list[int], outputs: list[int]) -> Workload:
    return Workload(np.array(prompts), np.array(outputs))


@st.composite
def small_runs(draw, max_requests: int = 24) -> RunConfig:
    """A random tight configuration: few blocks, small budgets, so preemption and head-of-line blocking happen."""
    n = draw(st.integers(1, max_requests))
    prompts = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 120), min_size=n, max_size=n))
    block_size = draw(st.sampled_from([1, 4, 16]))
    allocation = draw(st.sampled_from(["on-demand", "on-demand", "reserve"]))
    unit = draw(st.sampled_from(["pass", "pass", "request"]))
    declared = draw(st.sampled_from([1.0, 1.5, 2.0, 4.0]))
    max_num_seqs = draw(st.integers(1, 32))
    budget = draw(st.integers(max_num_seqs, 512))
    # Enough blocks for the largest request alone (reserving or not), plus a random margin.
    longest = max(p + o for p, o in zip(prompts, outputs))
    if allocation == "reserve":
        longest = max(p + int(np.ceil(declared * o - 1e-9)) for p, o in zip(prompts, outputs))
    need = -(-longest // block_size) + 1
    blocks = draw(st.integers(need + 1, need * 4 + 8))
    return RunConfig(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=budget, block_size=block_size,
        num_gpu_blocks_override=blocks, allocation=allocation, declared_multiple=declared, unit=unit,
        scheduler_reserve_full_isl=draw(st.booleans()), workload=small_workload(prompts, outputs),
    )


@st.composite
def cached_runs(draw, max_requests: int = 24) -> RunConfig:
    """A random tight configuration with prefix caching on and prompts sharing prefixes in a few groups."""
    cfg = draw(small_runs(max_requests))
    wl = cfg.build_workload()
    n = wl.num_requests
    groups = draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))
    shares = [draw(st.integers(0, int(p))) if g >= 0 else 0 for g, p in zip(groups, wl.prompt_len)]
    return cfg.replace(enable_prefix_caching=True, allocation=draw(st.sampled_from(["on-demand", "on-demand",
                                                                                    cfg.allocation])),
                       workload=Workload(wl.prompt_len, wl.output_len, prefix_group=np.array(groups),
                                         prefix_len=np.array(shares)))


@st.composite
def prefix_trees(draw, n: int, prompts: list[int]) -> Workload:
    """Prefix groups as a random tree (each group leaves its parent's line at a random token), requests placed in
    it with prefix lengths that reach their group: the chains Mooncake's block hashes make."""
    count = draw(st.integers(1, 5))
    parent = [-1]
    start = [0]
    for g in range(1, count):
        up = draw(st.integers(-1, g - 1))
        parent.append(up)
        start.append(0 if up < 0 else start[up] + draw(st.integers(0, 60)))
    groups, shares = [], []
    for p in prompts:
        g = draw(st.integers(-1, count - 1))
        if g >= 0 and start[g] <= p:
            groups.append(g)
            shares.append(draw(st.integers(start[g], p)))
        else:
            groups.append(-1)
            shares.append(0)
    return groups, shares, parent, start


@st.composite
def tree_runs(draw, max_requests: int = 20) -> RunConfig:
    """A random tight configuration with prefix caching on and prompts sharing a tree of prefixes."""
    cfg = draw(small_runs(max_requests))
    wl = cfg.build_workload()
    groups, shares, parent, start = draw(prefix_trees(wl.num_requests, wl.prompt_len.tolist()))
    return cfg.replace(enable_prefix_caching=True, allocation="on-demand",
                       workload=Workload(wl.prompt_len, wl.output_len, prefix_group=np.array(groups),
                                         prefix_len=np.array(shares), group_parent=np.array(parent),
                                         group_start=np.array(start)))
