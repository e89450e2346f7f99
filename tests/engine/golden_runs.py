"""The configs whose `trace_digest` and summary are pinned in golden_runs.json, and the recorder.

Recorded before a change to the engine's structure (not its rules) so the change can be proved to leave
every figure bit for bit: the article's scenarios, the vendored vLLM fixtures, and seeded random configs
covering reserve, static batching, the full-prompt gate, every model and GPU, and other block sizes.

    python -m tests.engine.golden_runs   # re-record (only when the rules themselves change, on purpose)
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from engine import MODELS, GPUS, RunConfig, Workload, simulate

HERE = Path(__file__).resolve().parent
TABLE = HERE / "golden_runs.json"
FIXTURES = HERE.parent / "fixtures" / "vllm"


def article_configs() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{}]
    out += [{"max_num_seqs": n} for n in (1, 8, 32, 64, 128, 512)]
    out += [{"pool_gib": g} for g in (2.0, 8.0, 32.0, 64.0)]
    out += [{"pool_gib": 2.0, "max_num_seqs": 512}]
    out += [{"spread": s} for s in (1.0, 4.0, 32.0)]
    out += [{"allocation": "reserve", "declared_multiple": k} for k in (1.0, 2.0, 4.0, 8.0)]
    out += [{"unit": "request", "max_num_seqs": 64}, {"unit": "request", "allocation": "reserve", "max_num_seqs": 64}]
    out += [{"scheduler_reserve_full_isl": True}, {"scheduler_reserve_full_isl": True, "pool_gib": 2.0}]
    out += [{"max_num_batched_tokens": 2048}, {"max_num_batched_tokens": 1024, "pool_gib": 1.0, "max_num_seqs": 64}]
    return out


def fixture_configs() -> list[dict[str, Any]]:
    out = []
    for path in sorted(FIXTURES.glob("vllm-schedule-*.json")):
        fx = json.loads(path.read_text())
        out.append({
            "max_num_seqs": fx["max_num_seqs"], "max_num_batched_tokens": fx["max_num_batched_tokens"],
            "block_size": fx["block_size"], "num_gpu_blocks_override": fx["num_gpu_blocks"],
            "scheduler_reserve_full_isl": fx["scheduler_reserve_full_isl"],
            "workload": {"fixture": path.name},
        })
    return out


def random_configs(count: int = 40, seed: int = 20261201) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        c: dict[str, Any] = {
            "max_num_seqs": rng.choice((1, 4, 16, 48, 100, 256, 700)),
            "pool_gib": rng.choice((0.5, 1.0, 2.0, 3.5, 8.0, 16.0, 40.0)),
            "allocation": rng.choice(("on-demand", "on-demand", "reserve")),
            "declared_multiple": rng.choice((1.0, 1.5, 3.0, 8.0)),
            "unit": rng.choice(("pass", "pass", "request")),
            "spread": rng.choice((1.0, 2.5, 16.0, 40.0)),
            "max_num_batched_tokens": rng.choice((1024, 2048, 8192, 16384)),
            "block_size": rng.choice((8, 16, 16, 32)),
            "requests": rng.choice((16, 64, 256)),
            "seed": rng.randrange(0, 1000),
            "model": rng.choice([m for m in MODELS if m != "tiny"]),
            "gpu": rng.choice(list(GPUS)),
            "scheduler_reserve_full_isl": rng.random() < 0.3,
        }
        if c["max_num_batched_tokens"] < c["max_num_seqs"]:
            continue
        out.append(c)
    return out


def build(spec: dict[str, Any]) -> RunConfig:
    spec = dict(spec)
    if isinstance(spec.get("workload"), dict):
        fx = json.loads((FIXTURES / spec["workload"]["fixture"]).read_text())
        spec["workload"] = Workload(fx["workload"]["prompt_len"], fx["workload"]["output_len"])
    return RunConfig(**spec)


def outcome(spec: dict[str, Any]) -> dict[str, Any]:
    """The summary of a run, or the one-line refusal for a config that cannot run (also pinned)."""
    try:
        return simulate(build(spec)).summary()
    except ValueError as exc:  # ConfigError / WorkloadError: the refusal is behaviour too
        return {"error": f"{type(exc).__name__}: {exc}"}


def all_configs() -> list[dict[str, Any]]:
    return article_configs() + fixture_configs() + random_configs()


def record() -> None:
    rows = [{"config": spec, "summary": outcome(spec)} for spec in all_configs()]
    TABLE.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{len(rows)} runs recorded in {TABLE}")


if __name__ == "__main__":
    record()
