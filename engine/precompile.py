"""A fresh install's compile of what the default page runs, split in two for a machine's two cores.

    python -m engine.precompile passes    # begin_pass (the scheduler's pass, over half of the work), then the core
    python -m engine.precompile helpers   # meanwhile: everything else the core calls, and the request timings
    python -m engine.precompile           # both in turn, in one process

numba compiles and caches each @njit function on its own, and a caller loads an already cached callee from disk
instead of compiling it again. So with both running at once, the core's compile (in `passes`) finds the
helpers compiled, provided they were compiled for exactly the types the core calls them with: those are
fixed by the core's own tables (np.zeros: C-ordered, writable int64) and by `core_arguments` (read-only
workload arrays, whatever the setting). tests/engine/test_precompile.py checks that nothing is compiled twice.
Run alone, either part still leaves everything compiled; the split only saves time.
"""
from __future__ import annotations

import sys

import numpy as np
from numba import typeof, types

from engine.config import RunConfig
from engine.latency import walk_tokens
from engine.simulate import core_arguments, simulate
from kernels import scheduler_core as core

PARTS = ("passes", "helpers")


def _signatures() -> dict[str, list[tuple]]:
    """(dispatcher, argument types) to compile, by part, as run_to_completion and Trace.timing call them."""
    params, _cost, prompt_len, output_len, reserve, _max_passes, arrival, chain_at, chain = \
        core_arguments(RunConfig())[2]
    vector, table = typeof(np.zeros(1, np.int64)), typeof(np.zeros((1, 1), np.int64))
    count = types.int64
    # (params, req, state, queues, blocks, out, counts, passes, p): the head of begin_pass's and end_pass's.
    pass_head = (typeof(params), table, vector, table, vector, table, vector, table, count)
    return {
        "passes": [(core.begin_pass, pass_head + (typeof(np.zeros(1, np.int32)),))],
        "helpers": [
            (core.new_tables, tuple(typeof(a) for a in (params, prompt_len, output_len, reserve, chain_at,
                                                        chain))),
            (core.hold_arrivals, (vector,)),
            (core.add_arrivals, (typeof(arrival), vector, table, types.float64)),
            (core.grow_rows, (table, count)),
            (core.grow_rows, (typeof(np.zeros(1)), count)),
            (core.end_pass, pass_head + (table, count)),
            (walk_tokens, (typeof(np.zeros(1)), vector, typeof(np.zeros(1, np.int32)), count)),
        ],
    }


def compile_part(part: str) -> None:
    """Compile one part into numba's cache; `passes` ends with the default run, which compiles the core."""
    for dispatcher, signature in _signatures()[part]:
        dispatcher.compile(signature)
    if part == "passes":
        simulate(RunConfig()).timing()


def main(argv: list[str]) -> int:
    """One part, or with no argument both in turn (an install prepared before its first reader, in one process)."""
    if len(argv) > 1 or (argv and argv[0] not in PARTS):
        print(f"usage: python -m engine.precompile [{'|'.join(PARTS)}]", file=sys.stderr)
        return 2
    for part in argv or reversed(PARTS):
        compile_part(part)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
