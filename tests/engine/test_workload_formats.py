"""Every workload layout the explorable and the CLI read, from small samples written here in each real format
(the project's CSV, Azure's trace, BurstGPT's CSV, Mooncake's JSONL): the requests, arrival times and prefix
groups each gives; the seeded window a long file is served through; the two-number workload."""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine import RunConfig, WorkloadError, parse_workload, simulate
from engine.cli import main
from engine.prefix_tree import shared_prompt_tokens
from engine.quantile_workload import two_number_workload
from engine.workload import DEFAULT_SAMPLE_REQUESTS, MAX_FILE_ROWS, MAX_WORKLOAD_REQUESTS
from engine.workload_formats import MOONCAKE_BLOCK_TOKENS, read_workload

PROJECT_CSV = "prompt_len,output_len,arrival_s\n300,20,0.5\n120,8,0.0\n500,64,2.25\n"
AZURE_CSV = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
             "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n"
             "2023-11-16 18:15:51.2000000,879,8\n")
# BurstGPT_1.csv's header and row style, columns in its order; one failed request (0 response tokens).
BURSTGPT_CSV = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                "5,ChatGPT,472,18,490,Conversation log\n"
                "45,ChatGPT,1087,0,1087,Conversation log\n"
                "118,GPT-4,417,271,688,API log\n"
                "121,ChatGPT,1360,142,1502,Conversation log\n")
# The newer BurstGPT files add Session ID and Elapsed time, in another order.
BURSTGPT_NEW = ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                "0.5,17,3.2,ChatGPT,200,30,230,Conversation log\n1.25,,9.0,GPT-4,90,400,490,API log\n")


def mooncake(*rows: tuple[int, int, int, list[int]]) -> str:
    """Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks)."""
    return "".join(json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h}) + "\n"
                   for t, i, o, h in rows)


# The README's two example requests (they share 12 blocks), a third that shares only the first block with them,
# and a fourth with nothing in common; timestamps as in the file, in milliseconds.
MOONCAKE_JSONL = mooncake(
    (27482, 6955, 52, [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]),
    (30535, 6472, 26, [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2366]),
    (31000, 1500, 10, [46, 900, 901]),
    (40000, 700, 99, [7, 8]),
)


def test_the_project_csv_gives_its_requests_in_arrival_order():
    read = read_workload(PROJECT_CSV)
    wl = read.workload
    assert read.layout == "project CSV" and read.rows == 3 and not read.sampled
    assert wl.prompt_len.tolist() == [120, 300, 500] and wl.output_len.tolist() == [8, 20, 64]
    assert wl.arrival_s.tolist() == [0.0, 0.5, 2.25]
    assert wl.prefix_group.tolist() == [-1, -1, -1]


def test_the_project_csv_carries_prefix_groups():
    wl = parse_workload("prompt_len,output_len,prefix_group,prefix_len\n100,5,3,64\n200,7,3,64\n50,2,-1,0\n")
    assert wl.prefix_group.tolist() == [3, 3, -1] and wl.prefix_len.tolist() == [64, 64, 0]
    assert shared_prompt_tokens(wl, 0, 1) == 64 and shared_prompt_tokens(wl, 0, 2) == 0


def test_the_azure_trace_gives_times_from_its_dates():
    read = read_workload(AZURE_CSV)
    assert read.layout == "Azure trace"
    wl = read.workload
    assert wl.prompt_len.tolist() == [374, 396, 879] and wl.output_len.tolist() == [44, 109, 8]
    np.testing.assert_allclose(wl.arrival_s, [0.0, 4.314579, 4.519410], atol=1e-6)


@pytest.mark.parametrize("text", [BURSTGPT_CSV, BURSTGPT_CSV.replace("\n", "\r\n")])
def test_burstgpt_gives_its_requests_and_leaves_failed_ones_out(text):
    read = read_workload(text)
    assert read.layout == "BurstGPT" and read.rows == 3 and read.skipped == 1
    wl = read.workload
    assert wl.prompt_len.tolist() == [472, 417, 1360] and wl.output_len.tolist() == [18, 271, 142]
    assert wl.arrival_s.tolist() == [0.0, 113.0, 116.0]  # seconds, from the first request


def test_burstgpt_with_the_newer_columns_reads_by_name():
    wl = read_workload(BURSTGPT_NEW).workload
    assert wl.prompt_len.tolist() == [200, 90] and wl.output_len.tolist() == [30, 400]
    assert wl.arrival_s.tolist() == [0.0, 0.75]


def test_mooncake_gives_requests_times_in_seconds_and_a_tree_of_shared_blocks():
    read = read_workload(MOONCAKE_JSONL)
    wl = read.workload
    assert read.layout == "Mooncake"
    assert wl.prompt_len.tolist() == [6955, 6472, 1500, 700] and wl.output_len.tolist() == [52, 26, 10, 99]
    np.testing.assert_allclose(wl.arrival_s, [0.0, 3.053, 3.518, 12.518])
    # The README: the first two share their first 12 hash ids, so 12 x 512 = 6,144 prompt tokens.
    assert shared_prompt_tokens(wl, 0, 1) == 12 * MOONCAKE_BLOCK_TOKENS
    assert shared_prompt_tokens(wl, 0, 2) == shared_prompt_tokens(wl, 1, 2) == MOONCAKE_BLOCK_TOKENS
    assert shared_prompt_tokens(wl, 0, 3) == 0 and wl.prefix_group[3] == -1
    # One group per shared block: block 46 (three requests) and the 11 after it (two).
    assert wl.group_parent.tolist() == [-1] + list(range(11))
    assert wl.group_start.tolist() == [MOONCAKE_BLOCK_TOKENS * d for d in range(12)]


def test_a_partial_last_block_shares_only_the_tokens_both_prompts_have():
    wl = read_workload(mooncake((0, 700, 5, [1, 2]), (1, 1000, 5, [1, 2]), (2, 1024, 5, [1, 2]))).workload
    assert shared_prompt_tokens(wl, 0, 1) == 700 and shared_prompt_tokens(wl, 1, 2) == 1000


def test_requests_that_share_hash_ids_share_cached_prompt_blocks_in_the_run():
    # The second request arrives while the first still runs: its first 12 blocks (6,144 tokens) are the first
    # request's, taken from the cache; the third finds the one block it shares; the fourth finds nothing.
    wl = read_workload(MOONCAKE_JSONL).workload
    cfg = RunConfig(workload=wl, arrival="workload", enable_prefix_caching=True, model="Llama-3.1-8B")
    trace = simulate(cfg)
    assert trace.cache_hits_per_request.tolist() == [0, 6144, 512, 0]
    off = simulate(cfg.replace(enable_prefix_caching=False))
    assert off.cache_hits_per_request.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("text, words", [
    (BURSTGPT_CSV.replace("118,GPT-4,417", "118,GPT-4,4x7"), "line 4: Request tokens '4x7' is not a token count"),
    (BURSTGPT_CSV.replace("121,", "soon,"), "line 5: Timestamp 'soon' is not a time"),
    (BURSTGPT_CSV.replace("5,ChatGPT,472,18,490,Conversation log", "5,ChatGPT,472,18"), "line 2 has 4 fields"),
    (mooncake((0, 100, 5, [1])) + '{"timestamp": 3, "input_length": 100, "hash_ids": [1]}\n',
     "line 2 lacks output_length"),
    (mooncake((0, 100, 5, [1]), (5, 100, 0, [1])), "line 2: output_length '0' is not a token count"),
    (mooncake((0, 100, 5, [1, 2, 3])), "at most 1 block ids"),
    (mooncake((0, 100, 5, [1])) + "{not json\n", "line 2 is not a JSON object"),
    (mooncake((-4, 100, 5, [1])), "line 1: timestamp '-4' is not a time"),
])
def test_a_bad_row_is_refused_naming_the_line_the_field_and_what_was_expected(text, words):
    with pytest.raises(WorkloadError) as exc:
        read_workload(text, "up.csv")
    assert words in str(exc.value) and str(exc.value).startswith("up.csv")
    assert "\n" not in str(exc.value)


def test_only_failed_rows_is_no_workload():
    with pytest.raises(WorkloadError, match="1 failed rows"):
        read_workload("Timestamp,Model,Request tokens,Response tokens\n3,ChatGPT,20,0\n")


# -- the window a long file is served through -------------------------------------------------------------
def _long_csv(rows: int) -> str:
    return "prompt_len,output_len,arrival_s\n" + "".join(f"{100 + i % 97},{1 + i % 13},{i * 0.25}\n"
                                                          for i in range(rows))


def test_a_file_longer_than_a_run_is_served_as_a_seeded_window_of_consecutive_requests():
    text = _long_csv(MAX_WORKLOAD_REQUESTS + 904)
    read = read_workload(text, seed=3)
    wl, start = read.workload, read.window_start
    assert read.sampled and read.rows == MAX_WORKLOAD_REQUESTS + 904
    assert wl.num_requests == DEFAULT_SAMPLE_REQUESTS
    rows = np.arange(start, start + DEFAULT_SAMPLE_REQUESTS)
    assert wl.prompt_len.tolist() == (100 + rows % 97).tolist()
    np.testing.assert_allclose(wl.arrival_s, (rows - start) * 0.25)  # the window's own clock
    assert read_workload(text, seed=3).window_start == start  # same seed, same window
    assert {read_workload(text, seed=s).window_start for s in range(6)} != {start}
    assert len(read.all_output_len) == read.rows  # the whole file's lengths stay known (the page's histogram)


def test_a_run_asks_for_its_own_count_of_a_file_and_the_cli_s_requests_flag_is_that_count(tmp_path, capsys):
    path = tmp_path / "day.csv"
    path.write_text(_long_csv(3000))
    assert RunConfig(workload=str(path), workload_sample=500).build_workload().num_requests == 500
    assert RunConfig(workload=str(path)).build_workload().num_requests == 3000  # whole, as before
    assert main(["run", "--workload", str(path), "--requests", "200", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["finished_requests"] == 200


def test_a_file_of_more_than_the_row_limit_is_refused_while_reading():
    with pytest.raises(WorkloadError, match=f"more than {MAX_FILE_ROWS:,} rows"):
        read_workload("prompt_len,output_len\n" + "10,5\n" * (MAX_FILE_ROWS + 1))


# -- the two-number workload -----------------------------------------------------------------------------------
def test_two_numbers_give_a_seeded_log_normal_whose_own_p50_and_p99_are_those_numbers():
    wl = RunConfig(output_p50=200, output_p99=2000, requests=1024, seed=5).build_workload()
    p50, p99 = np.percentile(wl.output_len, [50, 99])
    assert p50 == 200 and abs(p99 - 2000) / 2000 < 0.01
    again = RunConfig(output_p50=200, output_p99=2000, requests=1024, seed=5).build_workload()
    assert np.array_equal(wl.output_len, again.output_len)  # same numbers, same requests
    other = RunConfig(output_p50=200, output_p99=2000, requests=1024, seed=6).build_workload()
    assert not np.array_equal(wl.output_len, other.output_len) and sorted(wl.output_len) == sorted(other.output_len)
    # ln X is normal: its spread is ln(p99 / p50) / 2.326
    assert abs(np.std(np.log(wl.output_len)) - np.log(10) / 2.3263) < 0.03


def test_prompt_numbers_shape_prompts_and_without_them_prompts_are_the_calibration_s():
    wl = two_number_workload(256, 1, 100, 100, 800, 3200)
    assert set(wl.output_len.tolist()) == {100}
    assert np.percentile(wl.prompt_len, 50) == 800
    default = RunConfig(output_p50=100, output_p99=100).build_workload()
    assert np.array_equal(default.prompt_len, RunConfig().build_workload().prompt_len)


def test_the_cli_takes_the_two_numbers(capsys):
    assert main(["run", "--output-p50", "128", "--output-p99", "128", "--requests", "64", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["finished_requests"] == 64
    assert main(["run", "--output-p50", "128", "--output-p99", "4096", "--prompt-p50", "500", "--prompt-p99",
                 "2000", "--seed", "2", "--json"]) == 0


@pytest.mark.parametrize("argv, words", [
    (["--output-p50", "200"], "output_p50 and output_p99 go together"),
    (["--output-p50", "200", "--output-p99", "100"], "output_p99 (100) must be at least output_p50 (200)"),
    (["--prompt-p50", "200", "--prompt-p99", "400"], "give output_p50 and output_p99 too"),
    (["--output-p50", "0", "--output-p99", "10"], "output_p50 must be in 1"),
])
def test_the_two_numbers_refuse_what_cannot_describe_a_workload_in_one_line(capsys, argv, words):
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
