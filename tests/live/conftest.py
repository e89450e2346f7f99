"""Live-mode tests run on a CPU: the tiny preset, fp32, and Triton's interpreter for the CUDA kernel.

TRITON_INTERPRET is read when @triton.jit decorates, so it is set here, before any kernel import.
"""
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")

# torch is the `live` extra, not the `test` one, so the README's test command never pulls a CUDA build onto a
# CPU machine; .ci/run installs the CPU build first and so runs these.
pytest.importorskip("torch", reason="live-mode tests need torch: pip install -e \".[live]\" (on a CPU machine, "
                    "pip install torch --index-url https://download.pytorch.org/whl/cpu first)")
