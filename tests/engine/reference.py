"""The scheduling rules once more, in plain Python written to be read: the oracle the numba core is tested against.

Same decisions as `kernels/scheduler_core.py`, stated with objects and lists the way vLLM's own
scheduler states them. Slow on purpose; nothing in the product calls it except the tests and benchmarks.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.config import RunConfig, check_servable
from engine.scheduler import MAX_PASSES, reserve_tokens
from engine.trace import format_digest
from engine.workload import Workload

_MASK = (1 << 64) - 1
_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211


def _mix(h: int, value: int) -> int:
    return ((h ^ (value & 0xFFFFFFFFFFFF)) * _FNV_PRIME) & _MASK


@dataclass
class Request:
    id: int
    prompt_len: int
    output_len: int
    reserve: int  # tokens reserved up front (reserve mode only)
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    blocks: int = 0
    status: str = "WAITING"  # WAITING, RUNNING, PREEMPTED, FINISHED
    preemptions: int = 0
    recomputed: int = 0
    recomputed_prompt: int = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens


@dataclass
class PassRecord:
    scheduled: list[tuple[int, int]] = field(default_factory=list)  # (request id, new tokens)
    preempted: list[int] = field(default_factory=list)
    output_tokens: int = 0


class ReferenceScheduler:
    def __init__(self, cfg: RunConfig, workload: Workload | None = None) -> None:
        self.cfg = cfg
        self.workload = workload if workload is not None else cfg.build_workload()
        check_servable(cfg, self.workload)
        reserve = reserve_tokens(cfg, self.workload)
        self.requests = [
            Request(i, int(p), int(o), int(reserve[i]))
            for i, (p, o) in enumerate(zip(self.workload.prompt_len, self.workload.output_len))
        ]
        self.waiting: deque[Request] = deque(self.requests)
        self.running: list[Request] = []
        self.free_blocks = cfg.usable_blocks
        self.pool_tokens = cfg.usable_blocks * cfg.block_size
        self.reserved = 0
        self.batch_open = False
        self.digest = _FNV_OFFSET
        self.passes: list[PassRecord] = []

    def preempt(self, victim: Request) -> None:
        self.free_blocks += victim.blocks
        victim.blocks = 0
        victim.recomputed += victim.num_computed_tokens
        victim.recomputed_prompt += min(victim.num_computed_tokens, victim.prompt_len)
        victim.num_computed_tokens = 0  # keeps its outputs; re-prefills prompt + outputs later
        victim.status = "PREEMPTED"
        victim.preemptions += 1
        self.waiting.appendleft(victim)

    def schedule(self) -> PassRecord:
        cfg = self.cfg
        record = PassRecord()
        budget = cfg.max_num_batched_tokens
        static = cfg.unit == "request"
        if static and not self.running and self.waiting:
            self.batch_open = True

        # Running requests first, in admission order.
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            n = min(req.num_tokens - req.num_computed_tokens, budget)
            need = self.cfg.blocks_for(req.num_computed_tokens + n) - req.blocks
            evicted_self = False
            while need > self.free_blocks:
                victim = self.running.pop()  # the newest admitted
                self.preempt(victim)
                record.preempted.append(victim.id)
                if victim is req:
                    evicted_self = True
                    break
            if evicted_self:
                break
            self.free_blocks -= need
            req.blocks += need
            record.scheduled.append((req.id, n))
            req.num_computed_tokens += n
            budget -= n
            i += 1

        # Then the waiting queue, head first, unless this pass preempted anybody.
        if not record.preempted and (not static or self.batch_open):
            stopped_for_budget = False
            while self.waiting:
                if budget <= 0:
                    stopped_for_budget = True
                    break
                if len(self.running) >= cfg.max_num_seqs:
                    break
                req = self.waiting[0]
                n = min(req.num_tokens - req.num_computed_tokens, budget)
                if cfg.allocation == "reserve" and self.reserved + req.reserve > self.pool_tokens:
                    break
                if cfg.scheduler_reserve_full_isl and self.cfg.blocks_for(req.num_tokens) > self.free_blocks:
                    break
                need = self.cfg.blocks_for(n)
                if need > self.free_blocks:
                    break
                self.waiting.popleft()
                self.running.append(req)
                req.status = "RUNNING"
                self.free_blocks -= need
                req.blocks += need
                if cfg.allocation == "reserve":
                    self.reserved += req.reserve
                record.scheduled.append((req.id, n))
                req.num_computed_tokens = n
                budget -= n
            if static and not stopped_for_budget:
                self.batch_open = False

        h = self.digest
        for rid, n in record.scheduled:
            h = _mix(h, rid * 1048576 + n)
        for rid in record.preempted:
            h = _mix(h, -rid - 1)
        self.digest = _mix(h, 0x7FFFFFFFFF)
        return record

    def complete(self, record: PassRecord) -> None:
        by_id = self.requests
        for rid, _ in record.scheduled:
            req = by_id[rid]
            if req.num_computed_tokens == req.num_tokens:
                record.output_tokens += 1
                req.num_output_tokens += 1
                if req.num_output_tokens >= req.output_len:
                    req.status = "FINISHED"
                    self.free_blocks += req.blocks
                    req.blocks = 0
                    if self.cfg.allocation == "reserve":
                        self.reserved -= req.reserve
        self.running = [r for r in self.running if r.status != "FINISHED"]

    def run(self, max_passes: int = MAX_PASSES, check: bool = True) -> list[PassRecord]:
        unfinished = len(self.requests)
        while unfinished and len(self.passes) < max_passes:
            record = self.schedule()
            self.complete(record)
            self.passes.append(record)
            unfinished = sum(r.status != "FINISHED" for r in self.requests)
            if check:  # block conservation, stated where the blocks are counted
                assert self.free_blocks + sum(r.blocks for r in self.running) == self.cfg.usable_blocks
        return self.passes

    @property
    def digest_hex(self) -> str:
        return format_digest(self.digest)
