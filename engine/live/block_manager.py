"""Physical block ids for each request, mirroring the scheduler's block counts exactly.

The numba scheduler tracks only how many blocks each request holds (`req[r, HELD]`) and how many are
free. The live runner needs which ones: this mirror hands out ids 1..num_blocks-1 (0 is vLLM's null
block) from a FIFO free list, so recently freed pages are reused last and tables come out scattered,
as on a real server. Every pass it checks its free count against the scheduler's.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from kernels import scheduler_core as core


class BlockMirrorError(AssertionError):
    """The mirror and the scheduler disagree about block counts (a bug, never a user error)."""


class BlockManager:
    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.free_ids: deque[int] = deque(range(1, num_blocks))
        self.tables: dict[int, list[int]] = {}

    @property
    def num_free(self) -> int:
        return len(self.free_ids)

    def table(self, request: int) -> list[int]:
        return self.tables.get(request, [])

    def grow(self, request: int, num_blocks: int) -> None:
        """Extend the request's table to `num_blocks` pages (never shrinks)."""
        table = self.tables.setdefault(request, [])
        need = num_blocks - len(table)
        if need > len(self.free_ids):
            raise BlockMirrorError(f"request {request} needs {need} more blocks, {len(self.free_ids)} free")
        table.extend(self.free_ids.popleft() for _ in range(max(0, need)))

    def free(self, request: int) -> None:
        self.free_ids.extend(self.tables.pop(request, []))

    def after_schedule(self, plan, req: np.ndarray, state: np.ndarray) -> None:
        """Apply one `Scheduler.schedule()`: victims lose every page, scheduled requests grow to their count."""
        for r in plan.preempted:
            self.free(int(r))
        for r in plan.request_ids:
            r = int(r)
            self.grow(r, int(req[r, core.HELD]))
            if len(self.tables[r]) != int(req[r, core.HELD]):
                raise BlockMirrorError(f"request {r} holds {len(self.tables[r])} blocks, scheduler says "
                                       f"{int(req[r, core.HELD])}")
        self.check(state)

    def after_complete(self, outcome, state: np.ndarray) -> None:
        """Apply one `Scheduler.complete()`: finished requests return their pages."""
        for r in outcome.finished:
            self.free(int(r))
        self.check(state)

    def check(self, state: np.ndarray) -> None:
        if self.num_free != int(state[core.FREE_BLOCKS]):
            raise BlockMirrorError(f"{self.num_free} blocks free here, {int(state[core.FREE_BLOCKS])} in the scheduler")
