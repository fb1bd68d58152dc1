"""Handing freed memory back to the system after a burst. glibc's malloc keeps the pages a burst
of allocations freed (an informer's relist, an inventory apply) in its heap for reuse, so a
long-running process stays as large as its largest moment; `release()` returns them (glibc's
malloc_trim).

Measured in the observer at 10,000 units (bench/observer_cost.py's cluster): after its first
reconcile batch and inventory apply, 28 MB of its 292 MB were such pages."""

from __future__ import annotations

import ctypes
from collections.abc import Callable


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


_trim = _malloc_trim()


def release() -> bool:
    """Return the C heap's free pages to the system; whether the C library could (a few
    milliseconds on a heap of hundreds of megabytes: call it after a burst, not per event)."""
    if _trim is None:
        return False
    _trim(0)
    return True
