"""vLLM V1's scheduling decision as a numba core: arrays in, arrays out, no Python objects.

`begin_pass` is one `Scheduler.schedule()` (who runs, how many tokens, which blocks they hold);
`end_pass` is `update_from_output()` (sample where a sequence is caught up, finish, free) and writes the
pass's row and events. `run_to_completion` loops the two with the roofline clock inside compiled code;
`engine.scheduler.Scheduler` drives the same two functions one pass at a time for any other clock.
Only `engine/` imports this module; `engine/reference.py` states the same rules in plain Python.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from kernels import CACHE_COMPILED  # numba's cache, or none where nothing is writable
from kernels.heap import keep_freed_heap

keep_freed_heap()  # a run's tables reuse the last run's pages (see kernels/heap.py)

# Per-request columns of the `req` table; those every pass reads come first (one cache line of a row).
(PROMPT, OUTPUT, COMPUTED, GENERATED, HELD, STATUS, HIGH_WATER, NUM_CACHED, MOST_COMPUTED, TABLE_START, RESERVE,
 PREEMPTS, RECOMPUTED, RECOMPUTED_PROMPT, CHAIN_START, NUM_SHARED, CACHE_HITS, PLACEHOLDERS) = range(18)
NUM_REQ_FIELDS = 18
# PLACEHOLDERS (async scheduling only): vLLM's num_output_placeholders, tokens scheduled to be sampled whose
# output has not been processed yet; COMPUTED counts their positions, GENERATED does not.
# Prefix caching: NUM_SHARED is how many of the request's leading full blocks it may share with others, named by
# its content chain (engine/prefix_tree.py): segments (end block, content id offset) from CHAIN_START in the
# chain region of `blocks` (see new_tables), block j < NUM_SHARED taking the id offset + j of the first segment
# it ends before; NUM_CACHED how many of its blocks carry a hash,
# MOST_COMPUTED the most tokens it ever had computed (below it, computing is recomputing), CACHE_HITS the
# tokens it was served from the cache over all its admissions.
# Request status (vLLM's RequestStatus, reduced to what the scheduler reads).
WAITING, RUNNING, FINISHED, PREEMPTED = 0, 1, 2, 3

# Scalars of the mutable `state` vector. The free block queue is vLLM's: never-used ids in order
# (NEXT_FRESH onwards), then freed ids in the order they were freed (a ring).
(FREE_BLOCKS, RESERVED_TOKENS, WAIT_HEAD, WAIT_LEN, RUN_LEN, BATCH_OPEN, NUM_FINISHED, DIGEST, LIVE_TOKENS,
 NEXT_FRESH, RING_HEAD, RING_LEN, RING_CAP, FREE_HEAD, FREE_TAIL, CACHE_AT, OWN_CIDS, HIT_TOKENS, LOOKUP_QUERIES,
 LOOKUP_HITS, ARRIVED, SHARED_BLOCKS, SAMPLED_AT, CHAIN_AT) = range(24)
NUM_STATE_FIELDS = 24  # LIVE_TOKENS: computed tokens summed over running requests, kept incrementally
# ARRIVED: requests (in id = arrival order) added to waiting so far; new_tables adds them all at t = 0.
# With prefix caching the freed part of the free queue is a doubly linked list (a hit takes a block out of its
# middle): FREE_HEAD/FREE_TAIL (0 = empty; block 0 is never free). CACHE_AT: where the caching regions start
# in `blocks`; OWN_CIDS: first content id that belongs to one request alone (those below are shared ones').
# CHAIN_AT: where the content chains' segments start in `blocks`, two entries each (end block, id offset).
# HIT_TOKENS: tokens served from the cache at admissions; LOOKUP_*: every lookup, as vLLM's counters count.
# SHARED_BLOCKS: references beyond the first summed over blocks (a block two requests hold counts once): the
# held cache's live tokens count a shared prefix once, as its memory holds it once.
# SAMPLED_AT: output tokens logged so far in the `sampled` log (see begin_pass).

# Settings vector `params`.
# P_BLOCK_IDS: keep which blocks each request holds (an executor's page tables), not only how many.
(P_MAX_NUM_SEQS, P_TOKEN_BUDGET, P_BLOCK_SIZE, P_USABLE_BLOCKS, P_RESERVE, P_REQUEST_UNIT, P_FULL_ISL,
 P_BLOCK_IDS, P_PREFIX_CACHING, P_ASYNC) = range(10)
NUM_PARAMS = 10  # P_PREFIX_CACHING needs P_BLOCK_IDS (a hit is a particular block)
# P_ASYNC: vLLM's AsyncScheduler behind a batch queue of two (see run_to_completion): pass p + 1 is scheduled
# before pass p's output is processed, against placeholders.

# Per-request events (end_pass is the one place that says in which order a pass emits them).
EV_ADMIT, EV_RESUME, EV_PREEMPT, EV_FINISH, EV_CAUGHT_UP, EV_FIRST_TOKEN = range(6)

# Per-pass columns of the pass table.
(PASS_SEQS, PASS_TOKENS, PASS_PREFILL, PASS_BLOCKS, PASS_PREEMPTED, PASS_RUNNING, PASS_WAITING,
 PASS_LIVE_TOKENS, PASS_HELD_SLOTS, PASS_RESERVED, PASS_OUTPUT, PASS_CACHED, PASS_LOOKUP_QUERIES,
 PASS_LOOKUP_HITS) = range(14)
NUM_PASS_FIELDS = 14  # PASS_CACHED: tokens admissions were served from the cache; LOOKUP_*: this pass's lookups

# Cost-model vector, per GPU: overhead s, weight bytes, KV bytes/token, bandwidth B/s, FLOP/s, params, attention
# FLOPs/pair; with tensor parallelism, all-reduce bytes each GPU sends per new token and the link's B/s.
C_OVERHEAD, C_WEIGHT_BYTES, C_KV_BYTES, C_BANDWIDTH, C_FLOPS, C_PARAMS, C_ATTN, C_ALLREDUCE_BYTES, \
    C_LINK_BANDWIDTH, C_HOST = range(10)
NUM_COST_FIELDS = 10  # C_HOST: the host's share of C_OVERHEAD, which async scheduling overlaps (engine/cost_model.py)

FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)

# One pass's outputs: rows of the `out` table (overwritten every pass) and its `counts`.
(OUT_REQ, OUT_NEW, OUT_BEFORE, OUT_SAMPLE, OUT_PRE, OUT_ADM, OUT_RESUMED, OUT_FIN, OUT_CAUGHT_UP,
 OUT_FIRST, OUT_CACHED) = range(11)
NUM_OUT_ROWS = 11  # OUT_CACHED: per admission, the tokens it starts with from the prefix cache
N_SCHED, N_PRE, N_ADM, N_FIN, N_CU, N_FIRST, N_SAMPLED, N_QUERIES, N_HITS, N_CONTEXT, N_PAIRS = range(11)
NUM_COUNTS = 11  # N_CONTEXT, N_PAIRS: the pass's KV tokens read and attention query-key pairs (see pass_work)
# Columns of the `events` table: (pass, request, kind, tokens served from the cache for an admit/resume).
NUM_EVENT_FIELDS = 4
# Entries of `blocks` after CACHE_AT, NUM_BLOCK_REGIONS per block id (0..cap): reference count, content id
# (-1: no hash), free-list links, and links among blocks holding the same content (vLLM keeps every block of
# one hash, first cached first); then per content id the first and last block holding it (0: none).
(R_REF, R_HASH, R_FNEXT, R_FPREV, R_HNEXT, R_HPREV) = range(6)
NUM_BLOCK_REGIONS = 6
# Rows of the `queues` table: waiting (a ring; head at state[WAIT_HEAD]) and running (admission order).
WAIT_Q, RUN_Q = 0, 1


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def cdiv(a, b):
    return -(-a // b)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def mix(h, value):
    """One FNV-1a step over a 64-bit value: the schedule digest is a fold of these."""
    h = np.uint64(h) ^ np.uint64(value & 0xFFFFFFFFFFFF)
    return np.uint64(h * FNV_PRIME)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def new_tables(params, prompt_len, output_len, reserve_tokens, chain_at, chain):
    """Fresh tables (req, state, queues, blocks) for a run: every request waiting in id order, every
    usable block free.

    `blocks` holds the ring of freed ids (never more than the workload can use at once: STATE[RING_CAP])
    followed by each request's block table, with room for the most blocks it can ever hold (its last
    token is never fed back); without P_BLOCK_IDS nothing is named, so `blocks` is a stub. With prefix
    caching the caching regions follow (see R_REF), then the content chains: request r's segments are rows
    chain_at[r]..chain_at[r + 1] of `chain` (end block, content id offset; engine/prefix_tree.py).
    """
    n = prompt_len.shape[0]
    bs = params[P_BLOCK_SIZE]
    demand = 0
    for i in range(n):
        demand += cdiv(prompt_len[i] + output_len[i] - 1, bs)
    cap = max(1, min(demand, params[P_USABLE_BLOCKS]))
    req = np.zeros((n, NUM_REQ_FIELDS), dtype=np.int64)
    start = cap
    for i in range(n):
        req[i, PROMPT] = prompt_len[i]
        req[i, OUTPUT] = output_len[i]
        req[i, RESERVE] = reserve_tokens[i]
        req[i, STATUS] = WAITING
        req[i, TABLE_START] = start
        start += cdiv(prompt_len[i] + output_len[i] - 1, bs)
    state = np.zeros(NUM_STATE_FIELDS, dtype=np.int64)
    state[FREE_BLOCKS] = params[P_USABLE_BLOCKS]
    state[WAIT_LEN] = n
    state[DIGEST] = np.int64(FNV_OFFSET)
    state[NEXT_FRESH] = 1  # block 0 is vLLM's null block
    state[RING_CAP] = cap
    state[ARRIVED] = n
    queues = np.zeros((2, n), dtype=np.int64)
    for i in range(n):  # (a loop, not `= np.arange(n)`: see grow_rows)
        queues[WAIT_Q, i] = i
    if params[P_PREFIX_CACHING] == 0:  # (the ring and the tables are written before they are read)
        return req, state, queues, np.empty(start if params[P_BLOCK_IDS] else 1, dtype=np.int64)
    # Content ids: the shared ones the chains name, then every request's own blocks (by table slot).
    shared_ids = 0
    segments = chain.shape[0]
    for k in range(segments):
        shared_ids = max(shared_ids, chain[k, 0] + chain[k, 1])
    for i in range(n):
        req[i, CHAIN_START] = 2 * chain_at[i]
        req[i, NUM_SHARED] = chain[chain_at[i + 1] - 1, 0] if chain_at[i + 1] > chain_at[i] else 0
    state[OWN_CIDS] = shared_ids
    state[CACHE_AT] = start
    contents = shared_ids + start - cap
    state[CHAIN_AT] = start + NUM_BLOCK_REGIONS * (cap + 1) + 2 * contents
    blocks = np.empty(state[CHAIN_AT] + 2 * segments, dtype=np.int64)
    blocks[start:state[CHAIN_AT]] = 0
    blocks[start + R_HASH:start + NUM_BLOCK_REGIONS * (cap + 1):NUM_BLOCK_REGIONS] = -1
    for k in range(segments):
        blocks[state[CHAIN_AT] + 2 * k] = chain[k, 0]
        blocks[state[CHAIN_AT] + 2 * k + 1] = chain[k, 1]
    return req, state, queues, blocks


# -- prefix caching: vLLM's BlockPool over the `blocks` regions --------------------------------------------
# The helpers called once per admission, release or filled block are compiled once, not inlined into every
# caller: the hot loops stay small and a cold start compiles the caching code once.
# Those that take arrays are compiled without reference counting, as begin_pass is (see there): they never
# allocate, and the incref/decref of each array argument on each call is pure cost.
# Loops keep what they read of `state` in locals: a store into `blocks` may alias `state` as far as the
# compiler knows, so it would otherwise reload every scalar after every store.
@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _reg(base, region, b):
    """Index in `blocks` of block b's entry in a caching region, base = state[CACHE_AT] (a block's entries sit
    together: one cache line)."""
    return base + b * NUM_BLOCK_REGIONS + region


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _chead(state, cid):
    """Index in `blocks` of the first block holding content cid (the last is the next entry)."""
    return state[CACHE_AT] + NUM_BLOCK_REGIONS * (state[RING_CAP] + 1) + 2 * cid


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _own_ids(state, req, r):
    """Content id offset of request r's own blocks (past its shared ones): one id per slot of its table."""
    return state[OWN_CIDS] + req[r, TABLE_START] - state[RING_CAP]


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _content_id(blocks, req, r, j, own, seg):
    """(content id of request r's full block j, the segment cursor): what vLLM's chained block hash tells
    apart. Block j < NUM_SHARED takes the id of the first of r's segments it ends before (`seg` is the index
    in `blocks` of a segment at or before it: callers walk j upwards and keep the cursor); past them, its own."""
    if j >= req[r, NUM_SHARED]:
        return own + j, seg
    while j >= blocks[seg]:
        seg += 2
    return blocks[seg + 1] + j, seg


# The free queue and each content id's blocks are doubly linked lists threaded through two regions of the
# block entries (R_FNEXT/R_FPREV, R_HNEXT/R_HPREV); the caller keeps each list's first and last block.
@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _link_last(blocks, base, nxt, prv, b, last):
    """Block b after `last` (0: the list is empty) in the list threaded through regions nxt/prv."""
    blocks[_reg(base, nxt, b)] = 0
    blocks[_reg(base, prv, b)] = last
    if last:
        blocks[_reg(base, nxt, last)] = b


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _unlink(blocks, base, nxt, prv, b):
    """Take block b out of the list threaded through regions nxt/prv; returns its (previous, next), 0 where b
    was first or last (the caller then moves the list's first or last to the other)."""
    before = blocks[_reg(base, prv, b)]
    after = blocks[_reg(base, nxt, b)]
    if before:
        blocks[_reg(base, nxt, before)] = after
    if after:
        blocks[_reg(base, prv, after)] = before
    return before, after


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _free_remove(state, blocks, b):
    """Take block b out of the free queue (from anywhere: a hit takes a block from its middle)."""
    before, after = _unlink(blocks, state[CACHE_AT], R_FNEXT, R_FPREV, b)
    if not before:
        state[FREE_HEAD] = after
    if not after:
        state[FREE_TAIL] = before


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _uncache(state, blocks, b):
    """Drop block b's hash (lazy eviction, as it is reused)."""
    base = state[CACHE_AT]
    cid = blocks[_reg(base, R_HASH, b)]
    if cid < 0:
        return
    before, after = _unlink(blocks, base, R_HNEXT, R_HPREV, b)
    head = _chead(state, cid)
    if not before:
        blocks[head] = after
    if not after:
        blocks[head + 1] = before
    blocks[_reg(base, R_HASH, b)] = -1


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _cache_full_blocks(params, req, state, blocks, r, full):
    """Give a hash to each of r's first `full` blocks (all filled) that has none yet."""
    start = req[r, TABLE_START]
    base = state[CACHE_AT]
    heads = _chead(state, 0)
    own = _own_ids(state, req, r)
    seg = state[CHAIN_AT] + req[r, CHAIN_START]
    for j in range(req[r, NUM_CACHED], full):
        b = blocks[start + j]
        cid, seg = _content_id(blocks, req, r, j, own, seg)
        head = heads + 2 * cid
        last = blocks[head + 1]
        blocks[_reg(base, R_HASH, b)] = cid
        _link_last(blocks, base, R_HNEXT, R_HPREV, b, last)
        if not last:
            blocks[head] = b
        blocks[head + 1] = b
    if full > req[r, NUM_CACHED]:
        req[r, NUM_CACHED] = full


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def _lookup(params, req, state, blocks, r, num_tokens):
    """vLLM's find_longest_cache_hit: r's leading blocks that some block holds now, at most num_tokens - 1
    tokens' worth. Writes the hits into r's (empty) table; returns (hit blocks, hits sitting in the free queue)."""
    start = req[r, TABLE_START]
    base = state[CACHE_AT]
    heads = _chead(state, 0)
    own = _own_ids(state, req, r)
    seg = state[CHAIN_AT] + req[r, CHAIN_START]
    hits = 0
    evictable = 0
    for j in range((num_tokens - 1) // params[P_BLOCK_SIZE]):
        cid, seg = _content_id(blocks, req, r, j, own, seg)
        b = blocks[heads + 2 * cid]
        if b == 0:
            break
        blocks[start + j] = b
        hits += 1
        if blocks[_reg(base, R_REF, b)] == 0:
            evictable += 1
    return hits, evictable


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def _touch_hits(req, state, blocks, r, hits):
    """Take r's hit blocks (already in its table): one more reference each, out of the free queue if idle."""
    start = req[r, TABLE_START]
    for j in range(hits):
        b = blocks[start + j]
        at = _reg(state[CACHE_AT], R_REF, b)
        if blocks[at] == 0:
            _free_remove(state, blocks, b)
        else:
            state[SHARED_BLOCKS] += 1
        blocks[at] += 1
    req[r, HELD] = hits
    req[r, NUM_CACHED] = hits


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def _take_blocks_cached(params, req, state, blocks, r, count):
    """`count` blocks from the head of the free queue (never-used ids first), each dropping its old hash."""
    start = req[r, TABLE_START] + req[r, HELD]
    base = state[CACHE_AT]
    fresh = state[NEXT_FRESH]
    usable = params[P_USABLE_BLOCKS]
    for j in range(count):
        if fresh <= usable:
            b = fresh
            fresh += 1
        else:
            b = state[FREE_HEAD]
            _free_remove(state, blocks, b)
            _uncache(state, blocks, b)
        blocks[_reg(base, R_REF, b)] = 1
        blocks[start + j] = b
    state[NEXT_FRESH] = fresh
    req[r, HELD] += count


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def _release_blocks_cached(req, state, blocks, r):
    """vLLM's free: r's blocks last first, one reference fewer each; those left unreferenced go to the tail
    of the free queue with their hashes (so a request's prefix outlives its tail)."""
    start = req[r, TABLE_START]
    base = state[CACHE_AT]
    tail = state[FREE_TAIL]
    freed = 0
    for j in range(req[r, HELD] - 1, -1, -1):
        b = blocks[start + j]
        at = _reg(base, R_REF, b)
        blocks[at] -= 1
        if blocks[at] == 0:
            _link_last(blocks, base, R_FNEXT, R_FPREV, b, tail)
            if not tail:
                state[FREE_HEAD] = b
            tail = b
            freed += 1
    state[FREE_TAIL] = tail
    state[FREE_BLOCKS] += freed
    state[SHARED_BLOCKS] -= req[r, HELD] - freed
    req[r, HELD] = 0
    req[r, NUM_CACHED] = 0


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _take_blocks(params, req, state, blocks, r, count):
    """Hand `count` blocks from the head of the free queue to request r (the caller counts them)."""
    if params[P_PREFIX_CACHING]:
        _take_blocks_cached(params, req, state, blocks, r, count)
        return
    start = req[r, TABLE_START] + req[r, HELD]
    for j in range(count if params[P_BLOCK_IDS] else 0):
        if state[NEXT_FRESH] <= params[P_USABLE_BLOCKS]:  # never-used ids come before any freed one
            blocks[start + j] = state[NEXT_FRESH]
            state[NEXT_FRESH] += 1
        else:
            blocks[start + j] = blocks[state[RING_HEAD]]
            state[RING_HEAD] = (state[RING_HEAD] + 1) % state[RING_CAP]
            state[RING_LEN] -= 1
    req[r, HELD] += count


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _release_blocks(params, req, state, blocks, r):
    """Return every block of request r to the tail of the free queue, first block first."""
    if params[P_PREFIX_CACHING]:
        _release_blocks_cached(req, state, blocks, r)
        return
    held = req[r, HELD]
    start = req[r, TABLE_START]
    for j in range(held if params[P_BLOCK_IDS] else 0):
        blocks[(state[RING_HEAD] + state[RING_LEN]) % state[RING_CAP]] = blocks[start + j]
        state[RING_LEN] += 1
    state[FREE_BLOCKS] += held
    req[r, HELD] = 0


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _preempt(params, req, state, queues, blocks, victim):
    """Recompute-style preemption: free every block, forget computed tokens, keep outputs, go first in line."""
    if params[P_PREFIX_CACHING]:  # its own blocks are hashed now, as they go back (see _cache_filled); a
        # placeholder's position holds no known token yet, so its block is not hashed (vLLM caches up to
        # num_computed_tokens - num_output_placeholders)
        _cache_full_blocks(params, req, state, blocks, victim,
                           (req[victim, COMPUTED] - req[victim, PLACEHOLDERS]) // params[P_BLOCK_SIZE])
    _release_blocks(params, req, state, blocks, victim)
    lost = req[victim, COMPUTED]
    state[LIVE_TOKENS] -= lost
    # Every computed token is thrown away and will be computed again on readmission (with prefix caching,
    # only what the cache does not give back: counted as it is computed, in complete_step).
    if params[P_PREFIX_CACHING] == 0:
        req[victim, RECOMPUTED] += lost
        req[victim, RECOMPUTED_PROMPT] += lost if lost < req[victim, PROMPT] else req[victim, PROMPT]
    elif lost > req[victim, MOST_COMPUTED]:
        req[victim, MOST_COMPUTED] = lost
    if lost > req[victim, HIGH_WATER]:
        req[victim, HIGH_WATER] = lost
    req[victim, COMPUTED] = 0
    req[victim, STATUS] = PREEMPTED
    req[victim, PREEMPTS] += 1
    head = (state[WAIT_HEAD] - 1 + queues.shape[1]) % queues.shape[1]
    queues[WAIT_Q, head] = victim
    state[WAIT_HEAD] = head
    state[WAIT_LEN] += 1


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _schedule_running(params, req, state, queues, blocks, out, counts):
    """Running requests in admission order, each asking for what it lacks; returns the budget left.

    The hot loop keeps the pool counters in locals (synced around the rare preemption) so the compiler
    can hold them in registers instead of re-reading the state array on every request.
    """
    budget = params[P_TOKEN_BUDGET]
    bs = params[P_BLOCK_SIZE]
    caching = params[P_PREFIX_CACHING] != 0
    n_sched = 0
    n_pre = 0
    free = state[FREE_BLOCKS]
    live = state[LIVE_TOKENS]
    run_len = state[RUN_LEN]
    overlap = params[P_ASYNC] != 0
    i = 0
    while i < run_len and budget > 0:
        r = queues[RUN_Q, i]
        computed = req[r, COMPUTED]
        ph = req[r, PLACEHOLDERS]
        if overlap and ph > 0 and computed + 2 - ph >= req[r, PROMPT] + req[r, OUTPUT]:
            i += 1  # its last token is in flight: no step past max_tokens (it stays, holding its blocks)
            continue
        want = req[r, PROMPT] + req[r, GENERATED] + ph - computed  # a decode runs on the placeholder
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
                victim = queues[RUN_Q, run_len]
                _preempt(params, req, state, queues, blocks, victim)
                out[OUT_PRE, n_pre] = victim
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
            _take_blocks(params, req, state, blocks, r, need)
        out[OUT_REQ, n_sched] = r
        out[OUT_NEW, n_sched] = n
        out[OUT_BEFORE, n_sched] = computed
        out[OUT_SAMPLE, n_sched] = n == want  # caught up with everything it has: it samples a token
        n_sched += 1
        if caching and computed < req[r, MOST_COMPUTED]:
            _count_recomputed(req, r, computed, computed + n)
        if overlap and n == want:
            req[r, PLACEHOLDERS] = ph + 1
        req[r, COMPUTED] = computed + n
        if caching and req[r, NUM_CACHED] < req[r, NUM_SHARED] and \
                computed + n >= (req[r, NUM_CACHED] + 1) * bs:
            _cache_filled(params, req, state, blocks, r, computed + n)
        live += n
        budget -= n
        i += 1
    state[FREE_BLOCKS] = free
    state[LIVE_TOKENS] = live
    state[RUN_LEN] = run_len
    counts[N_SCHED] = n_sched
    counts[N_PRE] = n_pre
    return budget


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def _cache_filled(params, req, state, blocks, r, tokens):
    """Hash the shared-prefix blocks a request filled this pass, as it is scheduled (before anyone is admitted,
    so an admission can hit them). Hashing neither takes nor frees blocks, and the blocks it names are held, so
    nothing the running loop decides depends on it; only the order of the hash lists does (schedule order).

    A request's own blocks (past its shared prefix) are hashed only when it is preempted: only its own later
    lookup can hit them, and it looks up only after a preemption; the hash lists it could see then are the
    same as if each block had been hashed when filled (a finished request's own blocks are never looked up).
    Hashing every block as it fills cost the default run about 6%."""
    _cache_full_blocks(params, req, state, blocks, r, min(tokens // params[P_BLOCK_SIZE], req[r, NUM_SHARED]))


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _admit_waiting(params, req, state, queues, blocks, out, counts, budget):
    """Admission from the head of waiting, strictly in order (head-of-line blocking)."""
    bs = params[P_BLOCK_SIZE]
    n_sched = counts[N_SCHED]
    n_adm = 0
    closed = True  # why admission stopped: anything but an empty budget closes a static batch
    while state[WAIT_LEN] > 0:
        if budget <= 0:
            closed = False
            break
        if state[RUN_LEN] >= params[P_MAX_NUM_SEQS]:
            break
        r = queues[WAIT_Q, state[WAIT_HEAD]]
        num_tokens = req[r, PROMPT] + req[r, GENERATED]
        hits = 0
        evictable = 0
        if params[P_PREFIX_CACHING]:
            # Every lookup counts in vLLM's hit-rate counters, admitted or not.
            hits, evictable = _lookup(params, req, state, blocks, r, num_tokens)
            counts[N_QUERIES] += num_tokens
            counts[N_HITS] += hits * bs
        cached = hits * bs
        n = num_tokens - cached
        if n > budget:
            n = budget
        if params[P_RESERVE] == 1:
            # Orca: admit only if the whole declared footprint fits beside what is already reserved.
            if state[RESERVED_TOKENS] + req[r, RESERVE] > params[P_USABLE_BLOCKS] * bs:
                break
        if params[P_FULL_ISL] == 1 and cdiv(num_tokens, bs) - hits + evictable > state[FREE_BLOCKS]:
            # v0.33 gate: the whole sequence must fit, though only the chunk is allocated; blocks found in the
            # prefix cache are counted as allocate_slots counts them (get_num_blocks_to_allocate: a hit costs
            # nothing unless it is idle in the free queue)
            break
        # Hit blocks idle in the free queue leave it when taken, so they count against it too.
        need = cdiv(cached + n, bs) - hits + evictable
        if need > state[FREE_BLOCKS]:
            break  # nobody behind the head is tried
        state[WAIT_HEAD] = (state[WAIT_HEAD] + 1) % queues.shape[1]
        state[WAIT_LEN] -= 1
        queues[RUN_Q, state[RUN_LEN]] = r
        state[RUN_LEN] += 1
        out[OUT_ADM, n_adm] = r
        out[OUT_RESUMED, n_adm] = req[r, STATUS] == PREEMPTED
        out[OUT_CACHED, n_adm] = cached
        n_adm += 1
        req[r, STATUS] = RUNNING
        state[FREE_BLOCKS] -= need
        if params[P_PREFIX_CACHING]:
            _touch_hits(req, state, blocks, r, hits)
            _take_blocks(params, req, state, blocks, r, need - evictable)
            _cache_filled(params, req, state, blocks, r, cached + n)  # a later admission may hit them
            req[r, CACHE_HITS] += cached
            state[HIT_TOKENS] += cached
        else:
            _take_blocks(params, req, state, blocks, r, need)
        if params[P_RESERVE] == 1:
            state[RESERVED_TOKENS] += req[r, RESERVE]
        out[OUT_REQ, n_sched] = r
        out[OUT_NEW, n_sched] = n
        out[OUT_BEFORE, n_sched] = cached
        out[OUT_SAMPLE, n_sched] = cached + n == num_tokens
        n_sched += 1
        if params[P_PREFIX_CACHING] and cached < req[r, MOST_COMPUTED]:
            _count_recomputed(req, r, cached, cached + n)
        if params[P_ASYNC] and cached + n == num_tokens:
            req[r, PLACEHOLDERS] = 1
        req[r, COMPUTED] = cached + n
        state[LIVE_TOKENS] += cached + n
        budget -= n
    if params[P_REQUEST_UNIT] == 1 and closed:
        state[BATCH_OPEN] = 0
    counts[N_SCHED] = n_sched
    counts[N_ADM] = n_adm


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def schedule_step(params, req, state, queues, blocks, out, counts):
    """One scheduling decision (vLLM's Scheduler.schedule()); fills `out` and folds it into the digest."""
    # Static batching: a new batch may open only when the previous one has fully drained.
    if params[P_REQUEST_UNIT] == 1 and state[RUN_LEN] == 0 and state[WAIT_LEN] > 0:
        state[BATCH_OPEN] = 1
    budget = _schedule_running(params, req, state, queues, blocks, out, counts)
    counts[N_ADM] = 0
    counts[N_QUERIES] = 0
    counts[N_HITS] = 0
    # A pass that preempted admits nobody.
    if counts[N_PRE] == 0 and (params[P_REQUEST_UNIT] == 0 or state[BATCH_OPEN] == 1):
        _admit_waiting(params, req, state, queues, blocks, out, counts, budget)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def _count_recomputed(req, r, begin, end):
    """Tokens [begin, end) were computed below the most r ever had computed (MOST_COMPUTED, raised at each
    preemption: computing only grows in between): those below it are recomputed."""
    most = req[r, MOST_COMPUTED]
    req[r, RECOMPUTED] += min(end, most) - begin
    if begin < req[r, PROMPT]:
        req[r, RECOMPUTED_PROMPT] += min(end, most, req[r, PROMPT]) - begin


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def _drop_finished_waiting(req, state, queues):
    """Take finished requests out of the waiting ring, keeping its order (vLLM's waiting.remove_requests)."""
    n = queues.shape[1]
    head = state[WAIT_HEAD]
    w = 0
    for k in range(state[WAIT_LEN]):
        r = queues[WAIT_Q, (head + k) % n]
        if req[r, STATUS] != FINISHED:
            queues[WAIT_Q, (head + w) % n] = r
            w += 1
    state[WAIT_LEN] = w


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def complete_step(params, req, state, queues, blocks, out, counts):
    """After the pass (vLLM's update_from_output()): samplers get a token; those at their length finish.

    num_computed_tokens already advanced at schedule time, as in vLLM. Also lists resumed requests whose
    recompute just caught up with what they had lost, and requests that produced their first token.
    """
    n_fin = 0
    n_cu = 0
    n_sampled = 0
    n_first = 0
    n_fin_waiting = 0
    for k in range(counts[N_SCHED]):
        r = out[OUT_REQ, k]
        # (Recomputed tokens are counted as they are scheduled: with async scheduling a preemption may come
        # between a pass's schedule and its output.) The pass's own end, not COMPUTED: the next pass may
        # already have moved it on.
        if req[r, HIGH_WATER] > 0 and req[r, STATUS] == RUNNING and \
                out[OUT_BEFORE, k] + out[OUT_NEW, k] >= req[r, HIGH_WATER]:
            out[OUT_CAUGHT_UP, n_cu] = r
            n_cu += 1
            req[r, HIGH_WATER] = 0  # report once per recovery
        if out[OUT_SAMPLE, k]:
            n_sampled += 1
            if req[r, GENERATED] == 0:
                out[OUT_FIRST, n_first] = r
                n_first += 1
            req[r, GENERATED] += 1
            if params[P_ASYNC]:
                req[r, PLACEHOLDERS] -= 1
            if req[r, GENERATED] >= req[r, OUTPUT]:
                # Async: preempted since this pass was scheduled, it keeps the token and finishes in waiting.
                n_fin_waiting += req[r, STATUS] == PREEMPTED
                req[r, STATUS] = FINISHED
                state[LIVE_TOKENS] -= req[r, COMPUTED]
                _release_blocks(params, req, state, blocks, r)
                if params[P_RESERVE] == 1:
                    state[RESERVED_TOKENS] -= req[r, RESERVE]
                out[OUT_FIN, n_fin] = r
                n_fin += 1
    if n_fin > 0:
        # Drop finished requests from running, keeping admission order.
        w = 0
        for k in range(state[RUN_LEN]):
            r = queues[RUN_Q, k]
            if req[r, STATUS] != FINISHED:
                queues[RUN_Q, w] = r
                w += 1
        state[RUN_LEN] = w
        state[NUM_FINISHED] += n_fin
    if n_fin_waiting > 0:
        _drop_finished_waiting(req, state, queues)
    counts[N_FIN] = n_fin
    counts[N_CU] = n_cu
    counts[N_FIRST] = n_first
    counts[N_SAMPLED] = n_sampled


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _pass_row(params, req, state, out, counts, passes, p, sampled):
    """Row p of the pass table, taken right after scheduling. The same loop folds the pass into the schedule
    digest (who ran with how many tokens, and who was evicted), sums what the roofline clock reads and logs
    the requests that will sample a token (in schedule order, as they are produced)."""
    tokens = 0
    prefill = 0
    context = 0
    pairs = 0
    n_tok = state[SAMPLED_AT]
    h = np.uint64(state[DIGEST])
    for k in range(counts[N_SCHED]):
        r = out[OUT_REQ, k]
        n = out[OUT_NEW, k]
        c = out[OUT_BEFORE, k]
        tokens += n
        context += c + n
        pairs += _pairs(n, c)
        h = mix(h, r * 1048576 + n)
        if out[OUT_SAMPLE, k]:
            sampled[n_tok] = r
            n_tok += 1
        # A decode is one token for a sequence that has already produced output; anything else is prefill.
        # (With async scheduling its input is a placeholder: PLACEHOLDERS counts this pass's.)
        if not (n == 1 and c >= req[r, PROMPT] and c + 1 == req[r, PROMPT] + req[r, GENERATED] + req[r, PLACEHOLDERS]):
            prefill += n
    for k in range(counts[N_PRE]):
        h = mix(h, -out[OUT_PRE, k] - 1)
    state[DIGEST] = np.int64(mix(h, 0x7FFFFFFFFF))  # pass separator
    state[SAMPLED_AT] = n_tok
    counts[N_CONTEXT] = context
    counts[N_PAIRS] = pairs
    held = params[P_USABLE_BLOCKS] - state[FREE_BLOCKS]  # every handed-out block belongs to a running request
    passes[p, PASS_SEQS] = counts[N_SCHED]
    passes[p, PASS_TOKENS] = tokens
    passes[p, PASS_PREFILL] = prefill
    passes[p, PASS_BLOCKS] = held
    passes[p, PASS_PREEMPTED] = counts[N_PRE]
    passes[p, PASS_RUNNING] = state[RUN_LEN]
    passes[p, PASS_WAITING] = state[WAIT_LEN]
    passes[p, PASS_LIVE_TOKENS] = state[LIVE_TOKENS] - state[SHARED_BLOCKS] * params[P_BLOCK_SIZE]
    # Held slots: what the allocator has handed out (blocks x block size), or what Orca has reserved.
    passes[p, PASS_HELD_SLOTS] = state[RESERVED_TOKENS] if params[P_RESERVE] == 1 else held * params[P_BLOCK_SIZE]
    passes[p, PASS_RESERVED] = state[RESERVED_TOKENS]
    if params[P_PREFIX_CACHING]:
        cached = 0
        for k in range(counts[N_ADM]):
            cached += out[OUT_CACHED, k]
        passes[p, PASS_CACHED] = cached
        passes[p, PASS_LOOKUP_QUERIES] = counts[N_QUERIES]
        passes[p, PASS_LOOKUP_HITS] = counts[N_HITS]
        state[LOOKUP_QUERIES] += counts[N_QUERIES]
        state[LOOKUP_HITS] += counts[N_HITS]
    else:
        passes[p, PASS_CACHED] = passes[p, PASS_LOOKUP_QUERIES] = passes[p, PASS_LOOKUP_HITS] = 0


# begin_pass, end_pass and pass_seconds are compiled without numba's reference counting (_nrt=False): the
# caller owns every array they touch, and the atomic incref/decref numba otherwise puts around each array
# argument of each inlined helper cost the compiled run ~80 ns a pass (a third of a small pass). They must
# not allocate (np.zeros here fails to compile); a pass never needs to.
@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def begin_pass(params, req, state, queues, blocks, out, counts, passes, p, sampled):
    """Schedule pass p and record its row of `passes` (its outputs are added by end_pass); append the requests
    that sample in it to the `sampled` log (room for every output token of the run, int32)."""
    schedule_step(params, req, state, queues, blocks, out, counts)
    _pass_row(params, req, state, out, counts, passes, p, sampled)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _emit(events, n_ev, p, out, which, count, kind):
    for k in range(count):
        events[n_ev, 0] = p
        events[n_ev, 1] = out[which, k]
        events[n_ev, 2] = kind
        events[n_ev, 3] = 0
        n_ev += 1
    return n_ev


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def end_pass(params, req, state, queues, blocks, out, counts, passes, p, events, n_ev):
    """Complete pass p, count its output tokens into its row and append its events; returns the event count.

    The one statement of the event order within a pass: preempt, admit/resume, caught up, first token,
    finish. `events` must have room for 5 x requests more rows.
    """
    complete_step(params, req, state, queues, blocks, out, counts)
    passes[p, PASS_OUTPUT] = counts[N_SAMPLED]
    n_ev = _emit(events, n_ev, p, out, OUT_PRE, counts[N_PRE], EV_PREEMPT)
    for k in range(counts[N_ADM]):
        events[n_ev, 0] = p
        events[n_ev, 1] = out[OUT_ADM, k]
        events[n_ev, 2] = EV_RESUME if out[OUT_RESUMED, k] else EV_ADMIT
        events[n_ev, 3] = out[OUT_CACHED, k]
        n_ev += 1
    n_ev = _emit(events, n_ev, p, out, OUT_CAUGHT_UP, counts[N_CU], EV_CAUGHT_UP)
    n_ev = _emit(events, n_ev, p, out, OUT_FIRST, counts[N_FIRST], EV_FIRST_TOKEN)
    return _emit(events, n_ev, p, out, OUT_FIN, counts[N_FIN], EV_FINISH)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def hold_arrivals(state):
    """Empty the waiting queue of a fresh run: requests join it only as add_arrivals lets them in."""
    state[WAIT_LEN] = 0
    state[ARRIVED] = 0


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def add_arrivals(arrival, state, queues, now):
    """vLLM's engine loop between two steps: every request that has arrived by `now` joins the tail of
    waiting (in id order, ids being arrival order). With nothing running or waiting the clock first jumps
    to the next arrival. Returns the time the next pass starts."""
    n = arrival.shape[0]
    k = state[ARRIVED]
    if k < n and state[RUN_LEN] == 0 and state[WAIT_LEN] == 0 and arrival[k] > now:
        now = arrival[k]
    while k < n and arrival[k] <= now:
        queues[WAIT_Q, (state[WAIT_HEAD] + state[WAIT_LEN]) % queues.shape[1]] = k
        state[WAIT_LEN] += 1
        k += 1
    state[ARRIVED] = k
    return now


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def roofline(overhead, bandwidth, flop_rate, bytes_moved, flops):
    """The cost model: overhead + max(bytes / bandwidth, FLOPs / FLOP/s); scalars or arrays."""
    return overhead + np.maximum(bytes_moved / bandwidth, flops / flop_rate)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _pairs(n, c):
    """Attention's query-key pairs for a chunk of n tokens after c computed ones (token j attends to c + j keys)."""
    return n * c + n * (n + 1) // 2


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _work(cost, new, context, pairs):
    """(bytes moved, FLOPs) of a pass: weights plus every context token's KV read; 2 x params per new token plus
    attention's query-key pairs. The sums are integers, exact in float64 (far below 2**53)."""
    return (cost[C_WEIGHT_BYTES] + cost[C_KV_BYTES] * float(context),
            2.0 * cost[C_PARAMS] * float(new) + cost[C_ATTN] * float(pairs))


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _seconds(cost, n_sched, new, context, pairs):
    """Roofline time of a pass from its sums (0 for a pass that runs nothing), then its all-reduces (none on
    one GPU: the sum is left untouched)."""
    if n_sched == 0:
        return 0.0
    bytes_moved, flops = _work(cost, new, context, pairs)
    seconds = roofline(cost[C_OVERHEAD], cost[C_BANDWIDTH], cost[C_FLOPS], bytes_moved, flops)
    if cost[C_ALLREDUCE_BYTES] > 0.0:
        seconds += cost[C_ALLREDUCE_BYTES] * float(new) / cost[C_LINK_BANDWIDTH]
    return seconds


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def overlapped_seconds(cost, seconds):
    """A pass's time with async scheduling: the host's share (C_HOST: scheduling the next pass, processing the
    last one's output) runs while the GPU computes, so a pass costs its GPU part, or the host's if longer."""
    if seconds == 0.0:
        return 0.0
    gpu = seconds - cost[C_HOST]
    return gpu if gpu > cost[C_HOST] else cost[C_HOST]


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", inline="always")
def _sums(out, n_sched):
    new = 0
    context = 0
    pairs = 0
    for k in range(n_sched):
        n = out[OUT_NEW, k]
        c = out[OUT_BEFORE, k]
        new += n
        context += c + n
        pairs += _pairs(n, c)
    return new, context, pairs


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def pass_work(cost, out, n_sched):
    """(bytes moved, FLOPs) of the pass in `out` (see _work)."""
    new, context, pairs = _sums(out, n_sched)
    return _work(cost, new, context, pairs)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy", _nrt=False)
def pass_seconds(cost, out, n_sched):
    """Roofline time of the pass in `out` (0 for a pass that runs nothing)."""
    new, context, pairs = _sums(out, n_sched)
    return _seconds(cost, n_sched, new, context, pairs)


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def grow_rows(a, rows):
    """`a` with room for `rows` rows (the new ones uninitialised: every table grown here is written before read).

    Copied in a loop over the flat C-ordered data (the old rows come first): numba compiles an array-to-slice
    assignment with its broadcasting error messages, whose string formatting costs a cold start 3-4 s."""
    if rows < a.shape[0]:
        raise ValueError("grow_rows: fewer rows than the table has")  # (a fixed message: nothing to format)
    out = np.empty((rows,) + a.shape[1:], dtype=a.dtype)
    to = out.reshape(-1)
    src = a.reshape(-1)
    for i in range(src.shape[0]):
        to[i] = src[i]
    return out


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def run_to_completion(params, cost, prompt_len, output_len, reserve_tokens, max_passes, arrival, chain_at, chain):
    """The whole run in compiled code: arrivals, begin_pass, the roofline clock, end_pass, until all finish.

    `arrival` holds each request's arrival time (s, nondecreasing); empty: all queued at t = 0.
    Returns (pass table, pass seconds, events (pass, request, kind, cached), (req, state, queues, blocks),
    pass start times, the request of each output token in the order produced: pass p's are the next
    passes[p, PASS_OUTPUT]).
    """
    req, state, queues, blocks = new_tables(params, prompt_len, output_len, reserve_tokens, chain_at, chain)
    n_req = prompt_len.shape[0]
    if arrival.shape[0] > 0:
        hold_arrivals(state)
    # Two of each with async scheduling: the batch queue holds two passes (the one running, the one scheduled).
    outs = np.zeros((2, NUM_OUT_ROWS, n_req), dtype=np.int64)
    all_counts = np.zeros((2, NUM_COUNTS), dtype=np.int64)
    overlap = params[P_ASYNC] != 0
    # Room for twice the passes the longest output needs (a run takes at least that many; growing copies).
    # (Loops, not .max() and .sum(): numba's array reductions add about a second to a cold start's compile.)
    longest = 0
    total_output = 0
    for i in range(n_req):
        longest = max(longest, output_len[i])
        total_output += output_len[i]
    rows = max(1024, 2 * longest)
    passes = np.empty((rows, NUM_PASS_FIELDS), dtype=np.int64)  # every row is written in full before it is read
    seconds = np.empty(rows, dtype=np.float64)
    starts = np.empty(rows, dtype=np.float64)
    events = np.empty((8 * n_req + 16, NUM_EVENT_FIELDS), dtype=np.int64)
    sampled = np.empty(total_output, dtype=np.int32)  # every request samples exactly its output
    # Counters start as int64, not the literal 0: numba would otherwise compile begin_pass and end_pass twice,
    # once for the literal first value and once for the loop's int64 (a third of a cold start's compile).
    n_ev = np.int64(0)
    now = 0.0
    p = np.int64(0)
    # Async scheduling, as EngineCore.step_with_batch_queue drives it with a queue of two: schedule(p), then
    # update(p - 1) (the pass in flight, whose output comes back while pass p runs). `slot` is pass p's half
    # of outs/all_counts, `inflight` the pass whose output is still to be processed (-1: none).
    slot = 0
    inflight = np.int64(-1)
    while state[NUM_FINISHED] < n_req and p < max_passes:
        if p == passes.shape[0]:
            passes = grow_rows(passes, 2 * p)
            seconds = grow_rows(seconds, 2 * p)
            starts = grow_rows(starts, 2 * p)
        if n_ev + 5 * n_req > events.shape[0]:
            events = grow_rows(events, 2 * events.shape[0] + 5 * n_req)
        if arrival.shape[0] > 0:
            now = add_arrivals(arrival, state, queues, now)
        starts[p] = now
        out = outs[slot]
        counts = all_counts[slot]
        digest = state[DIGEST]
        begin_pass(params, req, state, queues, blocks, out, counts, passes, p, sampled)
        if overlap and inflight >= 0 and counts[N_SCHED] == 0 and counts[N_PRE] == 0:
            # Nothing to run until the pass in flight is processed (vLLM queues an empty batch and blocks on
            # the older one): no pass, only the update.
            state[DIGEST] = digest
            n_ev = end_pass(params, req, state, queues, blocks, outs[1 - slot], all_counts[1 - slot], passes,
                            inflight, events, n_ev)
            inflight = -1
            continue
        # (_pass_row summed this pass's work while writing its row: no second loop over it)
        seconds[p] = _seconds(cost, counts[N_SCHED], passes[p, PASS_TOKENS], counts[N_CONTEXT], counts[N_PAIRS])
        if overlap:
            seconds[p] = overlapped_seconds(cost, seconds[p])
            if inflight >= 0:
                n_ev = end_pass(params, req, state, queues, blocks, outs[1 - slot], all_counts[1 - slot], passes,
                                inflight, events, n_ev)
            inflight = p
            slot = 1 - slot
        else:
            n_ev = end_pass(params, req, state, queues, blocks, out, counts, passes, p, events, n_ev)
        now += seconds[p]
        p += 1
    if inflight >= 0:  # (only when the pass cap stopped the run)
        n_ev = end_pass(params, req, state, queues, blocks, outs[1 - slot], all_counts[1 - slot], passes, inflight,
                        events, n_ev)
    return passes[:p], seconds[:p], events[:n_ev], (req, state, queues, blocks), starts[:p], sampled[:state[SAMPLED_AT]]


@njit(cache=CACHE_COMPILED, nogil=True, error_model="numpy")
def gather_tables(req, blocks, ids, n):
    """Block tables of requests ids[:n], one row each, padded with the null block 0."""
    width = 0
    for k in range(n):
        width = max(width, req[ids[k], HELD])
    table = np.zeros((n, width), dtype=np.int64)
    for k in range(n):
        start = req[ids[k], TABLE_START]
        for j in range(req[ids[k], HELD]):
            table[k, j] = blocks[start + j]
    return table
