"""Keep the memory a compiled run frees for the next run, instead of handing it back to the OS.

A run allocates its tables (a megabyte or two: the sampled-token log, with prefix caching the block regions)
through numba's allocator, i.e. malloc, and frees them when the trace is built. glibc returns the top of the
heap to the OS once more than its trim threshold is free (by default twice the largest block it has seen),
so a run just over that line pays a page fault and a page clear for every page of its tables, every run: the
default run with prefix caching spent over a third of its time in the kernel. Raising the thresholds keeps
those pages (at most a few tens of MB) for the next run. Only glibc has mallopt; elsewhere nothing changes.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_KEEP_BYTES = 64 << 20  # free heap kept before trimming
_HEAP_BELOW = 32 << 20  # allocations smaller than this come from the heap (glibc's own dynamic ceiling)


def keep_freed_heap() -> bool:
    """Set glibc's trim and mmap thresholds (setting one turns off glibc's adjusting of both); True if set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, _HEAP_BELOW)) and bool(mallopt(M_TRIM_THRESHOLD, _KEEP_BYTES))
