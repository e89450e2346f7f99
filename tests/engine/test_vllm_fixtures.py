"""The engine makes, pass by pass, the schedules vLLM's own V1 scheduler made (shared/fixtures/)."""
import json
import subprocess
import sys

import pytest

from engine import RunConfig, Workload, simulate
from tests.conftest import FIXTURES_DIR, ROOT

FIXTURES = sorted(FIXTURES_DIR.glob("vllm-schedule-*.json"))


def _config(fx: dict) -> RunConfig:
    return RunConfig(
        max_num_seqs=fx["max_num_seqs"], max_num_batched_tokens=fx["max_num_batched_tokens"],
        block_size=fx["block_size"], num_gpu_blocks_override=fx["num_gpu_blocks"],
        scheduler_reserve_full_isl=fx["scheduler_reserve_full_isl"],
        workload=Workload(fx["workload"]["prompt_len"], fx["workload"]["output_len"]),
    )


def test_fixtures_are_present():
    assert len(FIXTURES) >= 2, f"expected vLLM fixtures in {FIXTURES_DIR}"


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_engine_reproduces_vllm_schedule_pass_by_pass(path):
    fx = json.loads(path.read_text())
    trace = simulate(_config(fx))
    assert trace.n_seqs.tolist() == fx["n_seqs"]
    assert trace.n_tokens.tolist() == fx["n_tokens"]
    assert trace.preempted_lists() == fx["preempted"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_engine_summary_matches_vllm_counters(path):
    fx = json.loads(path.read_text())
    s = simulate(_config(fx)).summary()
    expected = fx["summary"]
    for key in ("passes", "peak_batch", "preemptions", "recomputed_tokens", "recomputed_prompt_tokens"):
        assert s[key] == expected[key], key
    assert s["mean_batch"] == pytest.approx(expected["mean_batch"], rel=1e-12)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_cli_replays_fixture_from_workload_file(path, tmp_path):
    """The outside check's route: --workload + --num-gpu-blocks-override + --trace-out."""
    fx = json.loads(path.read_text())
    wl = tmp_path / "workload.json"
    wl.write_text(json.dumps(fx["workload"]))
    out = tmp_path / "trace.json"
    cmd = [sys.executable, "-m", "engine", "run", "--workload", str(wl), "--max-num-seqs", str(fx["max_num_seqs"]),
           "--max-num-batched-tokens", str(fx["max_num_batched_tokens"]), "--block-size", str(fx["block_size"]),
           "--num-gpu-blocks-override", str(fx["num_gpu_blocks"]), "--trace-out", str(out), "--json"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(out.read_text())
    assert got["n_seqs"] == fx["n_seqs"]
    assert got["n_tokens"] == fx["n_tokens"]
    assert got["preempted"] == fx["preempted"]
    assert json.loads(done.stdout)["preemptions"] == fx["summary"]["preemptions"]


# -- prefix caching on (vLLM's V1 default): vllm-apc-*.json ---------------------------------------------------
APC_FIXTURES = sorted(FIXTURES_DIR.glob("vllm-apc-*.json"))


def _apc_config(fx: dict, caching: bool = True) -> RunConfig:
    wl = fx["workload"]
    return _config(fx).replace(
        enable_prefix_caching=caching,
        workload=Workload(wl["prompt_len"], wl["output_len"], prefix_group=wl["prefix_group"], prefix_len=wl["prefix_len"]),
    )


def test_apc_fixtures_are_present():
    assert len(APC_FIXTURES) >= 2, f"expected vLLM prefix-caching fixtures in {FIXTURES_DIR}"


@pytest.mark.parametrize("path", APC_FIXTURES, ids=lambda p: p.stem)
def test_engine_reproduces_vllm_prefix_caching_schedule_pass_by_pass(path):
    fx = json.loads(path.read_text())
    assert fx["enable_prefix_caching"]
    trace = simulate(_apc_config(fx))
    assert trace.n_seqs.tolist() == fx["n_seqs"]
    assert trace.n_tokens.tolist() == fx["n_tokens"]
    assert trace.preempted_lists() == fx["preempted"]
    assert trace.admit_lists() == fx["admit"]  # every admission's tokens served from the cache


@pytest.mark.parametrize("path", APC_FIXTURES, ids=lambda p: p.stem)
def test_engine_prefix_caching_summary_matches_vllm_counters(path):
    fx = json.loads(path.read_text())
    s = simulate(_apc_config(fx)).summary()
    expected = fx["summary"]
    for key in ("passes", "peak_batch", "preemptions", "recomputed_tokens", "recomputed_prompt_tokens"):
        assert s[key] == expected[key], key
    assert s["prefix_cache_hit_tokens"] == expected["cache_hit_tokens"]
    assert s["prefix_cache_readmission_hit_tokens"] == expected["cache_hit_readmission"]
    assert s["mean_batch"] == pytest.approx(expected["mean_batch"], rel=1e-12)


@pytest.mark.parametrize("path", APC_FIXTURES, ids=lambda p: p.stem)
def test_same_workload_with_caching_off_matches_vllm(path):
    """The fixtures also record vLLM on the same workload with caching off: shared prefixes then change nothing."""
    fx = json.loads(path.read_text())
    s = simulate(_apc_config(fx, caching=False)).summary()
    for key, value in fx["apc_off"]["summary"].items():
        if key in s:
            assert s[key] == value, key
    assert s["prefix_cache_hit_tokens"] == 0


@pytest.mark.parametrize("path", APC_FIXTURES, ids=lambda p: p.stem)
def test_cli_replays_prefix_caching_fixture(path, tmp_path):
    fx = json.loads(path.read_text())
    wl = tmp_path / "workload.json"
    wl.write_text(json.dumps(fx["workload"]))
    out = tmp_path / "trace.json"
    cmd = [sys.executable, "-m", "engine", "run", "--workload", str(wl), "--max-num-seqs", str(fx["max_num_seqs"]),
           "--max-num-batched-tokens", str(fx["max_num_batched_tokens"]), "--block-size", str(fx["block_size"]),
           "--num-gpu-blocks-override", str(fx["num_gpu_blocks"]), "--enable-prefix-caching",
           "--trace-out", str(out), "--json"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(out.read_text())
    for key in ("n_seqs", "n_tokens", "preempted", "admit"):
        assert got[key] == fx[key], key
    assert json.loads(done.stdout)["prefix_cache_hit_tokens"] == fx["summary"]["cache_hit_tokens"]
