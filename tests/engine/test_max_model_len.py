"""--max-model-len: requests longer than it are refused one by one, as vLLM's OpenAI server refuses them
(OpenAIServing._validate_input, vllm/entrypoints/openai/serving_engine.py, v0.11: prompt + max_tokens beyond
max_model_len is an HTTP 400), and the start-up line's Maximum concurrency moves with it
(get_max_concurrency_for_kv_cache_config, vllm/v1/core/kv_cache_utils.py: blocks / cdiv(max_model_len, 16)).
"""
import numpy as np
import pytest

from engine import RunConfig, simulate, simulate_stepwise
from engine.config import ConfigError, refused_requests
from engine.logs import refusal_log_lines, startup_log_line


def test_requests_longer_than_max_model_len_are_refused_and_counted():
    cfg = RunConfig(max_model_len=2048)
    workload = cfg.build_workload()
    too_long = int((workload.prompt_len + workload.output_len > 2048).sum())
    assert 0 < too_long < 256
    trace = simulate(cfg)
    summary = trace.summary()
    assert summary["refused_requests"] == too_long
    assert summary["finished_requests"] == trace.workload.num_requests == 256 - too_long
    kept = workload.prompt_len + workload.output_len <= 2048
    assert (trace.workload.prompt_len == workload.prompt_len[kept]).all()
    assert simulate_stepwise(cfg).digest == trace.digest  # the one loop refuses the same requests


def test_the_refusal_is_vllms_message_and_the_log_counts_the_rest():
    cfg = RunConfig(max_model_len=2048)
    workload = cfg.build_workload()
    first = int(refused_requests(cfg, workload)[0])
    p, o = int(workload.prompt_len[first]), int(workload.output_len[first])
    lines = refusal_log_lines(cfg)
    assert lines[0].endswith(f"This model's maximum context length is 2048 tokens. However, you requested {p + o} "
                             f"tokens ({p} in the messages, {o} in the completion). Please reduce the length of the "
                             "messages or completion.")
    assert f"# {len(refused_requests(cfg, workload)):,} requests refused" in lines[1]
    assert refusal_log_lines(RunConfig()) == []


def test_refused_requests_still_arrive_and_the_others_keep_their_times():
    base = RunConfig(arrival="rate", request_rate=8.0)
    cut = base.replace(max_model_len=2048)
    all_times = base.arrival_times(base.build_workload())
    workload = base.build_workload()
    kept = workload.prompt_len + workload.output_len <= 2048
    assert np.array_equal(simulate(cut).arrival_s, all_times[kept])


def test_maximum_concurrency_divides_by_max_model_len():
    # 16 GiB: 7,281 blocks of 16 tokens (null block included, as vLLM counts).
    for length, blocks_per_request in ((40_960, 2560), (8192, 512), (2048, 128)):
        line = startup_log_line(RunConfig(max_model_len=length))
        assert f"Maximum concurrency for {length:,} tokens per request: {7281 / blocks_per_request:.2f}x" in line
    assert simulate(RunConfig(max_model_len=8192)).summary()["max_concurrency"] == round(7281 / 512, 2)


def test_a_workload_of_nothing_but_refusals_cannot_run():
    with pytest.raises(ConfigError, match="every request is refused: This model's maximum context length is 64"):
        simulate(RunConfig(max_model_len=64))


@pytest.mark.parametrize("args, said", [
    # 0.23 of an H100 leaves 979 blocks (15,664 tokens): one 40,960-token request does not fit (kv_cache_utils.py)
    (["--gpu-memory-utilization", "0.23", "--max-model-len", "40960"],
     "To serve at least one request with the model's max seq len (40960)"),
    # beyond Qwen3-8B's own 40,960 (ModelConfig's _get_and_verify_max_len, vllm/config/model.py)
    (["--max-model-len", "65536"], "User-specified max_model_len (65536) is greater than the derived max_model_len"),
])
def test_a_max_model_len_vllm_would_not_start_with_is_one_warning_line_and_the_run_goes_on(capsys, args, said):
    from engine.cli import main
    assert main(["run", *args, "--requests", "16", "--json"]) == 0
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("warning: vLLM would refuse to start: ") and said in err and "\n" not in err
    assert '"finished_requests": 16' in captured.out
    assert main(["run", "--max-model-len", "4096", "--requests", "16", "--json"]) == 0
    assert capsys.readouterr().err == ""
