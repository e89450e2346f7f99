"""The vLLM release whose defaults a run starts from: the article's v0.11 (synchronous), or v0.34's.

A version is a set of RunConfig settings, each a default of that release that changes what the scheduler
decides; the CLI (`--vllm-version`) and the page apply them, and any setting given beside the version wins.
`RunConfig.vllm_version` records which release's defaults a run started from (the summary's `vllm_version`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SYNC = "0.11"
LATEST = "0.34"


@dataclass(frozen=True)
class Version:
    key: str  # what the CLI, the URL and the summary say
    label: str  # how the page names it
    settings: dict[str, Any]  # the RunConfig fields this release's defaults set
    why: dict[str, str]  # one line per setting: the release's default it stands for


VERSIONS: dict[str, Version] = {v.key: v for v in (
    Version(SYNC, "vLLM 0.11 (synchronous)",
            {"async_scheduling": False, "scheduler_reserve_full_isl": False},
            {"async_scheduling": "the synchronous Scheduler: each pass is scheduled after the last one's output",
             "scheduler_reserve_full_isl": "no full-prompt gate: admission checks the first chunk's blocks only"}),
    Version(LATEST, "vLLM 0.34 defaults",
            {"async_scheduling": True, "scheduler_reserve_full_isl": True},
            {"async_scheduling": "SchedulerConfig.async_scheduling resolves to true on GPUs since v0.14: the "
                                 "AsyncScheduler behind EngineCore's batch queue of two",
             "scheduler_reserve_full_isl": "on by default since v0.33: a request is admitted only if its whole "
                                           "prompt fits in free blocks (only its first chunk is allocated)"}),
)}

# Defaults of the newest release that are left out, and why (docs/scheduler.md repeats them).
NOT_MODELLED = (
    "--gpu-memory-utilization 0.92 (v0.33 on; 0.9 in v0.11): read only when the pool is sized from GPU memory "
    "(--gpu-memory-utilization), which keeps the value given (the page starts at 0.9)",
    "CUDA graph memory counted in the KV budget at start-up: a pool sized from GPU memory is sized as v0.11 sizes "
    "it (engine/memory.py), graphs captured after the cache",
    "the v0.33 waiting loop's break (not skip) on a prompt over the budget with chunked prefill off: chunked "
    "prefill is always on here",
)


def version(key: str) -> Version:
    """The release named `key`; a ValueError naming the choices otherwise (one line for the CLI and the page)."""
    try:
        return VERSIONS[key]
    except KeyError:
        raise ValueError(f"unknown vLLM version {key!r}; choose one of {', '.join(VERSIONS)}") from None


def settings_for(key: str, **given: Any) -> dict[str, Any]:
    """RunConfig keyword arguments for release `key`: its defaults, overridden by the settings `given` that are
    not None, plus `vllm_version`."""
    return {**version(key).settings, **{k: v for k, v in given.items() if v is not None}, "vllm_version": key}
