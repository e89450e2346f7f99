"""The step-at-a-time scheduler: vLLM's schedule() / update_from_output() over the numba core's tables.

An executor asks `schedule()` for a `StepPlan`, runs it (on a simulated clock or a real GPU), then hands
it back to `complete()`. Both executors therefore obey one set of rules, and produce one `trace_digest`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.config import RunConfig, check_servable, declared_max_tokens
from engine.workload import Workload
from kernels import scheduler_core as core


@dataclass(frozen=True)
class StepPlan:
    """One pass as the scheduler decided it. Arrays are copies; the executor may keep them."""

    index: int
    request_ids: np.ndarray  # scheduled requests, running ones first (admission order), then new admissions
    new_tokens: np.ndarray  # tokens each computes this pass (a prefill chunk, or 1 for a decode)
    computed_before: np.ndarray  # tokens each had already computed (its context before this pass)
    preempted: np.ndarray  # victims, in eviction order
    admitted: np.ndarray  # newly admitted or resumed request ids
    resumed: np.ndarray  # bool per admitted id: readmitted after a preemption
    record: np.ndarray  # the pass-table row (counts, blocks, live/held tokens)

    @property
    def num_seqs(self) -> int:
        return int(self.request_ids.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.new_tokens.sum())


@dataclass(frozen=True)
class StepOutcome:
    finished: np.ndarray
    caught_up: np.ndarray  # resumed requests whose recompute caught up with what they had lost
    first_token: np.ndarray  # requests whose prompt completed this pass (first output token)
    sampled: int


def scheduler_params(cfg: RunConfig) -> np.ndarray:
    params = np.zeros(core.NUM_PARAMS, dtype=np.int64)
    params[core.P_MAX_NUM_SEQS] = cfg.max_num_seqs
    params[core.P_TOKEN_BUDGET] = cfg.max_num_batched_tokens
    params[core.P_BLOCK_SIZE] = cfg.block_size
    params[core.P_USABLE_BLOCKS] = cfg.usable_blocks
    params[core.P_RESERVE] = 1 if cfg.allocation == "reserve" else 0
    params[core.P_REQUEST_UNIT] = 1 if cfg.unit == "request" else 0
    params[core.P_FULL_ISL] = 1 if cfg.scheduler_reserve_full_isl else 0
    return params


def reserve_tokens(cfg: RunConfig, workload: Workload) -> np.ndarray:
    """Orca's per-request reservation: prompt + declared max_tokens, in whole blocks of our paged pool.

    Rounding up to a block keeps Orca's promise (an admitted request never runs out) on a paged pool.
    """
    if cfg.allocation != "reserve":
        return np.zeros(workload.num_requests, dtype=np.int64)
    declared = declared_max_tokens(cfg, workload)
    bs = cfg.block_size
    return (-(-(workload.prompt_len + declared) // bs)) * bs


class Scheduler:
    """vLLM V1's scheduler for one run; each `schedule()` is one forward pass's decision."""

    def __init__(self, cfg: RunConfig, workload: Workload | None = None) -> None:
        self.config = cfg
        self.workload = workload if workload is not None else cfg.build_workload()
        check_servable(cfg, self.workload)
        self.params = scheduler_params(cfg)
        self.req, self.state, self.waiting, self.running = core.init_state(
            self.params, self.workload.prompt_len, self.workload.output_len, reserve_tokens(cfg, self.workload)
        )
        n = self.workload.num_requests
        self._out = {k: np.zeros(n, dtype=np.int64) for k in ("req", "new", "before", "pre", "adm", "fin", "cu", "first")}
        self._row = np.zeros(core.NUM_PASS_FIELDS, dtype=np.int64)
        self._pending: StepPlan | None = None
        self.num_passes = 0

    @property
    def finished(self) -> bool:
        return int(self.state[core.NUM_FINISHED]) == self.workload.num_requests

    @property
    def digest(self) -> str:
        return f"{int(self.state[core.DIGEST]) & 0xFFFFFFFFFFFFFFFF:016x}"

    def schedule(self) -> StepPlan:
        if self._pending is not None:
            raise RuntimeError("complete() the previous step before scheduling the next")
        o = self._out
        n_sched, n_pre, n_adm = core.schedule_step(
            self.params, self.req, self.state, self.waiting, self.running,
            o["req"], o["new"], o["before"], o["pre"], o["adm"],
        )
        core.pass_record(self.params, self.req, self.state, self.running, o["req"], o["new"], o["before"],
                         n_sched, n_pre, self._row)
        adm = o["adm"][:n_adm]
        plan = StepPlan(
            index=self.num_passes,
            request_ids=o["req"][:n_sched].copy(),
            new_tokens=o["new"][:n_sched].copy(),
            computed_before=o["before"][:n_sched].copy(),
            preempted=o["pre"][:n_pre].copy(),
            admitted=np.where(adm >= 0, adm, -adm - 1),
            resumed=adm < 0,
            record=self._row.copy(),
        )
        self._pending = plan
        return plan

    def complete(self, plan: StepPlan) -> StepOutcome:
        if plan is not self._pending:
            raise RuntimeError("complete() takes the plan the last schedule() returned")
        o = self._out
        n_fin, n_cu, n_sampled, n_first = core.complete_step(
            self.params, self.req, self.state, self.running, plan.request_ids, plan.num_seqs,
            o["fin"], o["cu"], o["first"],
        )
        plan.record[core.PASS_OUTPUT] = n_sampled
        self._pending = None
        self.num_passes += 1
        return StepOutcome(o["fin"][:n_fin].copy(), o["cu"][:n_cu].copy(), o["first"][:n_first].copy(),
                           int(n_sampled))

    def block_usage(self) -> float:
        """vLLM's get_usage(): share of usable blocks handed out."""
        usable = int(self.params[core.P_USABLE_BLOCKS])
        return 1.0 - int(self.state[core.FREE_BLOCKS]) / usable
