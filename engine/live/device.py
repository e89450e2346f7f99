"""Where a live run runs: is there a CUDA device, which one, in which dtype, and does the run fit in its
memory. Every answer a person can act on is a `LiveError` line. torch is imported inside functions, so
the app can ask `live_available()` on a machine without it.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

from engine.config import RunConfig
from engine.live.errors import LiveError
from engine.presets import ModelSpec

DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
_GIB = float(1 << 30)


def _build_without_import() -> tuple[str, str | None] | None:
    """(torch's version, its CUDA version or None) read from the installed torch/version.py without importing
    torch, or None where that cannot be read. Importing torch costs a page server about 2 s of CPU and 180 MB
    for an answer a CPU-only build already gives in that file."""
    if "torch" in sys.modules:
        return None
    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        tree = ast.parse(Path(spec.submodule_search_locations[0], "version.py").read_text())
    except (ImportError, ValueError, OSError, SyntaxError):
        return None
    found = {}
    for node in tree.body:  # `__version__ = '2.13.0+cpu'`, `cuda: Optional[str] = None`
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign):
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Constant):
            found[target.id] = node.value.value
    version, cuda = found.get("__version__"), found.get("cuda", "")
    if not isinstance(version, str) or not (cuda is None or isinstance(cuda, str)):
        return None
    return version, cuda


def live_available() -> tuple[bool, str]:
    """(True, device name) when torch sees a CUDA device; otherwise (False, why not)."""
    build = _build_without_import()
    if build is None or build[1] is not None:  # unknown, or a CUDA build: only torch can say more
        try:
            import torch
        except ImportError:
            return False, "torch is not installed on the server (pip install 'continuous-batching-explorable[live]')"
        build = (torch.__version__, torch.version.cuda)
    version, cuda = build
    if cuda is None:
        return False, f"this torch build ({version}) has no CUDA support"
    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device on the server"
    return True, torch.cuda.get_device_name(0)


def resolve_device(torch, device: str):
    if device not in ("cuda", "cpu") and not device.startswith("cuda:"):
        raise LiveError(f"device must be cuda or cpu; got {device!r}")
    if device.startswith("cuda"):
        ok, why = live_available()
        if not ok:
            raise LiveError(f"--device cuda asked for, but {why}; use --device cpu with --model-preset tiny")
    return torch.device(device)


def resolve_dtype(torch, device, dtype: str | None) -> tuple[str, object]:
    """(name, torch dtype): bf16 on a GPU and fp32 on a CPU unless asked otherwise."""
    name = dtype or ("bf16" if device.type == "cuda" else "fp32")
    if name not in DTYPES:
        raise LiveError(f"dtype must be one of {', '.join(DTYPES)}; got {name!r}")
    return name, getattr(torch, DTYPES[name])


def device_name(torch, device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({os.cpu_count()} cores, torch {torch.__version__})"


def _footprint(cfg: RunConfig, spec: ModelSpec) -> tuple[float, float, float]:
    """Bytes of weights, KV pool and a rough activation peak (a full token budget through the MLP)."""
    from engine.live.kv_cache import kv_pool_bytes

    weights = spec.weight_bytes
    pool = kv_pool_bytes(spec, cfg.num_gpu_blocks, cfg.block_size, spec.dtype_bytes)
    act = cfg.max_num_batched_tokens * (3 * spec.intermediate_size + 6 * spec.hidden_size) * spec.dtype_bytes
    act += cfg.max_num_seqs * spec.vocab_size * 4
    return float(weights), float(pool), float(act)


def check_memory(torch, cfg: RunConfig, spec: ModelSpec, device) -> None:
    """Refuse up front what cannot fit, rather than fail half-allocated."""
    weights, pool, act = _footprint(cfg, spec)
    need = weights + pool + act
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        where = f"the GPU has {free / _GIB:.1f} GiB free"
    else:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.8
        where = f"80% of this machine's memory is {free / _GIB:.1f} GiB"
    if need > free:
        raise LiveError(
            f"{spec.name} needs about {need / _GIB:.1f} GiB (weights {weights / _GIB:.1f} + KV pool "
            f"{pool / _GIB:.1f} + activations {act / _GIB:.1f}) but {where}; lower {_pool_setting(cfg)} "
            f"or max_num_batched_tokens, or pick a smaller --model-preset"
        )


def _pool_setting(cfg: RunConfig) -> str:
    if cfg.num_gpu_blocks_override is not None:
        return f"num_gpu_blocks_override (now {cfg.num_gpu_blocks_override:,})"
    return f"pool_gib (now {cfg.pool_gib:g})"


def oom_message(cfg: RunConfig, spec: ModelSpec, stage: str) -> str:
    weights, pool, act = _footprint(cfg, spec)
    return (f"GPU out of memory while {stage} ({spec.name}: weights {weights / _GIB:.1f} GiB, KV pool "
            f"{pool / _GIB:.1f} GiB, activations ~{act / _GIB:.1f} GiB); lower {_pool_setting(cfg)}, "
            f"max_num_batched_tokens (now {cfg.max_num_batched_tokens}) or max_num_seqs (now {cfg.max_num_seqs})")
