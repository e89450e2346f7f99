"""A least-recently-used cache bounded by memory and by count, shared by every session of a server.

Used for runs' traces (explorable.state.runs) and for the views' data derived from them (explorable.state.view_data):
both are pure functions of a run's config, and both range from a few kB to a few MB per state.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any


class BoundedCache:
    """Values by key, least recently used dropped first, within `max_bytes` (as `size_of` counts) and
    `max_items`. Thread-safe: a served page's update may run off the event loop."""

    instances: "weakref.WeakSet[BoundedCache]" = weakref.WeakSet()  # every cache, for `drop_everywhere`

    def __init__(self, max_bytes: int, max_items: int, size_of: Callable[[Any], int]):
        BoundedCache.instances.add(self)
        self.max_bytes, self.max_items, self.size_of = max_bytes, max_items, size_of
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: Hashable) -> tuple[bool, Any]:
        """(True, value) when `key` is kept, else (False, None)."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                self.misses += 1
                return False, None
            self._items.move_to_end(key)
            self.hits += 1
            return True, found[0]

    def put(self, key: Hashable, value: Any) -> None:
        size = self.size_of(value)
        if size > self.max_bytes // 4:  # one huge value must not evict the whole class's states
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, size)
            self._bytes += size
            while self._items and (self._bytes > self.max_bytes or len(self._items) > self.max_items):
                _, (_, old) = self._items.popitem(last=False)
                self._bytes -= old

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    def drop(self, unwanted: Callable[[Hashable], bool]) -> int:
        """Forget every entry whose key is `unwanted` (a reader's own workload when its session ends); returns
        how many went."""
        with self._lock:
            keys = [k for k in self._items if unwanted(k)]
            for k in keys:
                self._bytes -= self._items.pop(k)[1]
            return len(keys)

    def info(self) -> dict[str, int]:
        return {"items": len(self._items), "bytes": self._bytes, "hits": self.hits, "misses": self.misses}


def drop_everywhere(unwanted: Callable[[Hashable], bool]) -> int:
    """`drop` in every cache of the process (runs' traces and curve points, views' data)."""
    return sum(cache.drop(unwanted) for cache in list(BoundedCache.instances))
