"""The pool --gpu-memory-utilization gives, pinned against vLLM v0.11's own arithmetic.

vLLM's code path (v0.11.0), with the inputs each step reads:
  vllm/v1/worker/gpu_worker.py, Worker.init_device:     requested_memory = total_memory * gpu_memory_utilization
  vllm/v1/worker/gpu_worker.py, Worker.determine_available_memory (with vllm/utils memory_profiling):
      available_kv_cache_memory = requested_memory - (weights_memory + torch_peak_increase + non_torch_increase)
  vllm/v1/core/kv_cache_utils.py, get_num_blocks:        int(available_memory // page_size // num_layers)
  vllm/v1/kv_cache_interface.py, FullAttentionSpec.page_size_bytes:
      2 * block_size * num_kv_heads * head_size * get_dtype_size(dtype), with num_kv_heads per GPU from
      vllm/config ModelConfig.get_num_kv_heads = max(1, total_num_kv_heads // tensor_parallel_size)

The inputs are stated here (not read from the engine): Qwen3-8B's config.json (36 layers, 8 KV heads, head_dim
128, hidden 4096, intermediate 12288, vocab 151,936; 8.19e9 bf16 parameters); the totals cudaMemGetInfo reports
(79.11 GiB on an H100 80GB HBM3, 139.80 GiB on an H200); the profile's activation peak as engine/memory.py
estimates it (one MLP's tensors at 8,192 tokens, or the sampler's at 256 rows, whichever is larger) and its
0.1 GiB outside PyTorch (+0.25 GiB of NCCL buffers with tensor parallelism).
"""
import dataclasses

import pytest

from engine import RunConfig, simulate
from engine.config import ConfigError
from engine.logs import memory_log_lines, serve_command, startup_log_line
from engine.presets import GPUS

GIB = 2**30
TOTAL_GIB = {"H100 SXM": 79.11, "H200": 139.80}
LAYERS, KV_HEADS, HEAD_DIM, HIDDEN, INTERMEDIATE, VOCAB = 36, 8, 128, 4096, 12288, 151_936
PARAMS = 8.19e9


def activation_peak(tokens: int, seqs: int, tp: int) -> int:
    mlp = tokens * (2 * HIDDEN + 3 * (INTERMEDIATE // tp)) * 2
    sampler = min(seqs, tokens) * VOCAB * (2 + 3 * 4) + tokens * HIDDEN * 2
    return max(mlp, sampler)


def vllm_num_blocks(gpu: str, util: float, kv_bytes: int, tp: int, tokens: int = 8192, seqs: int = 256,
                    block_size: int = 16) -> int:
    total = int(round(TOTAL_GIB[gpu] * GIB))
    requested = total * util
    non_kv = PARAMS * 2 / tp + activation_peak(tokens, seqs, tp) + GIB // 10 + (GIB // 4 if tp > 1 else 0)
    available = int(requested - non_kv)
    page_size = 2 * block_size * max(1, KV_HEADS // tp) * HEAD_DIM * kv_bytes
    return max(int(available // page_size // LAYERS), 0)


CASES = [(gpu, util, dtype, tp) for gpu in TOTAL_GIB for util in (0.5, 0.7, 0.9, 0.95)
         for dtype in ("auto", "fp8") for tp in (1, 2, 4)]


@pytest.mark.parametrize("gpu, util, dtype, tp", CASES, ids=[f"{g}-{u}-{d}-tp{t}" for g, u, d, t in CASES])
def test_the_pool_is_vllms_block_count(gpu, util, dtype, tp):
    cfg = RunConfig(gpu=gpu, gpu_memory_utilization=util, kv_cache_dtype=dtype, tensor_parallel_size=tp)
    expected = vllm_num_blocks(gpu, util, 1 if dtype == "fp8" else 2, tp)
    assert abs(cfg.num_gpu_blocks - expected) <= 1


def test_vllms_default_on_an_h100_worked_by_hand():
    # 0.9 x 84,943,715,697 B (79.11 GiB) = 76,449,344,127 B; less 16.38e9 B of weights, 738,197,504 B of activation
    # (8,192 x 45,056 x 2) and 107,374,182 B: 59,223,772,441 B; a block is 16 x 147,456 = 2,359,296 B -> 25,102.
    cfg = RunConfig(gpu_memory_utilization=0.9)
    assert cfg.num_gpu_blocks == 25_102
    assert startup_log_line(cfg).startswith("INFO [kv_cache_utils.py] GPU KV cache size: 401,632 tokens")


def test_fp8_doubles_the_blocks_and_tensor_parallelism_multiplies_them():
    base = RunConfig(gpu_memory_utilization=0.9)
    fp8 = base.replace(kv_cache_dtype="fp8")
    assert fp8.memory_profile.available_kv_cache_memory == base.memory_profile.available_kv_cache_memory
    assert fp8.num_gpu_blocks in (2 * base.num_gpu_blocks, 2 * base.num_gpu_blocks + 1)
    tp2 = base.replace(tensor_parallel_size=2)
    # Each GPU holds half the weights (more memory left) and half of every token (twice the tokens per byte).
    assert tp2.memory_profile.weights_memory == base.memory_profile.weights_memory / 2
    assert tp2.num_gpu_blocks > 2 * base.num_gpu_blocks
    # The raw pool is per GPU: the same GiB holds twice the tokens on each of two GPUs.
    assert RunConfig(tensor_parallel_size=2).num_gpu_blocks == int(16 * GIB) // (16 * 147_456 // 2)
    assert RunConfig(kv_cache_dtype="fp8").num_gpu_blocks == RunConfig(tensor_parallel_size=2).num_gpu_blocks


def test_utilization_decides_the_pool_and_pool_gib_is_ignored():
    a = RunConfig(gpu_memory_utilization=0.8, pool_gib=2.0)
    b = RunConfig(gpu_memory_utilization=0.8, pool_gib=64.0)
    assert a.num_gpu_blocks == b.num_gpu_blocks and a.pool_source == "utilization"
    assert RunConfig(gpu_memory_utilization=0.8, num_gpu_blocks_override=5000).num_gpu_blocks == 5000  # vLLM's order


def test_a_higher_utilization_buys_blocks_at_the_rate_of_the_gpus_memory():
    lo, hi = RunConfig(gpu_memory_utilization=0.90), RunConfig(gpu_memory_utilization=0.95)
    gained = (hi.num_gpu_blocks - lo.num_gpu_blocks) * 16 * 147_456
    assert gained == pytest.approx(0.05 * TOTAL_GIB["H100 SXM"] * GIB, abs=2 * 16 * 147_456)


def test_vllms_start_up_refusals():
    with pytest.raises(ConfigError, match="Free memory on device .* is less than desired GPU memory utilization"):
        RunConfig(gpu_memory_utilization=1.0)
    with pytest.raises(ConfigError, match="No available memory for the cache blocks"):
        RunConfig(gpu_memory_utilization=0.15)  # 11.9 GiB: less than the 15.3 GiB of weights
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        RunConfig(gpu_memory_utilization=0.0)


def test_tensor_parallel_size_is_bounded_by_kv_heads_and_the_node(monkeypatch):
    RunConfig(tensor_parallel_size=8)  # Qwen3-8B: 8 KV heads, one per GPU
    with pytest.raises(ConfigError, match="one of 1, 2, 4, 8"):
        RunConfig(tensor_parallel_size=3)
    with pytest.raises(ConfigError, match="tiny's 2 KV heads"):
        RunConfig(model="tiny", tensor_parallel_size=4)
    monkeypatch.setitem(GPUS, "four-GPU box", dataclasses.replace(GPUS["H100 SXM"], name="four-GPU box",
                                                                   gpus_per_node=4))
    with pytest.raises(ConfigError, match="more than the 4 GPUs of one four-GPU box node"):
        RunConfig(gpu="four-GPU box", tensor_parallel_size=8)


def test_the_profile_is_logged_and_commanded_as_vllm_would():
    cfg = RunConfig(gpu_memory_utilization=0.9, kv_cache_dtype="fp8", tensor_parallel_size=2)
    assert memory_log_lines(cfg) == [
        f"INFO [gpu_worker.py] Available KV cache memory: {cfg.memory_profile.available_kv_cache_memory / GIB:.2f} "
        "GiB (each of 2 workers)"]
    command = serve_command(cfg)
    assert "--gpu-memory-utilization 0.9" in command and "--kv-cache-dtype fp8" in command
    assert "--tensor-parallel-size 2" in command
    assert "--gpu-memory-utilization" not in serve_command(RunConfig())
    summary = simulate(cfg).summary()
    assert summary["memory_profile"]["num_gpu_blocks"] == cfg.num_gpu_blocks
    assert summary["num_gpus"] == 2 and summary["throughput_per_gpu_tok_s"] == summary["throughput_tok_s"] / 2
    assert summary["kv_cache_dtype"] == "fp8" and summary["gpu_memory_utilization"] == 0.9
