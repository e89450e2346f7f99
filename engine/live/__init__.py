"""Live GPU mode: the project's scheduler drives a real torch model (Qwen3-shaped) with a paged KV cache.

Importing this package needs no torch; `live_available()` says whether a live run can start here.
"""
from engine.live.errors import LiveCancelled, LiveError
from engine.live.device import live_available
from engine.live.executor import run_live

__all__ = ["live_available", "run_live", "LiveError", "LiveCancelled"]
