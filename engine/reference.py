"""The scheduling rules once more, in plain Python written to be read: the documented statement of what the
numba core (`kernels/scheduler_core.py`) decides, and the oracle the tests hold it to.

Same decisions as the core, stated with objects and lists the way vLLM's own scheduler states them. Slow on
purpose: nothing in the product calls it; the tests use it as their oracle and the benchmarks as a baseline.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.config import RunConfig, check_servable, served_requests
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
    prefix_group: int = -1
    prefix_len: int = 0
    # The prefix groups from its group's root down to it, each with the prompt token where it starts.
    group_path: list = field(default_factory=list)  # [(group, start token), ...]
    block_list: list = field(default_factory=list)  # with prefix caching: the Block objects it holds
    num_cached_blocks: int = 0
    most_computed: int = 0
    cache_hits: int = 0
    # Async scheduling: vLLM's num_output_placeholders, tokens scheduled to be sampled whose output is not
    # processed yet (num_computed_tokens counts their positions, num_output_tokens does not).
    placeholders: int = 0

    @property
    def num_tokens(self) -> int:
        return self.prompt_len + self.num_output_tokens


    def block_identity(self, j: int, block_size: int) -> tuple:
        """What vLLM's chained hash of full block j tells apart: while the block lies wholly inside the shared
        prefix, block j of the group whose line holds its last token (the deepest group of the request's path
        starting at or before it: a tree's child group leaves its parent there); else this request's own."""
        last_token = (j + 1) * block_size - 1
        if self.prefix_group >= 0 and last_token < self.prefix_len:
            holder = [g for g, start in self.group_path if start <= last_token][-1]
            return ("group", holder, j)
        return ("own", self.id, j)


@dataclass
class PassRecord:
    scheduled: list[tuple[int, int]] = field(default_factory=list)  # (request id, new tokens)
    samples: list[bool] = field(default_factory=list)  # per scheduled request: its chunk reaches its end
    preempted: list[int] = field(default_factory=list)
    output_tokens: int = 0
    admitted: list[tuple[int, int]] = field(default_factory=list)  # (request id, tokens from the prefix cache)
    lookups: list[tuple[int, int]] = field(default_factory=list)  # (tokens looked up, tokens hit), every lookup


@dataclass(eq=False)
class Block:
    id: int
    ref_cnt: int = 0
    identity: tuple | None = None  # its hash, while it has one


class BlockPool:
    """vLLM's BlockPool with prefix caching: a free queue in eviction order, hashes kept by freed blocks."""

    def __init__(self, usable: int) -> None:
        self.blocks = [Block(i) for i in range(usable + 1)]
        self.free_queue: OrderedDict[int, Block] = OrderedDict((b.id, b) for b in self.blocks[1:])  # 0: null
        self.cached: dict[tuple, list[Block]] = {}  # identity -> blocks holding it, first cached first

    @property
    def num_free(self) -> int:
        return len(self.free_queue)

    def lookup(self, req: Request, block_size: int) -> list[Block]:
        hits = []
        for j in range((req.num_tokens - 1) // block_size):
            holders = self.cached.get(req.block_identity(j, block_size))
            if not holders:
                break
            hits.append(holders[0])
        return hits

    def touch(self, blocks: list[Block]) -> None:
        for b in blocks:
            if b.ref_cnt == 0:
                del self.free_queue[b.id]
            b.ref_cnt += 1

    def take(self, count: int) -> list[Block]:
        out = []
        for _ in range(count):
            _, b = self.free_queue.popitem(last=False)
            if b.identity is not None:  # reused: its old content is gone
                self.cached[b.identity].remove(b)
                if not self.cached[b.identity]:
                    del self.cached[b.identity]
                b.identity = None
            b.ref_cnt = 1
            out.append(b)
        return out

    def cache_full_blocks(self, req: Request, tokens: int, block_size: int) -> None:
        full = tokens // block_size
        for j in range(req.num_cached_blocks, full):
            b = req.block_list[j]
            b.identity = req.block_identity(j, block_size)
            self.cached.setdefault(b.identity, []).append(b)
        req.num_cached_blocks = max(req.num_cached_blocks, full)

    def free(self, req: Request) -> int:
        """Release req's blocks last first; returns how many went back to the free queue."""
        freed = 0
        for b in reversed(req.block_list):
            b.ref_cnt -= 1
            assert b.ref_cnt >= 0
            if b.ref_cnt == 0:
                self.free_queue[b.id] = b
                freed += 1
        req.block_list = []
        req.num_cached_blocks = 0
        return freed


def _path_of(workload: Workload, group: int) -> list[tuple[int, int]]:
    """(group, start token) from the root of `group`'s tree down to it; a group without a tree is its own root."""
    if group < 0 or workload.group_parent is None:
        return [(group, 0)]
    path = []
    while group >= 0:
        path.append((group, int(workload.group_start[group])))
        group = int(workload.group_parent[group])
    return path[::-1]


class ReferenceScheduler:
    def __init__(self, cfg: RunConfig, workload: Workload | None = None) -> None:
        self.cfg = cfg
        requested = workload if workload is not None else cfg.build_workload()
        check_servable(cfg, requested)
        self.workload = served_requests(cfg, requested)[0]  # requests beyond max_model_len are refused first
        reserve = reserve_tokens(cfg, self.workload)
        self.requests = [
            Request(i, int(p), int(o), int(reserve[i]), prefix_group=int(g), prefix_len=int(s),
                    group_path=_path_of(self.workload, int(g)))
            for i, (p, o, g, s) in enumerate(zip(self.workload.prompt_len, self.workload.output_len,
                                                 self.workload.prefix_group, self.workload.prefix_len))
        ]
        self.caching = cfg.enable_prefix_caching
        self.pool = BlockPool(cfg.usable_blocks) if self.caching else None
        self.waiting: deque[Request] = deque(self.requests)
        self.running: list[Request] = []
        self.free_blocks = cfg.usable_blocks
        self.pool_tokens = cfg.usable_blocks * cfg.block_size
        self.reserved = 0
        self.batch_open = False
        self.overlap = cfg.async_scheduling
        self.digest = _FNV_OFFSET
        self.passes: list[PassRecord] = []

    def release(self, req: Request) -> None:
        if self.caching:
            self.free_blocks += self.pool.free(req)
        else:
            self.free_blocks += req.blocks
        req.blocks = 0

    def take(self, req: Request, count: int) -> None:
        self.free_blocks -= count
        req.blocks += count
        if self.caching:
            req.block_list += self.pool.take(count)

    def count_recomputed(self, req: Request, begin: int, end: int) -> None:
        """With caching: tokens [begin, end) computed now that lie below the most it ever had are recomputed."""
        if begin < req.most_computed:
            req.recomputed += min(end, req.most_computed) - begin
            req.recomputed_prompt += max(0, min(end, req.most_computed, req.prompt_len) - begin)
        req.most_computed = max(req.most_computed, end)

    def preempt(self, victim: Request) -> None:
        self.release(victim)
        if not self.caching:  # every computed token will be computed again; with caching, counted as it is
            victim.recomputed += victim.num_computed_tokens
            victim.recomputed_prompt += min(victim.num_computed_tokens, victim.prompt_len)
        victim.num_computed_tokens = 0  # keeps its outputs; re-prefills prompt + outputs later
        victim.status = "PREEMPTED"
        victim.preemptions += 1
        self.waiting.appendleft(victim)

    def schedule(self) -> PassRecord:
        """One `Scheduler.schedule()`: running requests first, then (unless this pass preempted) the waiting queue."""
        record = PassRecord()
        static = self.cfg.unit == "request"
        if static and not self.running and self.waiting:
            self.batch_open = True
        budget = self.schedule_running(record, self.cfg.max_num_batched_tokens)
        if not record.preempted and (not static or self.batch_open):
            stopped_for_budget = self.admit_waiting(record, budget)
            if static and not stopped_for_budget:
                self.batch_open = False
        self.fold_digest(record)
        return record

    def schedule_running(self, record: PassRecord, budget: int) -> int:
        """Running requests in admission order, each asking for what it lacks; a block that cannot be had
        preempts the newest running request (perhaps the asker itself). Returns the budget left."""
        cfg = self.cfg
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            if self.overlap and req.placeholders > 0 and \
                    req.num_computed_tokens + 2 - req.placeholders >= req.prompt_len + req.output_len:
                i += 1  # async: its last token is in flight; no step past max_tokens (it keeps its blocks)
                continue
            want = req.num_tokens + req.placeholders - req.num_computed_tokens  # a decode runs on the placeholder
            n = min(want, budget)
            need = cfg.blocks_for(req.num_computed_tokens + n) - req.blocks
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
            self.take(req, need)
            if self.caching:  # (a placeholder's position holds no known token yet: not hashed)
                self.pool.cache_full_blocks(req, min(req.num_computed_tokens + n, req.num_tokens), cfg.block_size)
                self.count_recomputed(req, req.num_computed_tokens, req.num_computed_tokens + n)
            record.scheduled.append((req.id, n))
            record.samples.append(n == want)
            req.placeholders += self.overlap and n == want
            req.num_computed_tokens += n
            budget -= n
            i += 1
        return budget

    def admit_waiting(self, record: PassRecord, budget: int) -> bool:
        """The waiting queue from its head, with the budget left; True when it stopped for the budget."""
        cfg = self.cfg
        while self.waiting:
            if budget <= 0:
                return True
            if len(self.running) >= cfg.max_num_seqs:
                return False
            req = self.waiting[0]
            hits = self.pool.lookup(req, cfg.block_size) if self.caching else []
            cached = len(hits) * cfg.block_size
            if self.caching:
                record.lookups.append((req.num_tokens, cached))
            n = min(req.num_tokens - cached, budget)
            if cfg.allocation == "reserve" and self.reserved + req.reserve > self.pool_tokens:
                return False
            idle_hits = sum(b.ref_cnt == 0 for b in hits)  # taking them shrinks the free queue
            # v0.33's full-prompt gate, counting cache hits as allocate_slots does (get_num_blocks_to_allocate)
            if cfg.scheduler_reserve_full_isl and \
                    cfg.blocks_for(req.num_tokens) - len(hits) + idle_hits > self.free_blocks:
                return False
            need = cfg.blocks_for(cached + n) - len(hits)
            if need + idle_hits > self.free_blocks:
                return False
            self.waiting.popleft()
            self.running.append(req)
            req.status = "RUNNING"
            if self.caching:
                self.pool.touch(hits)
                self.free_blocks -= idle_hits
                req.block_list = list(hits)
                req.blocks = req.num_cached_blocks = len(hits)
                req.cache_hits += cached
            self.take(req, need)
            if self.caching:
                self.pool.cache_full_blocks(req, cached + n, cfg.block_size)
                self.count_recomputed(req, cached, cached + n)
            if cfg.allocation == "reserve":
                self.reserved += req.reserve
            record.scheduled.append((req.id, n))
            record.samples.append(cached + n == req.num_tokens)
            req.placeholders = int(self.overlap and cached + n == req.num_tokens)
            record.admitted.append((req.id, cached))
            req.num_computed_tokens = cached + n
            budget -= n
        return False

    def fold_digest(self, record: PassRecord) -> None:
        """The schedule's digest, as the core folds it: every (request, tokens), then every preempted id."""
        h = self.digest
        for rid, n in record.scheduled:
            h = _mix(h, rid * 1048576 + n)
        for rid in record.preempted:
            h = _mix(h, -rid - 1)
        self.digest = _mix(h, 0x7FFFFFFFFF)

    def complete(self, record: PassRecord) -> None:
        """`update_from_output()`: every request whose chunk reached its end gets its token; those at their length
        finish and free their blocks. With async scheduling this runs after the next pass was scheduled: a
        request preempted in between keeps its token (and may finish, in waiting)."""
        by_id = self.requests
        for (rid, n), samples in zip(record.scheduled, record.samples):
            req = by_id[rid]
            if not samples:
                continue
            record.output_tokens += 1
            req.num_output_tokens += 1
            if self.overlap:
                req.placeholders -= 1
                if self.caching and req.status == "RUNNING":  # vLLM caches what the token made known
                    self.pool.cache_full_blocks(req, req.num_computed_tokens - req.placeholders, self.cfg.block_size)
            if req.num_output_tokens >= req.output_len:
                req.status = "FINISHED"
                self.release(req)
                if self.cfg.allocation == "reserve":
                    self.reserved -= req.reserve
        self.running = [r for r in self.running if r.status != "FINISHED"]
        if any(r.status == "FINISHED" for r in self.waiting):
            self.waiting = deque(r for r in self.waiting if r.status != "FINISHED")

    def run(self, max_passes: int = MAX_PASSES, check: bool = True, arrival_s: Sequence[float] | None = None,
            starts: Sequence[float] | None = None) -> list[PassRecord]:
        """Schedule and complete until every request finished. With async scheduling in the batch queue's order
        (vLLM's EngineCore.step_with_batch_queue, two batches): schedule pass p, then complete pass p - 1; a
        schedule that finds nothing to run while a pass is in flight is no pass, only that pass's completion.

        With `arrival_s` (per request) and `starts` (each pass's start, from a clock this class does not keep),
        a request joins waiting before the first pass that starts at or after its arrival."""
        unfinished = len(self.requests)
        in_flight: PassRecord | None = None
        arriving = deque(self.waiting) if arrival_s is not None else deque()
        if arrival_s is not None:
            self.waiting.clear()
        while unfinished and len(self.passes) < max_passes:
            while arriving and arrival_s[arriving[0].id] <= starts[len(self.passes)]:
                self.waiting.append(arriving.popleft())
            digest = self.digest
            record = self.schedule()
            if not self.overlap:
                self.complete(record)
                self.passes.append(record)
            elif in_flight is not None and not record.scheduled and not record.preempted:
                self.digest = digest
                self.complete(in_flight)
                in_flight = None
            else:
                self.passes.append(record)
                if in_flight is not None:
                    self.complete(in_flight)
                in_flight = record
            unfinished = sum(r.status != "FINISHED" for r in self.requests)
            if check:  # block conservation, stated where the blocks are counted
                self.check_blocks()
        if in_flight is not None:
            self.complete(in_flight)
        return self.passes

    def check_blocks(self) -> None:
        if not self.caching:
            assert self.free_blocks + sum(r.blocks for r in self.running) == self.cfg.usable_blocks
            return
        # Every block is free (reference count 0) or referenced exactly as often as running requests hold it.
        refs: dict[int, int] = {}
        for r in self.running:
            assert len(r.block_list) == r.blocks
            for b in r.block_list:
                refs[b.id] = refs.get(b.id, 0) + 1
        for b in self.pool.blocks[1:]:
            assert b.ref_cnt == refs.get(b.id, 0) >= 0
            assert (b.id in self.pool.free_queue) == (b.ref_cnt == 0)
        assert self.free_blocks == self.pool.num_free == self.cfg.usable_blocks - len(refs)

    @property
    def digest_hex(self) -> str:
        return format_digest(self.digest)
