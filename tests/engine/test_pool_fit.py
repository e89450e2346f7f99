"""A pool bigger than a GPU holds beside the weights is simulated, and said: one line, one function."""
import subprocess
import sys

import pytest

from engine import RunConfig, simulate
from engine.config import pool_beyond_gpu
from engine.presets import GPUS, MODELS, largest_vllm_pool_gib
from tests.conftest import ROOT


# vLLM's default KV cache for Qwen3-8B on one H100 SXM (engine/memory.py states each term): 0.9 of the 79.11 GiB
# cudaMemGetInfo reports, less 8.19e9 bf16 weights, less the profiling pass's MLP peak at 8,192 tokens
# (residual + normed hidden + gate/up + activation, bf16), less 0.1 GiB outside PyTorch.
DEFAULT_H100_GIB = (0.9 * 79.11 - 8.19e9 * 2 / 2**30 - 8192 * (2 * 4096 + 3 * 12288) * 2 / 2**30 - 0.1)


def test_the_largest_pool_is_what_is_left_of_the_gpus_share_after_the_weights():
    h100 = largest_vllm_pool_gib(MODELS["Qwen3-8B"], GPUS["H100 SXM"])
    assert h100 == pytest.approx(DEFAULT_H100_GIB, abs=1e-6)
    assert 50 < h100 < 56  # about 54 GiB is what vLLM is commonly reported to give an 8B model on an H100
    assert largest_vllm_pool_gib(MODELS["Qwen3-8B"], GPUS["H200"]) > 100
    assert largest_vllm_pool_gib(MODELS["Qwen3-0.6B"], GPUS["H100 SXM"]) > h100


def test_the_articles_pools_fit_up_to_the_one_that_does_not():
    assert pool_beyond_gpu(RunConfig()) is None
    assert pool_beyond_gpu(RunConfig(pool_gib=32.0)) is None
    warning = pool_beyond_gpu(RunConfig(pool_gib=64.0))
    assert warning and "64.0 GiB" in warning and "H100 SXM" in warning and f"{DEFAULT_H100_GIB:.1f} GiB" in warning
    assert pool_beyond_gpu(RunConfig(pool_gib=64.0, gpu="H200")) is None
    assert simulate(RunConfig(pool_gib=64.0)).summary()["finished_requests"] == 256  # not refused


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_the_cli_warns_in_one_line_and_still_runs():
    done = cli("run", "--pool-gib", "1000", "--json")
    assert done.returncode == 0 and '"finished_requests": 256' in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ") and f"at most about {DEFAULT_H100_GIB:.1f} GiB" in lines[0]
    assert cli("run", "--json").stderr == ""


def test_a_refused_run_gets_only_its_error_line():
    done = cli("run", "--pool-gib", "1000", "--max-model-len", "16")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "warning" not in done.stderr


def test_a_pool_within_the_estimates_precision_is_not_called_oversized():
    blocks = int(DEFAULT_H100_GIB * 2**30) // (16 * 147_456) + 20  # 0.05 GiB more than the estimate
    assert pool_beyond_gpu(RunConfig(num_gpu_blocks_override=blocks)) is None
    assert pool_beyond_gpu(RunConfig(num_gpu_blocks_override=blocks + 100)) is not None
