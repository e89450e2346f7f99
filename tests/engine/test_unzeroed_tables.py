"""The compiled run allocates its tables without zeroing them (every entry is written before it is read), so
junk that earlier work left in the freed heap must not change a single bit of a run."""
import numpy as np
import pytest

from engine import RunConfig, simulate

CONFIGS = [{}, {"enable_prefix_caching": True}, {"enable_prefix_caching": True, "pool_gib": 2.0, "max_num_seqs": 512},
           {"max_num_seqs": 64, "allocation": "reserve", "unit": "request"},
           {"enable_prefix_caching": True, "system_prompt_len": 1000, "request_rate": 40.0}]


def _fingerprint(trace) -> tuple:
    return (trace.passes.tobytes(), trace.events.tobytes(), trace.event_cached.tobytes(), trace.requests.tobytes(),
            trace.pass_start.tobytes(), trace.samples.tobytes(), trace.summary())


@pytest.mark.parametrize("kw", CONFIGS, ids=[str(i) for i in range(len(CONFIGS))])
def test_junk_left_in_the_heap_changes_nothing(kw):
    cfg = RunConfig(**kw)
    clean = _fingerprint(simulate(cfg))
    for fill in (-1, 0x5A5A5A5A5A5A5A5A, 7):
        junk = [np.full(size, fill, dtype=np.int64) for size in (1 << 12, 1 << 14, 1 << 16, 1 << 17, 1 << 18)]
        del junk  # freed: the run's tables are carved from these pages
        assert _fingerprint(simulate(cfg)) == clean
