"""The vLLM log lines rendered from a run."""
import re

import pytest

from engine import RunConfig, simulate
from engine.logs import periodic_log_line, periodic_stats, serve_command, serve_command_notes, startup_error, startup_log_line


def test_startup_line_uses_vllms_concurrency_formula():
    # vLLM's own worked example: 10,000 blocks of 16, max_model_len 8192 -> 160,000 tokens, 19.53x.
    cfg = RunConfig(num_gpu_blocks_override=10_000, max_model_len=8192)
    assert startup_log_line(cfg).endswith(
        "GPU KV cache size: 160,000 tokens, Maximum concurrency for 8,192 tokens per request: 19.53x"
    )


def test_periodic_line_mentions_preemptions_only_when_there_were_some():
    busy = simulate(RunConfig())
    assert "Preemptions:" in periodic_log_line(busy, 10.0)
    calm = simulate(RunConfig(max_num_seqs=64))
    line = periodic_log_line(calm, 10.0)
    assert "Preemptions" not in line
    assert re.search(r"Running: \d+ reqs, Waiting: \d+ reqs, GPU KV cache usage: \d+\.\d%$", line)


def test_periodic_stats_agree_with_the_trace():
    trace = simulate(RunConfig(max_num_seqs=64))
    s = periodic_stats(trace, 10.0)
    assert s["running"] <= 64
    assert 0 < s["kv_usage"] <= 1
    # Generation throughput over the window is the output tokens sampled in it over 10 s.
    assert 0 < s["gen_tok_s"] < 10 * trace.summary()["throughput_tok_s"]
    full = periodic_stats(trace, trace.makespan_s, interval_s=trace.makespan_s)
    assert full["gen_tok_s"] * trace.makespan_s == pytest.approx(trace.output_tokens, rel=1e-12)
    assert full["prompt_tok_s"] * trace.makespan_s == pytest.approx(trace.workload.total_prompt_tokens, rel=1e-12)


def test_a_pool_too_small_for_the_models_context_serves_with_the_length_vllm_advises():
    cfg = RunConfig(pool_gib=2)  # 910 blocks: a 40,960-token Qwen3-8B request does not fit
    assert cfg.served_max_model_len == 909 * 16
    assert "--max-model-len 14544" in serve_command(cfg)
    assert startup_log_line(cfg).endswith("Maximum concurrency for 14,544 tokens per request: 1.00x")
    assert startup_error(cfg) is None
    assert RunConfig().served_max_model_len == 40_960  # the default pool holds 2.84 such requests


def test_an_explicit_max_model_len_that_cannot_fit_gets_vllms_startup_error():
    message = startup_error(RunConfig(pool_gib=2, max_model_len=40_960))
    assert "estimated maximum model length is 14544" in message
    assert "To serve at least one request with the model's max seq len (40960)" in message


def test_serve_command_says_whether_prefix_caching_is_on():
    from engine.logs import prefix_caching_note
    off, on = RunConfig(), RunConfig(enable_prefix_caching=True)
    assert serve_command(off).endswith(" --no-enable-prefix-caching")
    assert "prefix-caching" not in serve_command(on)  # vLLM V1's default
    assert prefix_caching_note(off).startswith("# --no-enable-prefix-caching (")
    assert "Prefix cache hit rate" not in periodic_log_line(simulate(off), 10.0)
    trace = simulate(RunConfig(enable_prefix_caching=True, system_prompt_len=1000))
    line = periodic_log_line(trace, trace.makespan_s)
    rate = float(re.search(r"Prefix cache hit rate: (\d+\.\d)%$", line).group(1))
    assert rate == pytest.approx(100 * trace.summary()["prefix_cache_hit_rate"], abs=0.051)


def test_serve_command_says_async_scheduling_when_it_is_on():
    on = RunConfig(async_scheduling=True)
    assert serve_command(on).endswith(" --async-scheduling")
    assert "async" not in serve_command(RunConfig())  # v0.11 is synchronous by default
    off_034 = RunConfig(vllm_version="0.34", scheduler_reserve_full_isl=True)
    assert serve_command(off_034).endswith(" --no-async-scheduling")  # 0.34 would schedule asynchronously
    note = serve_command_notes(on)[-1]
    assert note.startswith("# --async-scheduling: ") and "one pass later" in note
