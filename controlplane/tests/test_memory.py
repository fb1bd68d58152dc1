"""controlplane.memory.release gives back to the system what the C heap kept of a freed burst."""

from __future__ import annotations

import os
import sys

import pytest

from controlplane import memory


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or memory._trim is None, reason="glibc only"
)
def test_a_freed_burst_goes_back_to_the_system_when_trimmed() -> None:
    # 64 MB of 2 KB blocks (too big for Python's own allocator, too small for mmap), one in
    # a hundred kept: the freed ones lie between live ones, where free() alone keeps them.
    burst = [bytes(2048) for _ in range(32_768)]
    kept = burst[::100]
    del burst
    before = _resident_bytes()
    assert memory.release()
    assert before - _resident_bytes() > 32 * 2**20
    assert len(kept) == 328


def test_trimming_is_a_no_op_where_the_c_library_cannot(monkeypatch) -> None:
    monkeypatch.setattr(memory, "_trim", None)
    assert memory.release() is False
