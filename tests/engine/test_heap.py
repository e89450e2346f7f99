"""kernels.heap: glibc keeps a run's freed tables for the next run (a caching run re-faulted them every run)."""
from __future__ import annotations

import ctypes
import platform
import sys

import pytest

from kernels.heap import keep_freed_heap


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_a_megabyte_comes_from_the_heap_not_a_fresh_mapping():
    libc = ctypes.CDLL("libc.so.6")
    if not hasattr(libc, "mallinfo2"):
        pytest.skip("glibc before 2.33")
    libc.mallinfo2.restype = _MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    assert keep_freed_heap() is True
    mapped = libc.mallinfo2().hblkhd
    block = libc.malloc(8 << 20)  # above glibc's default mmap threshold (128 KiB, at most 32 MiB when adjusted)
    grew = libc.mallinfo2().hblkhd - mapped
    libc.free(block)
    assert grew == 0  # mmap'd blocks are unmapped on free: every run would fault its pages in again


def test_elsewhere_it_changes_nothing(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert keep_freed_heap() is False
