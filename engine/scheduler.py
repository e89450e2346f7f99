"""The scheduler boundary: vLLM's schedule() / update_from_output() over the numba core's tables.

The core owns the scheduling state and the block tables. An executor asks `schedule()` for a `StepPlan`
(who runs, how many tokens on top of how many, who samples, which blocks each holds), runs it on some
clock, and hands it back to `complete()` with the pass's duration. The scheduler keeps the run's record
and turns it into the `Trace`. Nothing outside `engine/` reads the core's arrays.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from engine.config import RunConfig, check_servable, declared_max_tokens, served_requests
from engine.prefix_tree import content_chains
from engine.trace import Trace, format_digest
from engine.workload import Workload, read_only
from kernels import scheduler_core as core

# Safety cap: progress is guaranteed (the oldest running request can always evict the rest), so this only
# stops a bug from hanging a server thread.
MAX_PASSES = 2_000_000


class SimulationError(RuntimeError):
    """The run did not finish within the pass cap."""


@dataclass(frozen=True)
class StepPlan:
    """One pass as the scheduler decided it. Arrays are copies; the executor may keep them."""

    index: int
    request_ids: np.ndarray  # scheduled requests, running ones first (admission order), then new admissions
    new_tokens: np.ndarray  # tokens each computes this pass (a prefill chunk, or 1 for a decode)
    computed_before: np.ndarray  # tokens each had already computed (its context before this pass)
    samples: np.ndarray  # bool: the pass reaches the end of what the request has, so it samples a token
    preempted: np.ndarray  # victims, in eviction order
    admitted: np.ndarray  # newly admitted or resumed request ids, in admission order
    resumed: np.ndarray  # bool per admitted id: readmitted after a preemption
    cached: np.ndarray  # per admitted id: tokens it starts with from the prefix cache (its blocks' first ones)
    block_tables: np.ndarray  # int64 [seqs, width]: each one's physical blocks in order, padded with block 0
    num_blocks: np.ndarray  # how many blocks of its row each holds

    @property
    def num_seqs(self) -> int:
        return int(self.request_ids.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.new_tokens.sum())


@dataclass(frozen=True)
class StepOutcome:
    finished: np.ndarray
    first_token: np.ndarray  # requests whose prompt completed this pass (their first output token)
    sampled: int


class RequestView(NamedTuple):
    """One request as the scheduler sees it now (vLLM's names)."""

    num_computed_tokens: int
    num_output_tokens: int
    num_blocks: int
    num_preemptions: int


class Tables(NamedTuple):
    """The core's state for one run (see kernels/scheduler_core.new_tables)."""

    req: np.ndarray
    state: np.ndarray
    queues: np.ndarray
    blocks: np.ndarray


def scheduler_params(cfg: RunConfig, block_ids: bool = True) -> np.ndarray:
    """The core's settings vector; block_ids=False counts blocks without naming them (the fast path, not
    available with prefix caching: a hit is a particular block)."""
    params = np.zeros(core.NUM_PARAMS, dtype=np.int64)
    params[core.P_MAX_NUM_SEQS] = cfg.max_num_seqs
    params[core.P_TOKEN_BUDGET] = cfg.max_num_batched_tokens
    params[core.P_BLOCK_SIZE] = cfg.block_size
    params[core.P_USABLE_BLOCKS] = cfg.usable_blocks
    params[core.P_RESERVE] = cfg.allocation == "reserve"
    params[core.P_REQUEST_UNIT] = cfg.unit == "request"
    params[core.P_FULL_ISL] = bool(cfg.scheduler_reserve_full_isl)
    params[core.P_BLOCK_IDS] = block_ids or cfg.enable_prefix_caching
    params[core.P_PREFIX_CACHING] = cfg.enable_prefix_caching
    params[core.P_ASYNC] = cfg.async_scheduling
    return params


def new_tables(params: np.ndarray, cfg: RunConfig, workload: Workload) -> tuple:
    """The core's fresh tables for `workload` (its prefix groups as the core's content chains)."""
    return core.new_tables(params, workload.prompt_len, workload.output_len, reserve_tokens(cfg, workload),
                           *content_chains(workload, cfg.block_size))


def reserve_tokens(cfg: RunConfig, workload: Workload) -> np.ndarray:
    """Orca's per-request reservation: prompt + declared max_tokens, in whole blocks of our paged pool.

    Rounding up to a block keeps Orca's promise (an admitted request never runs out) on a paged pool.
    """
    if cfg.allocation != "reserve":
        return read_only(np.zeros(workload.num_requests, dtype=np.int64))
    return read_only(core.cdiv(workload.prompt_len + declared_max_tokens(cfg, workload), cfg.block_size)
                     * cfg.block_size)


def trace_from_tables(cfg: RunConfig, workload: Workload, passes: np.ndarray, seconds: np.ndarray,
                      events: np.ndarray, tables, starts: np.ndarray, sampled: np.ndarray, arrivals: np.ndarray,
                      **measured) -> Trace:
    """The Trace of a finished run, from the core's record of it (pass starts, the request of each output token
    in the order produced, arrivals)."""
    req, state = tables[0], tables[1]
    if int(state[core.NUM_FINISHED]) != workload.num_requests:
        raise SimulationError(f"run stopped after {MAX_PASSES:,} passes with requests unfinished")
    return Trace(cfg, workload, passes, seconds, events, req.copy(), format_digest(int(state[core.DIGEST])),
                 starts=starts if len(arrivals) else None,  # all at once: back to back, derived from durations
                 sampled=sampled, arrivals=arrivals, **measured)


class Scheduler:
    """vLLM V1's scheduler for one run; each `schedule()` is one forward pass's decision."""

    def __init__(self, cfg: RunConfig, workload: Workload | None = None) -> None:
        self.config = cfg
        requested = workload if workload is not None else cfg.build_workload()
        check_servable(cfg, requested)
        # Requests longer than max_model_len are refused before they reach the scheduler (empty: all queued now).
        self.workload, self.arrivals, self.refused_requests = served_requests(cfg, requested)
        self.params = scheduler_params(cfg)
        self._tables = Tables(*new_tables(self.params, cfg, self.workload))
        if len(self.arrivals):
            core.hold_arrivals(self._tables.state)
        self.now = 0.0  # the start of the next pass, on the serving loop's clock
        n = self.workload.num_requests
        # Two halves with async scheduling: the batch queue's two passes (one scheduled, one in flight).
        self._outs = np.zeros((2, core.NUM_OUT_ROWS, n), dtype=np.int64)
        self._all_counts = np.zeros((2, core.NUM_COUNTS), dtype=np.int64)
        self._slot = 0  # the half the next schedule() writes
        self._passes = np.zeros((64, core.NUM_PASS_FIELDS), dtype=np.int64)
        self._seconds = np.zeros(64, dtype=np.float64)
        self._starts = np.zeros(64, dtype=np.float64)
        # The request of each output token in the order produced (written by the core as it schedules).
        self._sampled = np.empty(int(self.workload.output_len.sum()), dtype=np.int32)
        self._events = np.zeros((8 * n + 16, core.NUM_EVENT_FIELDS), dtype=np.int64)
        self._num_events = 0
        self._pending: list[tuple[StepPlan, int]] = []  # scheduled, output not processed: (plan, its half), oldest first
        self._digest_before = 0  # the digest before the last schedule() (discard() puts it back)
        self.num_scheduled = 0  # passes scheduled (and kept)
        self.num_passes = 0  # passes whose output has been processed

    @property
    def finished(self) -> bool:
        return int(self._tables.state[core.NUM_FINISHED]) == self.workload.num_requests

    @property
    def digest(self) -> str:
        return format_digest(int(self._tables.state[core.DIGEST]))

    @property
    def free_blocks(self) -> int:
        return int(self._tables.state[core.FREE_BLOCKS])

    def request(self, r: int) -> RequestView:
        row = self._tables.req[r]
        return RequestView(int(row[core.COMPUTED]), int(row[core.GENERATED]), int(row[core.HELD]),
                           int(row[core.PREEMPTS]))

    def running_ids(self) -> np.ndarray:
        """Running requests in admission order."""
        return self._tables.queues[core.RUN_Q, :self._tables.state[core.RUN_LEN]].copy()

    def waiting_ids(self) -> np.ndarray:
        """Waiting requests, head first."""
        state, n = self._tables.state, self.workload.num_requests
        return self._tables.queues[core.WAIT_Q, (state[core.WAIT_HEAD] + np.arange(state[core.WAIT_LEN])) % n]

    def block_table(self, request: int) -> np.ndarray:
        """The physical blocks `request` holds now, in order (empty when it holds none)."""
        return core.gather_tables(self._tables.req, self._tables.blocks, np.array([request]), 1)[0]

    def add_arrivals(self, now: float) -> float:
        """Let in every request that has arrived by `now` (vLLM adds requests between steps); returns when the
        next pass starts: `now`, or the next arrival if nothing is running or waiting until then."""
        self.now = float(core.add_arrivals(self.arrivals, self._tables.state, self._tables.queues, now))
        return self.now

    def block_ref_counts(self) -> np.ndarray:
        """With prefix caching: each block id's reference count (how many requests hold it); else empty."""
        if not self.config.enable_prefix_caching:
            return np.zeros(0, dtype=np.int64)
        state, size = self._tables.state, int(self._tables.state[core.RING_CAP]) + 1
        at = int(state[core.CACHE_AT]) + core.R_REF
        return self._tables.blocks[at:at + size * core.NUM_BLOCK_REGIONS:core.NUM_BLOCK_REGIONS].copy()

    @property
    def in_flight(self) -> int:
        """Passes scheduled whose output has not been processed (at most 1, or 2 with async scheduling)."""
        return len(self._pending)

    def schedule(self) -> StepPlan:
        if len(self._pending) >= (2 if self.config.async_scheduling else 1):
            raise RuntimeError("complete() the previous step before scheduling the next")
        p = self.num_scheduled
        if p == self._passes.shape[0]:
            self._passes = core.grow_rows(self._passes, 2 * p)
            self._seconds = core.grow_rows(self._seconds, 2 * p)
            self._starts = core.grow_rows(self._starts, 2 * p)
        self._starts[p] = self.now
        o, c = self._outs[self._slot], self._all_counts[self._slot]
        self._digest_before = int(self._tables.state[core.DIGEST])
        core.begin_pass(self.params, *self._tables, o, c, self._passes, p, self._sampled)
        n_sched, n_adm = c[core.N_SCHED], c[core.N_ADM]
        ids = o[core.OUT_REQ, :n_sched].copy()
        plan = StepPlan(
            index=p, request_ids=ids, new_tokens=o[core.OUT_NEW, :n_sched].copy(),
            computed_before=o[core.OUT_BEFORE, :n_sched].copy(), samples=o[core.OUT_SAMPLE, :n_sched].astype(bool),
            preempted=o[core.OUT_PRE, :c[core.N_PRE]].copy(), admitted=o[core.OUT_ADM, :n_adm].copy(),
            resumed=o[core.OUT_RESUMED, :n_adm].astype(bool), cached=o[core.OUT_CACHED, :n_adm].copy(),
            block_tables=core.gather_tables(self._tables.req, self._tables.blocks, ids, n_sched),
            num_blocks=self._tables.req[ids, core.HELD],
        )
        self._pending.append((plan, self._slot))
        self.num_scheduled += 1
        if self.config.async_scheduling:
            self._slot = 1 - self._slot
        return plan

    def discard(self, plan: StepPlan) -> None:
        """Forget the pass just scheduled, which scheduled and preempted nothing (async scheduling: vLLM's empty
        batch while a pass is in flight is no pass)."""
        if not self._pending or plan is not self._pending[-1][0] or plan.num_seqs or len(plan.preempted):
            raise RuntimeError("discard() takes an empty plan the last schedule() returned")
        self._tables.state[core.DIGEST] = self._digest_before
        self._slot = self._pending.pop()[1]
        self.num_scheduled -= 1

    def ran(self, plan: StepPlan, seconds: float) -> None:
        """The pass `plan` ran in `seconds`: the clock moves on (before its output is processed, with async)."""
        self._seconds[plan.index] = seconds
        self.now += seconds

    def complete(self, plan: StepPlan, seconds: float | None = 0.0) -> StepOutcome:
        """Sample, finish and free after the pass `plan` ran in `seconds` (None: ran() has said it); record the
        pass. Passes complete in the order they were scheduled."""
        if not self._pending or plan is not self._pending[0][0]:
            raise RuntimeError("complete() takes the oldest plan schedule() returned")
        n = self.workload.num_requests
        if self._num_events + 5 * n > self._events.shape[0]:
            self._events = core.grow_rows(self._events, 2 * self._events.shape[0] + 5 * n)
        slot, p = self._pending.pop(0)[1], plan.index
        o, c = self._outs[slot], self._all_counts[slot]
        self._num_events = core.end_pass(self.params, *self._tables, o, c, self._passes, p, self._events,
                                         self._num_events)
        if seconds is not None:
            self.ran(plan, seconds)
        self.num_passes += 1
        return StepOutcome(o[core.OUT_FIN, :c[core.N_FIN]].copy(), o[core.OUT_FIRST, :c[core.N_FIRST]].copy(),
                           int(c[core.N_SAMPLED]))

    def trace(self, **measured) -> Trace:
        """What the run did so far, as a Trace (measured=True, live=... for a run on a GPU)."""
        p = self.num_passes
        sampled = self._sampled[:int(self._passes[:p, core.PASS_OUTPUT].sum())].copy()  # completed passes' tokens
        return trace_from_tables(self.config, self.workload, self._passes[:p].copy(), self._seconds[:p].copy(),
                                 self._events[:self._num_events].copy(), self._tables, self._starts[:p].copy(),
                                 sampled, self.arrivals, refused_requests=self.refused_requests, **measured)
