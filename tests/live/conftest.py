"""Live-mode tests run on a CPU: the tiny preset, fp32, and Triton's interpreter for the CUDA kernel.

TRITON_INTERPRET is read when @triton.jit decorates, so it is set here, before any kernel import.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TORCH_COMPILE_DISABLE", "1")
