"""Kernel launches per pass of the live model: the torch-op path against the fused Triton path, on a CPU.

    python benchmarks/decode_kernels.py

At batch 1 a Qwen3-8B decode pass should cost what reading its 16 GB of weights costs (~5 ms on an H100).
Every extra kernel adds a fixed few microseconds even inside a CUDA graph, so the count of launches per
layer decides whether batch-1 decode can reach the bandwidth roofline. This counts them without a GPU:
aten ops that launch work (views, no-op casts and allocations excluded) plus Triton launches, for a bf16
decode pass and a mixed pass (decodes plus three prompts, whose attention the torch path runs chunk by
chunk) of a model with Qwen3's layer structure (the tiny preset's sizes: the count does not depend on
sizes). Triton runs in its interpreter here; only launches are counted, not timed.
The last column multiplies by Qwen3-8B's 36 layers and by an assumed ~2.5 us per small kernel: a
projection to read beside benchmarks/live_gpu.py's measurements, not a measurement.
"""
from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel import
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes  # noqa: E402

# Ops that only make views, allocate, or cast to the same dtype: no kernel runs on a GPU.
NO_KERNEL = {"view", "_unsafe_view", "_reshape_alias", "reshape", "slice", "select", "unsqueeze", "squeeze",
             "transpose", "t", "permute", "expand", "split", "split_with_sizes", "chunk", "as_strided", "detach",
             "alias", "lift_fresh", "empty", "empty_like", "empty_strided", "unbind", "resolve_conj",
             "resolve_neg", "_local_scalar_dense"}
QWEN3_8B_LAYERS = 36
US_PER_SMALL_KERNEL = 2.5


class CountLaunches(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        if name not in NO_KERNEL and not (name == "to" and out is args[0]):  # a cast to the same dtype is free
            self.ops[name] += 1
        return out


TRITON_LAUNCHES: Counter = Counter()


def count_triton_launches() -> bool:
    """Wrap every @triton.jit kernel of the live model so a launch bumps TRITON_LAUNCHES; False without triton."""
    try:
        from kernels import fused_ops_triton, paged_decode_triton, paged_prefill_triton
    except ImportError:
        return False

    class Counted:
        def __init__(self, kernel, name):
            self.kernel, self.name = kernel, name

        def __getitem__(self, grid):
            launch = self.kernel[grid]

            def run(*args, **kwargs):
                TRITON_LAUNCHES["triton " + self.name] += 1
                with _disable_current_modes():  # the interpreter's own tensor shuffling is not a launch
                    return launch(*args, **kwargs)
            return run

    for module in (fused_ops_triton, paged_decode_triton, paged_prefill_triton):
        for name in dir(module):
            if name.startswith("_") and name.endswith("_kernel"):
                setattr(module, name, Counted(getattr(module, name), name.strip("_")))
    return True


def pass_launches(use_triton: bool, num_layers: int, prompts: int, batch: int = 4) -> Counter:
    """Launches of one bf16 pass (aten ops that run work, plus Triton kernels): `batch` decodes and
    `prompts` whole 24-token prompts."""
    from dataclasses import replace

    from engine.live.backend import TORCH, triton_kernels
    from engine.live.kv_cache import PagedKVCache
    from engine.live.qwen3 import build_model
    from engine.live.runner import ModelRunner, PassInput
    from engine.presets import MODELS

    spec = replace(MODELS["tiny"], num_layers=num_layers)
    model = build_model(spec, "cpu", torch.bfloat16)
    cache = PagedKVCache(spec, 64, 16, "cpu", torch.bfloat16)
    runner = ModelRunner(model, cache, max_num_seqs=batch + prompts, max_model_len=256,
                         kernels=triton_kernels() if use_triton else TORCH, use_cuda_graphs=False)
    tables = [[1 + 2 * i, 2 + 2 * i] for i in range(batch + prompts)]
    step = PassInput([np.array([7])] * batch + [np.arange(24)] * prompts, [20] * batch + [0] * prompts, tables,
                     [True] * (batch + prompts))
    runner.execute(step)  # warm: nothing lazy is counted
    TRITON_LAUNCHES.clear()
    mode = CountLaunches()
    with mode:
        runner.execute(step)
    return mode.ops + TRITON_LAUNCHES


def main() -> int:
    paths = [("torch ops", False)]
    if count_triton_launches():
        paths.append(("fused Triton", True))
    else:
        print("triton is not installed: only the torch-op path is counted")
    rows = []
    for prompts, kind in ((0, "decode"), (3, "mixed")):
        for label, use_triton in paths:
            # Launches outside the layers (embedding, final add, norm, lm_head, argmax) do not grow with depth:
            # passes of a 1-layer and a 2-layer model separate them from the per-layer count.
            one, two = pass_launches(use_triton, 1, prompts), pass_launches(use_triton, 2, prompts)
            per_layer = sum(two.values()) - sum(one.values())
            rows.append((f"{kind}: {label}", per_layer, sum(one.values()) - per_layer, one))
    print("bf16 passes of 4 decodes (decode), and 4 decodes + 3 whole prompts (mixed)")
    print(f"{'pass: path':<24}{'per layer':>10}{'outside':>9}{'Qwen3-8B pass':>15}{'~fixed cost':>13}")
    for label, per_layer, outside, _ in rows:
        total = per_layer * QWEN3_8B_LAYERS + outside
        print(f"{label:<24}{per_layer:>10}{outside:>9}{total:>15,}{total * US_PER_SMALL_KERNEL / 1e3:>10.1f} ms")
    for label, *_, ops in rows:
        print(f"{label}, 1-layer pass: " + ", ".join(f"{name} {n}" for name, n in ops.most_common()))
    print(f"(~fixed cost: launches x {US_PER_SMALL_KERNEL} us, an assumption; a Qwen3-8B bf16 decode reads "
          f"~16.4 GB of weights, ~5 ms at 3.35 TB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
