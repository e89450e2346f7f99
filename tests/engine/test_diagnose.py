"""`python -m engine diagnose`: vLLM's log lines in each format it has printed (v0.11 to the newest), read into
numbers, and one line of each of the course's three cases naming the right case."""
from __future__ import annotations

import io
import json
import sys

import pytest

from engine import RunConfig, simulate
from engine.cli import main
from engine.diagnose import CASES, LogError, diagnose_text, parse_log
from engine.logs import periodic_log_line, startup_log_line

PREFIX = "INFO 10-12 14:03:22 [loggers.py:123] "
# v0.11.0: the hit rate always, Preemptions never.
V011 = (PREFIX + "Engine 000: Avg prompt throughput: 1200.3 tokens/s, Avg generation throughput: 812.4 tokens/s, "
        "Running: 83 reqs, Waiting: 41 reqs, GPU KV cache usage: 99.8%, Prefix cache hit rate: 12.3%")
# v0.11.1 on: Preemptions only when some happened since the line before.
WITH_PREEMPTIONS = (PREFIX + "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 812.4 "
                    "tokens/s, Running: 83 reqs, Waiting: 41 reqs, Preemptions: 38, GPU KV cache usage: 99.8%, "
                    "Prefix cache hit rate: 12.3%")
# The newest: Deferred (counted inside Waiting), then Preemptions, and further hit rates after the prefix one.
NEWEST = ("(APIServer pid=4127) INFO 01-05 09:00:00 [loggers.py:257] Engine 000: Avg prompt throughput: 1234.5 "
          "tokens/s, Avg generation throughput: 456.7 tokens/s, Running: 64 reqs, Waiting: 12 reqs, Deferred: 3 reqs, "
          "Preemptions: 3, GPU KV cache usage: 97.8%, Prefix cache hit rate: 41.2%, External prefix cache hit rate: "
          "10.0%, MM cache hit rate: 0.0%")
NO_HIT_RATE = (PREFIX + "Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 2400.0 tokens/s, "
               "Running: 256 reqs, Waiting: 90 reqs, GPU KV cache usage: 41.5%")
# V0's engine (before V1): Pending for waiting, swapped and CPU cache parts.
V0 = ("INFO 05-01 10:00:00 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 30.1 "
      "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.6%, CPU KV cache usage: 0.0%.")
STARTUP_V033 = ("INFO 01-05 08:59:00 [kv_cache_utils.py:1087] GPU KV cache size: 434,657 tokens, Maximum concurrency "
                "for 8,192 tokens per request: 53.06x")
STARTUP_V011 = ["INFO 10-12 14:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 434,656 tokens",
                "INFO 10-12 14:00:01 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 53.06x"]


@pytest.mark.parametrize("line, running, waiting, deferred, preemptions, kv, hit", [
    (V011, 83, 41, None, 0, 99.8, 12.3),
    (WITH_PREEMPTIONS, 83, 41, None, 38, 99.8, 12.3),
    (NEWEST, 64, 12, 3, 3, 97.8, 41.2),
    (NO_HIT_RATE, 256, 90, None, 0, 41.5, None),
    (V0, 1, 0, None, 0, 0.6, None),
])
def test_each_format_s_numbers_are_read(line, running, waiting, deferred, preemptions, kv, hit):
    (s,) = parse_log([line]).stats
    assert (s.running, s.waiting, s.deferred, s.preemptions, s.kv_usage_pct, s.prefix_hit_pct) == (
        running, waiting, deferred, preemptions, kv, hit)


@pytest.mark.parametrize("lines", [[STARTUP_V033], STARTUP_V011])
def test_the_start_up_lines_give_the_pool_and_the_concurrency_in_either_form(lines):
    log = parse_log(lines)
    assert log.kv_cache_tokens in (434_657, 434_656) and log.device == "GPU"
    assert (log.max_model_len, log.max_concurrency) == (8192, 53.06)


@pytest.mark.parametrize("line, seqs, case", [
    # Running well below the cap, a queue, the cache near full: memory decides.
    (V011, 256, "memory-cap"),
    # Running pinned at the cap, a queue, the cache well under 90%: the cap binds.
    (NO_HIT_RATE, 256, "slot-cap"),
    # Preemptions at all: past the wall.
    (WITH_PREEMPTIONS, 256, "past-the-wall"),
    (NEWEST, 1024, "past-the-wall"),
])
def test_one_line_of_each_case_gives_that_case(line, seqs, case):
    result = diagnose_text(line, seqs)
    assert result.case == case and case in CASES
    assert str(result.numbers["running"]) in result.why and result.fixes


def test_memory_cap_advice_leaves_the_slot_cap_alone_and_slot_cap_advice_raises_it():
    memory = diagnose_text(STARTUP_V033 + "\n" + V011, 256)
    assert any("--gpu-memory-utilization" in f for f in memory.fixes)
    assert any("--max-model-len" in f for f in memory.fixes) and "53.06" in memory.why
    assert not any(f.startswith("Raise --max-num-seqs") for f in memory.fixes)
    slot = diagnose_text(NO_HIT_RATE, 256)
    assert slot.fixes[0].startswith("Raise --max-num-seqs to about 555")  # 256 x 90 / 41.5


def test_a_line_where_nothing_waits_is_none_of_the_cases():
    result = diagnose_text(V0, 256)
    assert result.case is None and "Nothing waits" in result.why


def test_preemptions_anywhere_in_a_log_put_it_past_the_wall():
    result = diagnose_text("\n".join([V011, WITH_PREEMPTIONS, V011]), 256)
    assert result.case == "past-the-wall" and result.numbers["preemptions_total"] == 38


def test_the_reproduction_prices_the_pool_for_the_model_the_log_names():
    text = ("INFO [utils.py] non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_num_seqs': 512}\n"
            + STARTUP_V033 + "\n" + V011)
    result = diagnose_text(text)
    assert result.numbers["max_num_seqs"] == 512 and result.reproduce["model"] == "Llama-3.1-8B"
    assert result.reproduce["num_gpu_blocks_override"] == 434_657 // 16
    cfg = RunConfig(**{k: v for k, v in result.reproduce.items() if k != "pool_gib"})
    assert abs(cfg.num_gpu_blocks * 16 - 434_657) < 16  # the pool the log gave, in blocks


def test_the_project_s_own_log_lines_are_read_back_to_their_case():
    wall = simulate(RunConfig(pool_gib=2.0, max_num_seqs=512))
    text = startup_log_line(wall.config) + "\n" + periodic_log_line(wall, 10.0)
    assert diagnose_text(text, 512).case == "past-the-wall"


@pytest.mark.parametrize("text, words", [
    ("hello\nworld", "no vLLM log line found"),
    (PREFIX + "Engine 000: Avg prompt throughput: 1.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs",
     "line 1 looks like vLLM's stats line but has no 'GPU KV cache usage: Z%'"),
    (V011.replace("99.8%", "180.0%"), "more than 100%"),
])
def test_text_that_is_no_log_gets_one_clear_line(text, words):
    with pytest.raises(LogError, match=words.replace("(", r"\(").replace("'", "'")):
        diagnose_text(text)


# -- the CLI -----------------------------------------------------------------------------------------------
def test_diagnose_reads_stdin_and_prints_the_case_as_json(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((STARTUP_V033 + "\n" + V011).encode())))
    assert main(["diagnose", "--max-num-seqs", "256", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["case"] == "memory-cap" and out["numbers"]["kv_cache_tokens"] == 434_657
    assert out["numbers"]["running"] == 83 and out["fixes"]


def test_diagnose_reads_a_file_and_says_why_in_words(tmp_path, capsys):
    log = tmp_path / "vllm.log"
    log.write_text(NO_HIT_RATE + "\n")
    assert main(["diagnose", "--max-num-seqs", "256", str(log)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("The slot cap binds (slot-cap)") and "41.5% full" in out


@pytest.mark.parametrize("argv", [["diagnose", "/dev/zero"], ["diagnose", "/no/such/log"],
                                  ["diagnose", "--max-num-seqs", "0", "/dev/null"]])
def test_diagnose_refuses_bad_input_in_one_line(capsys, argv):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
