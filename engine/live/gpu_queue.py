"""One GPU run at a time for the whole server: a first-come, first-served queue every session shares."""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Cancelled(Exception):
    """The reader cancelled a queued or running GPU run."""


class GpuQueue:
    """First come, first served: one GPU run at a time for the whole server."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._tickets: list[object] = []

    def __len__(self) -> int:
        return len(self._tickets)

    @contextmanager
    def turn(self, cancel: threading.Event, on_position: Callable[[int], None]) -> Iterator[None]:
        """Wait until this caller is at the head (reporting how many are ahead), then hold the GPU."""
        ticket = object()
        with self._cond:
            self._tickets.append(ticket)
            last = None
            while self._tickets[0] is not ticket:
                if cancel.is_set():
                    self._tickets.remove(ticket)
                    self._cond.notify_all()
                    raise Cancelled
                ahead = self._tickets.index(ticket)
                if ahead != last:
                    on_position(ahead)
                    last = ahead
                self._cond.wait(timeout=0.25)
        try:
            on_position(0)
            yield
        finally:
            with self._cond:
                self._tickets.remove(ticket)
                self._cond.notify_all()


MAX_QUEUED_RUNS = 8  # waiting or running, across every session of this server
GPU_QUEUE = GpuQueue()  # module level on purpose: shared by every session of this server process
