"""Freed memory kept for the next array while a large NumPy computation runs (glibc only).

glibc serves an allocation above its mmap threshold (32 MB at most) with a fresh mapping and
unmaps it when it is freed, so a computation over arrays of hundreds of MB pays a page fault per
page of every temporary: the float64 reference of a check at Llama-3-70B sizes (attention scores
of 42M elements, a dozen temporaries per operator) spent about half its wall time in the kernel
that way (benchmarks/results/check_speed.md). Inside `reusing_freed_memory()` every allocation
comes from the heap and what is freed stays there for the next one; on leaving, the heap is
trimmed and large allocations are mapped again (at the 32 MB threshold glibc's own adjustment
reaches for such workloads). Anywhere else (not glibc) it does nothing.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import threading

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4  # mallopt parameters (malloc.h)
_MAPPED_ABOVE = 32 << 20  # glibc's largest dynamic mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX)
_MAPPINGS = 65536  # glibc's default M_MMAP_MAX
_KEPT = 2**31 - 1  # free memory the heap keeps at its top (mallopt takes an int)

_lock = threading.Lock()
_depth = 0


def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_libc = _glibc()


@contextlib.contextmanager
def reusing_freed_memory():
    """Within: allocations from the heap, freed memory kept for reuse (nests; thread-safe)."""
    global _depth
    if _libc is None:
        yield
        return
    with _lock:
        _depth += 1
        if _depth == 1:
            _libc.mallopt(_M_MMAP_MAX, 0)
            _libc.mallopt(_M_TRIM_THRESHOLD, _KEPT)
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _libc.mallopt(_M_MMAP_MAX, _MAPPINGS)
                _libc.mallopt(_M_MMAP_THRESHOLD, _MAPPED_ABOVE)
                _libc.mallopt(_M_TRIM_THRESHOLD, 2 * _MAPPED_ABOVE)
                _libc.malloc_trim(0)
