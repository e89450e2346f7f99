"""vLLM V1's scheduling decision as a numba core: arrays in, arrays out, no Python objects.

One call of `schedule_step` is one `Scheduler.schedule()`; `complete_step` is `update_from_output()`
(sample a token where a sequence is caught up, finish, free). `run_to_completion` loops both with the
roofline clock so a whole run stays inside compiled code. The live executor drives the same two steps.
The plain-Python twin in `engine/reference.py` states the same rules for readers and for the tests.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from kernels import CACHE_COMPILED  # numba's cache, or none where nothing is writable

# Per-request columns of the `req` table.
PROMPT, OUTPUT, RESERVE, COMPUTED, GENERATED, HELD, STATUS, PREEMPTS, HIGH_WATER, RECOMPUTED, RECOMPUTED_PROMPT = range(11)
NUM_REQ_FIELDS = 11
# Request status (vLLM's RequestStatus, reduced to what the scheduler reads).
WAITING, RUNNING, FINISHED, PREEMPTED = 0, 1, 2, 3

# Scalars of the mutable `state` vector.
FREE_BLOCKS, RESERVED_TOKENS, WAIT_HEAD, WAIT_LEN, RUN_LEN, BATCH_OPEN, NUM_FINISHED, DIGEST, LIVE_TOKENS = range(9)
NUM_STATE_FIELDS = 9  # LIVE_TOKENS: computed tokens summed over running requests, kept incrementally

# Settings vector `params`.
P_MAX_NUM_SEQS, P_TOKEN_BUDGET, P_BLOCK_SIZE, P_USABLE_BLOCKS, P_RESERVE, P_REQUEST_UNIT, P_FULL_ISL = range(7)
NUM_PARAMS = 7

# Per-request events recorded for the trace.
EV_ADMIT, EV_RESUME, EV_PREEMPT, EV_FINISH, EV_CAUGHT_UP, EV_FIRST_TOKEN = range(6)

# Per-pass columns of the pass table written by run_to_completion / pass_record.
(PASS_SEQS, PASS_TOKENS, PASS_PREFILL, PASS_BLOCKS, PASS_PREEMPTED, PASS_RUNNING, PASS_WAITING,
 PASS_LIVE_TOKENS, PASS_HELD_SLOTS, PASS_RESERVED, PASS_OUTPUT, PASS_CONTEXT) = range(12)
NUM_PASS_FIELDS = 12

# Cost-model vector: overhead s, weight bytes, KV bytes/token, bandwidth B/s, FLOP/s, params, attention FLOPs/pair.
C_OVERHEAD, C_WEIGHT_BYTES, C_KV_BYTES, C_BANDWIDTH, C_FLOPS, C_PARAMS, C_ATTN = range(7)

FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def cdiv(a, b):
    return -(-a // b)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def mix(h, value):
    """One FNV-1a step over a 64-bit value: the schedule digest is a fold of these."""
    h = np.uint64(h) ^ np.uint64(value & 0xFFFFFFFFFFFF)
    return np.uint64(h * FNV_PRIME)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def init_state(params, prompt_len, output_len, reserve_tokens):
    """Fresh tables for a run: every request waiting in id order, every usable block free."""
    n = prompt_len.shape[0]
    req = np.zeros((n, NUM_REQ_FIELDS), dtype=np.int64)
    for i in range(n):
        req[i, PROMPT] = prompt_len[i]
        req[i, OUTPUT] = output_len[i]
        req[i, RESERVE] = reserve_tokens[i]
        req[i, STATUS] = WAITING
    waiting = np.arange(n).astype(np.int64)  # ring buffer; head at state[WAIT_HEAD]
    running = np.zeros(n, dtype=np.int64)  # admission order
    state = np.zeros(NUM_STATE_FIELDS, dtype=np.int64)
    state[FREE_BLOCKS] = params[P_USABLE_BLOCKS]
    state[WAIT_LEN] = n
    state[DIGEST] = np.int64(FNV_OFFSET)
    return req, state, waiting, running


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def _preempt(req, state, waiting, victim):
    """Recompute-style preemption: free every block, forget computed tokens, keep outputs, go first in line."""
    n = waiting.shape[0]
    state[FREE_BLOCKS] += req[victim, HELD]
    req[victim, HELD] = 0
    lost = req[victim, COMPUTED]
    state[LIVE_TOKENS] -= lost
    # Every computed token is thrown away and will be computed again on readmission.
    req[victim, RECOMPUTED] += lost
    req[victim, RECOMPUTED_PROMPT] += lost if lost < req[victim, PROMPT] else req[victim, PROMPT]
    if lost > req[victim, HIGH_WATER]:
        req[victim, HIGH_WATER] = lost
    req[victim, COMPUTED] = 0
    req[victim, STATUS] = PREEMPTED
    req[victim, PREEMPTS] += 1
    head = (state[WAIT_HEAD] - 1 + n) % n
    waiting[head] = victim
    state[WAIT_HEAD] = head
    state[WAIT_LEN] += 1


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def schedule_step(params, req, state, waiting, running,
                  out_req, out_new, out_before, out_preempted, out_admitted):
    """One scheduling decision. Returns (scheduled, preempted, admitted) counts; fills the out_ arrays.

    out_req/out_new/out_before: who runs, how many new tokens, how many were computed before.
    out_preempted: victims in eviction order. out_admitted: request ids admitted (resumed ones negated - 1).
    """
    n_req = waiting.shape[0]
    budget = params[P_TOKEN_BUDGET]
    bs = params[P_BLOCK_SIZE]
    n_sched = 0
    n_pre = 0
    n_adm = 0
    # Static batching: a new batch may open only when the previous one has fully drained.
    if params[P_REQUEST_UNIT] == 1 and state[RUN_LEN] == 0 and state[WAIT_LEN] > 0:
        state[BATCH_OPEN] = 1

    # Phase 1: running requests in admission order, each asking for what it lacks.
    # The hot loop keeps the pool counters in locals (synced around the rare preemption) so the compiler
    # can hold them in registers instead of re-reading the state array on every request.
    free = state[FREE_BLOCKS]
    live = state[LIVE_TOKENS]
    run_len = state[RUN_LEN]
    i = 0
    while i < run_len and budget > 0:
        r = running[i]
        computed = req[r, COMPUTED]
        want = req[r, PROMPT] + req[r, GENERATED] - computed
        n = want if want < budget else budget
        need = cdiv(computed + n, bs) - req[r, HELD]
        self_preempted = False
        if need > free:
            state[FREE_BLOCKS] = free
            state[LIVE_TOKENS] = live
            while need > state[FREE_BLOCKS]:
                # Allocation failed: evict the newest running request (possibly r itself).
                run_len -= 1
                state[RUN_LEN] = run_len
                victim = running[run_len]
                _preempt(req, state, waiting, victim)
                out_preempted[n_pre] = victim
                n_pre += 1
                if victim == r:
                    self_preempted = True
                    break
            free = state[FREE_BLOCKS]
            live = state[LIVE_TOKENS]
            if self_preempted:
                break
        if need > 0:
            free -= need
            req[r, HELD] += need
        out_req[n_sched] = r
        out_new[n_sched] = n
        out_before[n_sched] = computed
        n_sched += 1
        req[r, COMPUTED] = computed + n
        live += n
        budget -= n
        i += 1
    state[FREE_BLOCKS] = free
    state[LIVE_TOKENS] = live
    state[RUN_LEN] = run_len

    # Phase 2: admission from the head of waiting; a pass that preempted admits nobody.
    admit = n_pre == 0 and (params[P_REQUEST_UNIT] == 0 or state[BATCH_OPEN] == 1)
    if admit:
        closed = True  # why admission stopped: anything but an empty budget closes a static batch
        while state[WAIT_LEN] > 0:
            if budget <= 0:
                closed = False
                break
            if state[RUN_LEN] >= params[P_MAX_NUM_SEQS]:
                break
            r = waiting[state[WAIT_HEAD]]
            num_tokens = req[r, PROMPT] + req[r, GENERATED]
            n = num_tokens - req[r, COMPUTED]
            if n > budget:
                n = budget
            if params[P_RESERVE] == 1:
                # Orca: admit only if the whole declared footprint fits beside what is already reserved.
                if state[RESERVED_TOKENS] + req[r, RESERVE] > params[P_USABLE_BLOCKS] * bs:
                    break
            if params[P_FULL_ISL] == 1 and cdiv(num_tokens, bs) > state[FREE_BLOCKS]:
                break  # v0.33 gate: the whole sequence must fit, though only the chunk is allocated
            need = cdiv(n, bs)
            if need > state[FREE_BLOCKS]:
                break  # head-of-line blocking: nobody behind it is tried
            state[WAIT_HEAD] = (state[WAIT_HEAD] + 1) % n_req
            state[WAIT_LEN] -= 1
            running[state[RUN_LEN]] = r
            state[RUN_LEN] += 1
            out_admitted[n_adm] = r if req[r, STATUS] == WAITING else -r - 1
            n_adm += 1
            req[r, STATUS] = RUNNING
            state[FREE_BLOCKS] -= need
            req[r, HELD] += need
            if params[P_RESERVE] == 1:
                state[RESERVED_TOKENS] += req[r, RESERVE]
            out_req[n_sched] = r
            out_new[n_sched] = n
            out_before[n_sched] = 0
            n_sched += 1
            req[r, COMPUTED] = n
            state[LIVE_TOKENS] += n
            budget -= n
        if params[P_REQUEST_UNIT] == 1 and closed:
            state[BATCH_OPEN] = 0

    # Fold this pass into the schedule digest: who ran with how many tokens, and who was evicted.
    h = np.uint64(state[DIGEST])
    for k in range(n_sched):
        h = mix(h, out_req[k] * 1048576 + out_new[k])
    for k in range(n_pre):
        h = mix(h, -out_preempted[k] - 1)
    h = mix(h, 0x7FFFFFFFFF)  # pass separator
    state[DIGEST] = np.int64(h)
    return n_sched, n_pre, n_adm


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def complete_step(params, req, state, running, out_req, n_sched, out_finished, out_caught_up, out_first):
    """After the pass: caught-up sequences sample one token; those at their length finish and free.

    Returns (finished, caught_up, sampled, first) counts; out_caught_up lists resumed requests whose
    recompute just ended, out_first those that produced their first token (prompt done: TTFT).
    num_computed_tokens already advanced at schedule time, as in vLLM.
    """
    n_fin = 0
    n_cu = 0
    n_sampled = 0
    n_first = 0
    for k in range(n_sched):
        r = out_req[k]
        if req[r, HIGH_WATER] > 0 and req[r, COMPUTED] >= req[r, HIGH_WATER]:
            out_caught_up[n_cu] = r
            n_cu += 1
            req[r, HIGH_WATER] = 0  # report once per recovery
        if req[r, COMPUTED] == req[r, PROMPT] + req[r, GENERATED]:
            n_sampled += 1
            if req[r, GENERATED] == 0:
                out_first[n_first] = r
                n_first += 1
            req[r, GENERATED] += 1
            if req[r, GENERATED] >= req[r, OUTPUT]:
                req[r, STATUS] = FINISHED
                state[FREE_BLOCKS] += req[r, HELD]
                state[LIVE_TOKENS] -= req[r, COMPUTED]
                req[r, HELD] = 0
                if params[P_RESERVE] == 1:
                    state[RESERVED_TOKENS] -= req[r, RESERVE]
                out_finished[n_fin] = r
                n_fin += 1
    if n_fin > 0:
        # Drop finished requests from running, keeping admission order.
        w = 0
        for k in range(state[RUN_LEN]):
            r = running[k]
            if req[r, STATUS] != FINISHED:
                running[w] = r
                w += 1
        state[RUN_LEN] = w
        state[NUM_FINISHED] += n_fin
    return n_fin, n_cu, n_sampled, n_first


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def pass_record(params, req, state, running, out_req, out_new, out_before, n_sched, n_pre, row):
    """Fill one row of the pass table (after schedule_step, before complete_step)."""
    tokens = 0
    prefill = 0
    context = 0
    for k in range(n_sched):
        r = out_req[k]
        tokens += out_new[k]
        context += out_before[k] + out_new[k]
        # A decode is one token for a sequence that has already produced output; anything else is prefill.
        if not (out_new[k] == 1 and req[r, GENERATED] > 0 and out_before[k] == req[r, PROMPT] + req[r, GENERATED] - 1):
            prefill += out_new[k]
    held = params[P_USABLE_BLOCKS] - state[FREE_BLOCKS]  # every handed-out block belongs to a running request
    row[PASS_SEQS] = n_sched
    row[PASS_TOKENS] = tokens
    row[PASS_PREFILL] = prefill
    row[PASS_BLOCKS] = params[P_USABLE_BLOCKS] - state[FREE_BLOCKS]
    row[PASS_PREEMPTED] = n_pre
    row[PASS_RUNNING] = state[RUN_LEN]
    row[PASS_WAITING] = state[WAIT_LEN]
    row[PASS_LIVE_TOKENS] = state[LIVE_TOKENS]
    # Held slots: what the allocator has handed out (blocks x block size), or what Orca has reserved.
    row[PASS_HELD_SLOTS] = state[RESERVED_TOKENS] if params[P_RESERVE] == 1 else held * params[P_BLOCK_SIZE]
    row[PASS_RESERVED] = state[RESERVED_TOKENS]
    row[PASS_CONTEXT] = context


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def pass_seconds(cost, out_new, out_before, n_sched):
    """Roofline time of one pass: overhead + max(bytes / bandwidth, FLOPs / FLOP/s)."""
    new_tokens = 0.0
    context = 0.0
    pairs = 0.0
    for k in range(n_sched):
        n = float(out_new[k])
        c = float(out_before[k])
        new_tokens += n
        context += c + n
        pairs += n * c + n * (n + 1.0) * 0.5  # causal: token j attends to c + j keys
    if n_sched == 0:
        return 0.0
    bytes_moved = cost[C_WEIGHT_BYTES] + cost[C_KV_BYTES] * context
    flops = 2.0 * cost[C_PARAMS] * new_tokens + cost[C_ATTN] * pairs
    t_mem = bytes_moved / cost[C_BANDWIDTH]
    t_cmp = flops / cost[C_FLOPS]
    return cost[C_OVERHEAD] + (t_mem if t_mem > t_cmp else t_cmp)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def _grow2(a, rows):
    out = np.zeros((rows, a.shape[1]), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def _grow1(a, n):
    out = np.zeros(n, dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def _emit(events, n_ev, p, ids, count, kind):
    """Append `count` events of one kind for pass p; returns the new event count."""
    for k in range(count):
        events[n_ev, 0] = p
        events[n_ev, 1] = ids[k]
        events[n_ev, 2] = kind
        n_ev += 1
    return n_ev


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def run_to_completion(params, cost, prompt_len, output_len, reserve_tokens, max_passes):
    """Schedule, price and complete passes until every request finishes (or max_passes is hit).

    Returns (passes table, pass seconds, events (pass, request, kind), request table, final state).
    """
    req, state, waiting, running = init_state(params, prompt_len, output_len, reserve_tokens)
    n_req = prompt_len.shape[0]
    out_req = np.zeros(n_req, dtype=np.int64)
    out_new = np.zeros(n_req, dtype=np.int64)
    out_before = np.zeros(n_req, dtype=np.int64)
    out_pre = np.zeros(n_req, dtype=np.int64)
    out_adm = np.zeros(n_req, dtype=np.int64)
    out_fin = np.zeros(n_req, dtype=np.int64)
    out_cu = np.zeros(n_req, dtype=np.int64)
    out_first = np.zeros(n_req, dtype=np.int64)
    cap = 1024
    passes = np.zeros((cap, NUM_PASS_FIELDS), dtype=np.int64)
    seconds = np.zeros(cap, dtype=np.float64)
    ev_cap = 4 * n_req + 16
    events = np.zeros((ev_cap, 3), dtype=np.int64)
    n_ev = 0
    p = 0
    while state[NUM_FINISHED] < n_req and p < max_passes:
        n_sched, n_pre, n_adm = schedule_step(params, req, state, waiting, running,
                                              out_req, out_new, out_before, out_pre, out_adm)
        if p == cap:
            cap *= 2
            passes = _grow2(passes, cap)
            seconds = _grow1(seconds, cap)
        pass_record(params, req, state, running, out_req, out_new, out_before, n_sched, n_pre, passes[p])
        seconds[p] = pass_seconds(cost, out_new, out_before, n_sched)
        n_fin, n_cu, n_sampled, n_first = complete_step(params, req, state, running, out_req, n_sched,
                                                        out_fin, out_cu, out_first)
        passes[p, PASS_OUTPUT] = n_sampled
        if n_ev + n_pre + n_adm + n_fin + n_cu + n_first > ev_cap:
            ev_cap = 2 * ev_cap + n_pre + n_adm + n_fin + n_cu + n_first
            events = _grow2(events, ev_cap)
        # Event order within a pass matches TraceBuilder.add: preempt, admit/resume, caught up, first token, finish.
        n_ev = _emit(events, n_ev, p, out_pre, n_pre, EV_PREEMPT)
        for k in range(n_adm):
            a = out_adm[k]
            events[n_ev, 0] = p
            events[n_ev, 1] = a if a >= 0 else -a - 1
            events[n_ev, 2] = EV_ADMIT if a >= 0 else EV_RESUME
            n_ev += 1
        n_ev = _emit(events, n_ev, p, out_cu, n_cu, EV_CAUGHT_UP)
        n_ev = _emit(events, n_ev, p, out_first, n_first, EV_FIRST_TOKEN)
        n_ev = _emit(events, n_ev, p, out_fin, n_fin, EV_FINISH)
        p += 1
    return passes[:p], seconds[:p], events[:n_ev], req, state
