"""Which full KV blocks of two prompts hold the same tokens: a workload's prefix groups (a tree of shared
prompt lines, engine/workload.py) turned into the content ids prefix caching hashes.

vLLM hashes block j of a request from the tokens of blocks 0..j (a chained hash), so two requests' block j
are one cache entry exactly when both prompts agree up to the end of that block. Here a block's content is
named by the group whose line holds the block's last token, on the request's path from its root down to its
group: block j is that group's block, the same for every request through that group, while j ends inside
the request's shared prefix (prefix_len); past it the block is the request's own.

`content_chains` writes that as the scheduler core reads it (kernels/scheduler_core.py): per request, a few
segments (end block, content id offset) covering its shared blocks in order, content id = offset + block
index. Plain prefix groups are one segment per request; a Mooncake chain is one per group it passes through,
and fewer where consecutive groups' ids run on.
"""
from __future__ import annotations

import numpy as np

from engine.workload import Workload, read_only


def group_paths(workload: Workload) -> list[list[int]]:
    """Per group, the groups from its root down to it (a tree-less workload's groups are each a root)."""
    parent = workload.group_parent
    count = len(parent) if parent is not None else int(workload.dense_groups().max(initial=-1)) + 1
    paths: list[list[int]] = []
    for g in range(count):
        up = int(parent[g]) if parent is not None else -1
        paths.append([*paths[up], g] if up >= 0 else [g])  # parents are numbered first
    return paths


def _starts(workload: Workload, count: int) -> np.ndarray:
    return workload.group_start if workload.group_start is not None else np.zeros(count, dtype=np.int64)


def _segments_of(path: list[int], start: np.ndarray, prefix_len: int, block_size: int) -> list[tuple[int, int, int]]:
    """(group, first block, end block) of each group on a request's path that holds at least one of its full
    shared blocks: a block belongs to the group whose line holds its last token."""
    out = []
    shared_blocks = prefix_len // block_size
    for k, g in enumerate(path):
        first = int(start[g]) // block_size
        end = int(start[path[k + 1]]) // block_size if k + 1 < len(path) else shared_blocks
        end = min(end, shared_blocks)
        if end > first:
            out.append((g, first, end))
    return out


def content_chains(workload: Workload, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(chain_at int64 [requests + 1], chain int64 [segments, 2]): request r's segments are rows
    chain_at[r]..chain_at[r + 1] of `chain`, each (end block, id offset); block j < the last end belongs to the
    first segment it ends before, and its content id is that segment's offset + j. Content ids 0..(the largest
    offset + end) - 1 are shared ones; the core numbers every request's own blocks after them."""
    groups = workload.dense_groups()
    if not (workload.prefix_len > 0).any():  # nothing shared (every generated workload but the prefix idioms)
        return read_only(np.zeros(workload.num_requests + 1, dtype=np.int64)), read_only(np.zeros((0, 2), np.int64))
    paths = group_paths(workload)
    start = _starts(workload, len(paths))
    per_request = [(_segments_of(paths[g], start, int(p), block_size) if g >= 0 else [])
                   for g, p in zip(groups.tolist(), workload.prefix_len.tolist())]
    # Each group's id range: as many ids as the most blocks any request takes from it, counted from its first
    # block; ranges laid out in depth-first order, so a group's first child's ids follow its own.
    size = np.zeros(len(paths), dtype=np.int64)
    first_block = start // block_size
    for segments in per_request:
        for g, first, end in segments:
            size[g] = max(size[g], end - first)
    base = np.zeros(len(paths), dtype=np.int64)
    children: list[list[int]] = [[] for _ in paths]
    for g, path in enumerate(paths):
        if len(path) > 1:
            children[path[-2]].append(g)
    stack, at = [g for g in reversed(range(len(paths))) if len(paths[g]) == 1], 0
    while stack:
        g = stack.pop()
        base[g] = at
        at += int(size[g])
        stack.extend(reversed(children[g]))
    chain_at = np.zeros(workload.num_requests + 1, dtype=np.int64)
    rows: list[tuple[int, int]] = []
    for r, segments in enumerate(per_request):
        for g, _first, end in segments:
            offset = int(base[g] - first_block[g])
            if rows and len(rows) > chain_at[r] and rows[-1][1] == offset:
                rows[-1] = (end, offset)  # the previous group's ids run on into this one's
            else:
                rows.append((end, offset))
        chain_at[r + 1] = len(rows)
    chain = np.array(rows, dtype=np.int64).reshape(-1, 2)
    return read_only(chain_at), read_only(np.ascontiguousarray(chain))


def shared_prompt_tokens(workload: Workload, i: int, j: int) -> int:
    """How many leading prompt tokens requests i and j have in common (the tree's definition, spelled out)."""
    gi, gj = int(workload.dense_groups()[i]), int(workload.dense_groups()[j])
    if gi < 0 or gj < 0:
        return 0
    paths, pi, pj = group_paths(workload), int(workload.prefix_len[i]), int(workload.prefix_len[j])
    start = _starts(workload, len(paths))
    a, b = paths[gi], paths[gj]
    if a[0] != b[0]:
        return 0
    depth = 0
    while depth + 1 < min(len(a), len(b)) and a[depth + 1] == b[depth + 1]:
        depth += 1
    leave_i = int(start[a[depth + 1]]) if depth + 1 < len(a) else pi  # where i leaves the deepest common group
    leave_j = int(start[b[depth + 1]]) if depth + 1 < len(b) else pj
    return min(leave_i, leave_j, pi, pj)
