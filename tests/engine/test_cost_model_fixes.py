"""What --kv-cache-dtype fp8 and --tensor-parallel-size do to one pass's price, against a hand computation.

The pass: 64 decodes, each after 2,000 computed tokens, and one 512-token prefill chunk after 1,024. The
constants are stated, not read from the engine: Qwen3-8B (8.19e9 bf16 parameters, 36 layers, 32 query heads,
head_dim 128, hidden 4096, 147,456 KV bytes per token in bf16), the H100 SXM's fitted roofline (1.1 ms,
3.2 TB/s, 650 TFLOP/s) and NVLink 4 at 450 GB/s each way.
"""
import numpy as np
import pytest

from engine import RunConfig, simulate
from engine.cost_model import all_reduce_bytes_per_token, run_pass_price
from engine.presets import MODELS

NEW = np.array([1] * 64 + [512], dtype=np.int64)
BEFORE = np.array([2000] * 64 + [1024], dtype=np.int64)
WEIGHTS, PARAMS, KV_PER_TOKEN = 8.19e9 * 2, 8.19e9, 147_456
ATTN_PER_PAIR = 4 * 36 * 32 * 128
OVERHEAD, BANDWIDTH, FLOP_RATE, NVLINK = 1.1e-3, 3.2e12, 650e12, 450e9
CONTEXT = int((NEW + BEFORE).sum())  # every KV token the pass reads: its context plus what it writes
PAIRS = int((NEW * BEFORE + NEW * (NEW + 1) // 2).sum())  # token j of a chunk attends to before + j keys


def priced(cfg: RunConfig) -> tuple[float, float, float]:
    return run_pass_price(cfg, NEW, BEFORE)


def test_fp8_halves_the_kv_bytes_a_pass_reads():
    auto_bytes, auto_flops, _ = priced(RunConfig())
    fp8_bytes, fp8_flops, fp8_seconds = priced(RunConfig(kv_cache_dtype="fp8"))
    assert auto_bytes == WEIGHTS + KV_PER_TOKEN * CONTEXT
    assert fp8_bytes == WEIGHTS + KV_PER_TOKEN // 2 * CONTEXT
    assert (fp8_bytes - WEIGHTS) * 2 == auto_bytes - WEIGHTS
    assert fp8_flops == auto_flops  # the same arithmetic, on values read at half the size
    expected = OVERHEAD + max(fp8_bytes / BANDWIDTH, fp8_flops / FLOP_RATE)
    assert fp8_seconds == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("tp", [2, 4])
def test_tensor_parallelism_divides_each_gpus_share_and_adds_two_all_reduces_per_layer(tp):
    bytes_moved, flops, seconds = priced(RunConfig(tensor_parallel_size=tp))
    assert bytes_moved == pytest.approx(WEIGHTS / tp + KV_PER_TOKEN / tp * CONTEXT, rel=1e-15)
    assert flops == pytest.approx(2 * PARAMS / tp * NEW.sum() + ATTN_PER_PAIR / tp * PAIRS, rel=1e-15)
    # Two all-reduces per layer of new tokens x 4,096 bf16 values; a ring sends 2 (n - 1) / n of each.
    all_reduce = 2 * 36 * int(NEW.sum()) * 4096 * 2 * 2 * (tp - 1) / tp / NVLINK
    expected = OVERHEAD + max(bytes_moved / BANDWIDTH, flops / FLOP_RATE) + all_reduce
    assert seconds == pytest.approx(expected, rel=1e-12)
    assert all_reduce > 0.2e-3  # visible: a few tenths of a millisecond on this pass


def test_one_gpu_pays_no_all_reduce():
    assert all_reduce_bytes_per_token(MODELS["Qwen3-8B"], 1) == 0.0
    bytes_moved, flops, seconds = priced(RunConfig())
    assert seconds == OVERHEAD + max(bytes_moved / BANDWIDTH, flops / FLOP_RATE)


def test_sharding_buys_concurrency_and_costs_gpus():
    one, two = simulate(RunConfig()).summary(), simulate(RunConfig(tensor_parallel_size=2)).summary()
    assert two["peak_batch"] > one["peak_batch"] and two["preemptions"] < one["preemptions"]
    assert two["throughput_tok_s"] > one["throughput_tok_s"]
    # Where memory does not bind (64 slots: nothing is evicted on one GPU either) the batch is the same, the node
    # serves more and each GPU less: half the bytes per pass, but the same launch overhead and the all-reduces.
    one, two = (simulate(RunConfig(max_num_seqs=64, tensor_parallel_size=n)).summary() for n in (1, 2))
    assert one["preemptions"] == two["preemptions"] == 0 and one["peak_batch"] == two["peak_batch"]
    assert one["throughput_tok_s"] < two["throughput_tok_s"] < 2 * one["throughput_tok_s"]
    assert two["throughput_per_gpu_tok_s"] < one["throughput_per_gpu_tok_s"]


def test_fp8_buys_the_batch_a_pool_twice_the_size_would():
    fp8 = simulate(RunConfig(kv_cache_dtype="fp8", pool_gib=8.0))
    bf16 = simulate(RunConfig(pool_gib=16.0))
    assert fp8.config.num_gpu_blocks == bf16.config.num_gpu_blocks
    # Same blocks, same schedule; only the pass prices differ (fp8 reads half the KV bytes).
    assert fp8.digest == bf16.digest
    assert fp8.summary()["throughput_tok_s"] > bf16.summary()["throughput_tok_s"]
