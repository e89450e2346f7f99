"""Settings are validated with messages that name them; workloads are deterministic and exact."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from engine import ConfigError, RunConfig, WorkloadError, generate_workload, parse_workload, simulate


@pytest.mark.parametrize("field, value", [
    ("max_num_seqs", 0), ("max_num_seqs", 5000), ("max_num_seqs", 2.5), ("max_num_seqs", True),
    ("pool_gib", 0), ("pool_gib", -1), ("pool_gib", float("nan")), ("pool_gib", float("inf")), ("pool_gib", "16"),
    ("allocation", "lazy"), ("declared_multiple", 0.5), ("declared_multiple", 100), ("unit", "batch"),
    ("spread", 0.9), ("spread", 65), ("max_num_batched_tokens", 0), ("block_size", 3), ("requests", 0),
    ("requests", 100_000), ("seed", -1), ("model", "gpt-5"), ("gpu", "B200"), ("num_gpu_blocks_override", 1),
    ("scheduler_reserve_full_isl", "yes"), ("max_model_len", 1),
])
def test_out_of_range_settings_are_refused_with_a_message_naming_them(field, value):
    with pytest.raises(ConfigError, match=field):
        RunConfig(**{field: value})


def test_budget_below_max_num_seqs_is_refused_as_vllm_does():
    with pytest.raises(ConfigError, match="must be greater than or equal to max_num_seqs"):
        RunConfig(max_num_seqs=512, max_num_batched_tokens=256)


def test_pool_too_small_for_one_request_is_refused_up_front_with_the_minimum():
    with pytest.raises(ConfigError, match=r"pool_gib must be at least (\d+\.\d+)") as err:
        simulate(RunConfig(pool_gib=0.2))
    minimum = float(err.value.args[0].rsplit(" ", 1)[-1])
    simulate(RunConfig(pool_gib=minimum, max_num_seqs=1, requests=16))  # the quoted minimum really serves


def test_reserve_needs_room_for_the_declared_footprint():
    with pytest.raises(ConfigError, match="declared max_tokens"):
        simulate(RunConfig(pool_gib=0.5, allocation="reserve", declared_multiple=64))


def test_default_workload_has_the_calibrated_totals_and_shape():
    wl = generate_workload(256, 16.0, 1)
    assert wl.total_prompt_tokens == 350_309
    assert wl.total_output_tokens == 65_536
    assert 40 <= wl.output_len.min() <= 60 and 700 <= wl.output_len.max() <= 820
    assert np.std(wl.prompt_len) / np.mean(wl.prompt_len) == pytest.approx(0.3, abs=0.02)


@given(st.integers(1, 512), st.floats(1, 64), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_spread_moves_tokens_between_requests_without_changing_the_total(n, spread, seed):
    wl = generate_workload(n, spread, seed)
    assert wl.total_output_tokens == 256 * n
    assert wl.total_prompt_tokens == round(350_309 / 256 * n)
    assert (wl.output_len >= 1).all() and (wl.prompt_len >= 1).all()
    assert wl.output_len.max() / wl.output_len.min() <= spread * 1.05 + 1
    again = generate_workload(n, spread, seed)
    assert again.output_len.tobytes() == wl.output_len.tobytes()


def test_spread_one_gives_every_request_exactly_256():
    assert set(generate_workload(256, 1.0, 7).output_len.tolist()) == {256}


def test_workload_files_parse_as_csv_and_json():
    a = parse_workload("prompt_len,output_len\n10,5\n20,7\n")
    b = parse_workload('{"prompt_len": [10, 20], "output_len": [5, 7]}')
    assert a.prompt_len.tolist() == b.prompt_len.tolist() == [10, 20]
    assert a.output_len.tolist() == b.output_len.tolist() == [5, 7]


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("a,b\n1,2\n", "header"),
    ("prompt_len,output_len\n1\n", "2"),
    ("prompt_len,output_len\nx,2\n", "not two integers"),
    ("prompt_len,output_len\n0,2\n", "outside"),
    ("prompt_len,output_len\n", "no requests"),
    ('{"prompt_len": [1, 2], "output_len": [1]}', "entries"),
    ('{"prompt_len": [1.5], "output_len": [1]}', "not an integer"),
    ('{"prompt_len": "abc", "output_len": [1]}', "lists"),
    ("{not json", "not valid JSON"),
    ('{"foo": 1}', "prompt_len"),
])
def test_malformed_workloads_get_a_clear_error(text, message):
    with pytest.raises(WorkloadError, match=message):
        parse_workload(text)


def test_kv_cache_block_count_follows_vllm_formula():
    cfg = RunConfig(pool_gib=16)
    assert cfg.num_gpu_blocks == math.floor(16 * 2**30 / (16 * 147_456))
    assert RunConfig(num_gpu_blocks_override=100).num_gpu_blocks == 100


@pytest.mark.parametrize("prompts, outputs", [([5], [0]), ([0], [3]), ([5, 6], [3]), ([[5]], [[3]])])
def test_a_workload_built_in_code_is_checked_as_a_file_is(prompts, outputs):
    # The core writes one log entry per output token without bounds checks: a request with no output (it would
    # still sample one token) must be refused before any run.
    from engine import Workload
    with pytest.raises(WorkloadError, match="at least 1"):
        Workload(np.array(prompts), np.array(outputs))
