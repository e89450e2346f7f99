"""The engine makes, pass by pass, the schedules vLLM's own V1 scheduler made (tests/fixtures/vllm/).

One loop over every fixture: `vllm-schedule-*` (prefix caching off), `vllm-apc-*` (prefix caching on, vLLM's
V1 default; these also record every admission's cached tokens and the same workload with caching off) and
`vllm034-async-*` (vLLM 0.34's AsyncScheduler behind its batch queue of two, its default since 0.14)."""
import json
from functools import cache
from pathlib import Path

import pytest

from engine import RunConfig, Trace, Workload, simulate
from engine.cli import main
from tests.conftest import FIXTURES_DIR

SCHEDULES = sorted(FIXTURES_DIR.glob("vllm-schedule-*.json"))
APC = sorted(FIXTURES_DIR.glob("vllm-apc-*.json"))
ASYNC = sorted(FIXTURES_DIR.glob("vllm034-async-*.json"))
FIXTURES = SCHEDULES + APC + ASYNC
# The synchronous Scheduler's (passes, preemptions) on the async fixtures' workloads, as the fixtures' README
# (tests/fixtures/vllm/README.md) records them from vLLM 0.34.
ASYNC_FIXTURES_SYNC = {"vllm034-async-a": (1535, 0), "vllm034-async-b": (7815, 52)}


@cache
def _fixture(path: Path) -> dict:
    return json.loads(path.read_text())


def _config(fx: dict, caching: bool | None = None, overlap: bool | None = None) -> RunConfig:
    """vLLM's settings for the fixture; `caching` and `overlap` (async scheduling) None: as recorded."""
    wl = fx["workload"]
    return RunConfig(
        max_num_seqs=fx["max_num_seqs"], max_num_batched_tokens=fx["max_num_batched_tokens"],
        block_size=fx["block_size"], num_gpu_blocks_override=fx["num_gpu_blocks"],
        scheduler_reserve_full_isl=fx["scheduler_reserve_full_isl"],
        enable_prefix_caching=fx.get("enable_prefix_caching", False) if caching is None else caching,
        async_scheduling=fx.get("async_scheduling", False) if overlap is None else overlap,
        workload=Workload(wl["prompt_len"], wl["output_len"], prefix_group=wl.get("prefix_group"),
                          prefix_len=wl.get("prefix_len")),
    )


@cache
def _trace(path: Path) -> Trace:
    """The engine's run of the fixture as recorded (one run shared by the checks below)."""
    return simulate(_config(_fixture(path)))


def test_fixtures_are_present():
    assert len(SCHEDULES) >= 2, f"expected vLLM fixtures in {FIXTURES_DIR}"
    assert len(APC) >= 2, f"expected vLLM prefix-caching fixtures in {FIXTURES_DIR}"
    assert all(_fixture(p)["enable_prefix_caching"] for p in APC)
    assert len(ASYNC) >= 2, f"expected vLLM async-scheduling fixtures in {FIXTURES_DIR}"
    assert all(_fixture(p)["async_scheduling"] and _fixture(p)["batch_queue_size"] == 2 for p in ASYNC)


@pytest.mark.parametrize("path", ASYNC, ids=lambda p: p.stem)
def test_async_fixture_workloads_synchronously_give_vllm_sync_schedule(path):
    """Async scheduling is what changes these schedules: off, the same workload gives the synchronous
    Scheduler's passes and preemptions, which differ from the recorded async ones."""
    s = simulate(_config(_fixture(path), overlap=False)).summary()
    assert (s["passes"], s["preemptions"]) == ASYNC_FIXTURES_SYNC[path.stem]
    assert s["passes"] != _fixture(path)["summary"]["passes"]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_engine_reproduces_vllm_schedule_pass_by_pass(path):
    fx, trace = _fixture(path), _trace(path)
    assert trace.n_seqs.tolist() == fx["n_seqs"]
    assert trace.n_tokens.tolist() == fx["n_tokens"]
    assert trace.preempted_lists() == fx["preempted"]
    if "admit" in fx:
        assert trace.admit_lists() == fx["admit"]  # every admission's tokens served from the cache


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_engine_summary_matches_vllm_counters(path):
    fx, s = _fixture(path), _trace(path).summary()
    expected = fx["summary"]
    for key in ("passes", "peak_batch", "preemptions", "recomputed_tokens", "recomputed_prompt_tokens"):
        assert s[key] == expected[key], key
    assert s["mean_batch"] == pytest.approx(expected["mean_batch"], rel=1e-12)
    assert s["prefix_cache_hit_tokens"] == expected.get("cache_hit_tokens", 0)
    assert s["prefix_cache_readmission_hit_tokens"] == expected.get("cache_hit_readmission", 0)


@pytest.mark.parametrize("path", APC, ids=lambda p: p.stem)
def test_same_workload_with_caching_off_matches_vllm(path):
    """The APC fixtures also record vLLM on the same workload with caching off: shared prefixes then change
    nothing."""
    fx = _fixture(path)
    s = simulate(_config(fx, caching=False)).summary()
    for key, value in fx["apc_off"]["summary"].items():
        if key in s:
            assert s[key] == value, key
    assert s["prefix_cache_hit_tokens"] == 0


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_cli_replays_fixture_from_workload_file(path, tmp_path, capsys):
    """The outside check's route: --workload + --num-gpu-blocks-override (+ --enable-prefix-caching) +
    --trace-out. In process (engine.cli.main is what `python -m engine` runs; tests/engine/test_cli.py runs
    that command itself)."""
    fx = _fixture(path)
    wl = tmp_path / "workload.json"
    wl.write_text(json.dumps(fx["workload"]))
    out = tmp_path / "trace.json"
    argv = ["run", "--workload", str(wl), "--max-num-seqs", str(fx["max_num_seqs"]),
            "--max-num-batched-tokens", str(fx["max_num_batched_tokens"]), "--block-size", str(fx["block_size"]),
            "--num-gpu-blocks-override", str(fx["num_gpu_blocks"]), "--trace-out", str(out), "--json"]
    if fx.get("enable_prefix_caching"):
        argv.append("--enable-prefix-caching")
    if fx.get("async_scheduling"):
        argv.append("--async-scheduling")
    assert main(argv) == 0
    printed = capsys.readouterr()
    got = json.loads(out.read_text())
    for key in ("n_seqs", "n_tokens", "preempted", *(("admit",) if "admit" in fx else ())):
        assert got[key] == fx[key], key
    summary = json.loads(printed.out)
    assert summary["preemptions"] == fx["summary"]["preemptions"]
    assert summary["prefix_cache_hit_tokens"] == fx["summary"].get("cache_hit_tokens", 0)
