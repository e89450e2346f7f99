"""What a live run can fail with, in words a person can act on. No torch import here."""
from __future__ import annotations


class LiveError(RuntimeError):
    """A live run could not start or finish (no CUDA, out of memory, bad weights); the message says why."""


class LiveCancelled(RuntimeError):
    """The run's cancel event was set; raised between passes."""
