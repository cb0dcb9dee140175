"""The maintenance process's heap: kept while it works, given back once it rests.

glibc's malloc serves a block past a threshold (128 KiB at first, rising as such blocks are
freed) with a mapping of its own, unmapped when freed, and returns free memory at the heap's top
past a second threshold. A maintenance step allocates and frees the same arrays every time
(numpy's takes and copies of a churned batch: 80k rows, ~640 KiB a column), so with the defaults
each step faulted in fresh zeroed pages — in `bench/twoway.py`'s embedded arm ~650-900 minor
faults a step against ~0 in the one-runtime arm's process, ~1 ms of a step's ~15 ms of CPU.

`keep()` fixes both thresholds (which also ends glibc's adjustment of them): blocks up to
`MMAP_THRESHOLD` come from the heap and up to `TRIM_THRESHOLD` of its free top stays mapped, so a
step reuses the pages the last one freed (~60 faults a step). Kept memory is not needed at rest:
`IdleTrim` returns it (`malloc_trim`) once `IDLE_S` passed without a step or merge of `WORK_S` or
more, so an index at rest holds what it held with the defaults (`bench/memory.py`); the shared
memory pool's writable mappings of free buffers go then too (`shm.BufferPool.unmap_free`).
`TWOFOLD_MAINTENANCE_HEAP=0` keeps glibc's defaults (for measuring). Without glibc (no
`mallopt`), both are no-ops.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

MMAP_THRESHOLD: Final = 32 * 1024 * 1024
TRIM_THRESHOLD: Final = 64 * 1024 * 1024
IDLE_S: Final = 1.0
"""Seconds without work after which the kept heap is returned."""
WORK_S: Final = 0.010
"""A step or merge at least this long counts as work: one whose arrays are worth keeping (an
80k-row batch takes ~15 ms; idle polls ~0.3 ms, the introspection's updates every 0.5 s ~3-4 ms
with a 1 M-row index, and neither may hold the heap)."""
ENV: Final = "TWOFOLD_MAINTENANCE_HEAP"

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3

_kept = False


def _libc() -> ctypes.CDLL | None:
    if os.environ.get(ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError) as e:
        log.debug("no glibc malloc tuning: %s", e)
        return None
    return libc


def keep() -> bool:
    """Fix the heap's thresholds for this process (see the module docstring); True if set."""
    global _kept
    libc = _libc()
    if libc is None:
        return False
    ok = all(libc.mallopt(param, value) == 1
             for param, value in ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                                  (_M_TRIM_THRESHOLD, TRIM_THRESHOLD)))
    if not ok:
        log.debug("mallopt refused the heap's thresholds")
    _kept = ok
    return ok


class IdleTrim:
    """Returns the kept heap once the process rests (single-threaded: the serve loop)."""

    def __init__(self, on_rest: Callable[[], None] | None = None) -> None:
        self._on_rest = on_rest  # runs before each trim: release what the process keeps too
        self._libc = _libc() if _kept else None
        self._pending = False
        self._last = 0.0
        self.trims = 0

    def worked(self, seconds: float) -> None:
        """A step or merge took `seconds`."""
        if self._libc is not None and seconds >= WORK_S:
            self._pending = True
            self._last = time.monotonic()

    def due(self) -> float | None:
        """Seconds until a trim is due, `None` when none is pending."""
        if not self._pending:
            return None
        return max(0.0, self._last + IDLE_S - time.monotonic())

    def idle(self) -> None:
        """Nothing arrived: trim if the process has rested `IDLE_S`."""
        if self._pending and self._libc is not None and \
                time.monotonic() - self._last >= IDLE_S:
            self._pending = False
            if self._on_rest is not None:
                self._on_rest()
            self._libc.malloc_trim(0)
            self.trims += 1
