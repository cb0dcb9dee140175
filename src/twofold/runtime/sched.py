"""OS scheduling hints for a replica's threads, so a read is not kept off a core by maintenance.

Two runtimes in one process share its cores (and its GIL). What the operating system can do for
the read path is decided per thread:

- **nice** (POSIX, per thread on Linux): the maintenance thread runs at a higher nice value, so
  when both runtimes want a core the read wins.
- **latency slice** (Linux >= 6.12, the EEVDF scheduler's custom slice, `sched_setattr` with
  `sched_runtime` for `SCHED_OTHER`): a thread that asks for a short slice gets an early virtual
  deadline when it wakes, so it preempts a thread in the middle of a long slice instead of
  waiting for that slice to end (the kernel's default slice is a few milliseconds: one wait per
  wakeup, several wakeups per read). It grants no extra CPU share — the thread's weight is its
  nice value's — and needs no privilege. The interactive runtime's thread and the thread that
  runs the replica's event loop (network and multiplexer) ask for it.

Both are hints: on platforms or kernels without them `apply` logs at debug level and the thread
runs with the defaults. Invariant: `apply` only ever changes the calling thread.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from dataclasses import dataclass
from typing import Final

log = logging.getLogger(__name__)

DEFAULT_LATENCY_SLICE_US: Final = 100
"""The slice the read path asks for (the kernel's minimum custom slice is 100 µs)."""

_SYS_SCHED_SETATTR: Final = {"x86_64": 314, "aarch64": 274}
_SYS_SCHED_GETATTR: Final = {"x86_64": 315, "aarch64": 275}
_SCHED_OTHER: Final = 0


class _SchedAttr(ctypes.Structure):
    """`struct sched_attr` (linux/sched/types.h, SCHED_ATTR_SIZE_VER1)."""

    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
        ("sched_util_min", ctypes.c_uint32),
        ("sched_util_max", ctypes.c_uint32),
    ]


@dataclass(frozen=True, slots=True)
class ThreadHints:
    """How a thread asks to be scheduled: `nice` is added to its nice value; `slice_us`, if
    set, is its requested latency slice in microseconds."""

    nice: int = 0
    slice_us: int | None = None

    @property
    def is_default(self) -> bool:
        return self.nice == 0 and self.slice_us is None


def latency_slice_from_env() -> int | None:
    """The read path's slice: `TWOFOLD_LATENCY_SLICE_US` (0 turns it off), else the default."""
    raw = os.environ.get("TWOFOLD_LATENCY_SLICE_US")
    if raw is None:
        return DEFAULT_LATENCY_SLICE_US
    value = int(raw)
    return value if value > 0 else None


def apply(hints: ThreadHints, name: str) -> None:
    """Apply `hints` to the calling thread, best effort."""
    tid = threading.get_native_id()
    if hints.nice:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + hints.nice)
        except (AttributeError, OSError) as e:
            log.debug("thread %s: cannot change its nice value: %s", name, e)
    if hints.slice_us is not None:
        error = _set_slice(tid, hints.slice_us * 1000)
        if error is not None:
            log.debug("thread %s: no latency slice: %s", name, error)


def current_slice_ns(tid: int | None = None) -> int | None:
    """The calling (or given) thread's slice in ns as the kernel reports it, or `None` where it
    cannot be read. For tests and diagnostics."""
    syscall = _syscall()
    if syscall is None:
        return None
    attr = _SchedAttr()
    tid = threading.get_native_id() if tid is None else tid
    if syscall(_SYS_SCHED_GETATTR[_machine()], tid, ctypes.byref(attr),
               ctypes.sizeof(attr), 0) != 0:
        return None
    return int(attr.sched_runtime)


def _set_slice(tid: int, slice_ns: int) -> str | None:
    syscall = _syscall()
    if syscall is None:
        return "not supported on this platform"
    # sched_setattr sets the nice value too: keep the thread's current one.
    nice = os.getpriority(os.PRIO_PROCESS, tid)
    attr = _SchedAttr(size=ctypes.sizeof(_SchedAttr), sched_policy=_SCHED_OTHER,
                      sched_nice=nice, sched_runtime=slice_ns)
    if syscall(_SYS_SCHED_SETATTR[_machine()], tid, ctypes.byref(attr), 0) != 0:
        return os.strerror(ctypes.get_errno())
    return None


def _machine() -> str:
    return os.uname().machine


def _syscall() -> ctypes._NamedFuncPointer | None:
    if not sys.platform.startswith("linux") or _machine() not in _SYS_SCHED_SETATTR:
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
