"""Allocator settings for a process that runs twofold: keep freed memory for reuse.

Maintenance allocates and frees large buffers every step (a 200 k-row churn step builds, sorts
and merges frames of tens of MB). By default both allocators under us hand freed memory back to
the OS almost at once — polars' jemalloc purges dirty pages within milliseconds, glibc's malloc
serves every block over its (adaptive) mmap threshold with its own `mmap`/`munmap` — so the next
step faults the same memory back in, page by page. Page faults are kernel work that takes the
process's memory-map lock, so they also stall the process's *other* threads: the interactive
runtime's reads wait behind the maintenance runtime's faults even though they share no data.
On a virtual machine, where a first touch can also fault on the host, this dominated the tail
of `bench/isolation.py` (measured: a polars sort loop ran 5.8x faster with a 1 s decay, and a
numpy loop took 94% fewer page faults with the glibc settings below).

So, once per process and before polars is loaded (`twofold/__init__.py` calls `configure()`):

- polars' jemalloc: `_RJEM_MALLOC_CONF=dirty_decay_ms:1000,muzzy_decay_ms:1000` unless the
  variable is already set — freed pages are reused for a second before being purged, so memory
  still returns to the OS when a workload shrinks. jemalloc reads it once, at its first
  allocation, so it has no effect if polars was imported before twofold.
- glibc malloc (`mallopt`): blocks below 32 MiB come from the heap rather than their own
  mapping, and free memory at the top of the heap is trimmed only beyond 256 MiB. Skipped
  where the C library has no `mallopt` (musl, macOS).

`TWOFOLD_ALLOCATOR=system` leaves both allocators at their defaults.
"""

from __future__ import annotations

import ctypes
import os
import sys

JEMALLOC_ENV = "_RJEM_MALLOC_CONF"
JEMALLOC_CONF = "dirty_decay_ms:1000,muzzy_decay_ms:1000"
OPT_OUT_ENV = "TWOFOLD_ALLOCATOR"

# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit
TRIM_THRESHOLD = 256 << 20


def configure() -> dict[str, bool]:
    """Apply the settings above (idempotent); returns which of them took effect."""
    applied = {"jemalloc": False, "glibc": False}
    if os.environ.get(OPT_OUT_ENV, "").strip().lower() == "system":
        return applied
    if JEMALLOC_ENV not in os.environ and "polars" not in sys.modules:
        os.environ[JEMALLOC_ENV] = JEMALLOC_CONF
        applied["jemalloc"] = True
    applied["glibc"] = _glibc_mallopt()
    return applied


def _glibc_mallopt() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 on a rejected value.
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
