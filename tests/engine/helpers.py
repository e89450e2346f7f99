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
