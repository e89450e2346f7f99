"""The memory-wall fixes on the command line, under vLLM's flag names: in the JSON summary, in the text
output's log lines, and refused in one line when out of range."""
import json

import pytest

from engine import RunConfig, simulate
from engine.cli import main


def test_the_flags_reach_the_run_and_the_json(capsys):
    args = ["run", "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8", "--tensor-parallel-size", "2",
            "--max-model-len", "4096", "--json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    cfg = RunConfig(gpu_memory_utilization=0.9, kv_cache_dtype="fp8", tensor_parallel_size=2, max_model_len=4096)
    assert out == json.loads(json.dumps(simulate(cfg).summary()))
    assert (out["gpu_memory_utilization"], out["kv_cache_dtype"], out["tensor_parallel_size"], out["max_model_len"]) \
        == (0.9, "fp8", 2, 4096)
    assert out["memory_profile"]["num_gpu_blocks"] == cfg.num_gpu_blocks


def test_the_text_output_shows_the_profile_and_the_refusals(capsys):
    assert main(["run", "--gpu-memory-utilization", "0.9", "--max-model-len", "2048"]) == 0
    out = capsys.readouterr().out
    assert "Available KV cache memory:" in out and "GPU KV cache size: 401,632 tokens" in out
    assert "This model's maximum context length is 2048 tokens" in out and "refused requests" in out


@pytest.mark.parametrize("args, said", [
    (["--tensor-parallel-size", "3"], "tensor_parallel_size must be one of 1, 2, 4, 8"),
    (["--kv-cache-dtype", "int4"], "invalid choice"),
    (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in (0, 1]"),
    (["--gpu-memory-utilization", "0.1"], "No available memory for the cache blocks"),
    (["--model", "tiny", "--tensor-parallel-size", "4"], "tiny's 2 KV heads"),
])
def test_out_of_range_is_one_line_and_exit_2(capsys, args, said):
    try:
        code = main(["run", *args])
    except SystemExit as exc:  # argparse's own refusal of a choice it knows
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err
