"""Scheduling hints (`twofold.runtime.sched`): each applies to the calling thread only, and a
platform without them leaves the thread as it was."""

from __future__ import annotations

import os
import threading

import pytest

from twofold.runtime import sched
from twofold.runtime.sched import ThreadHints

SLICE_SUPPORTED = sched.current_slice_ns() is not None


def _kernel_honours_custom_slices() -> str | None:
    """Why this kernel cannot show a custom slice, or `None` if it can: a throwaway thread asks
    for a 200 µs slice with a raw `sched_setattr` (not through the code under test) and reads it
    back. Kernels before EEVDF's custom slices (Linux 6.12) accept and ignore `sched_runtime`
    for `SCHED_OTHER`; a seccomp filter may refuse the call."""
    import ctypes

    syscall = sched._syscall()
    if syscall is None:
        return "sched_setattr is not available on this platform"
    out: list[str | None] = []

    def probe() -> None:
        tid = threading.get_native_id()
        attr = sched._SchedAttr(size=ctypes.sizeof(sched._SchedAttr),
                                sched_nice=os.getpriority(os.PRIO_PROCESS, tid),
                                sched_runtime=200_000)  # fmt: skip
        if syscall(sched._SYS_SCHED_SETATTR[sched._machine()], tid, ctypes.byref(attr), 0):
            out.append(f"sched_setattr refused: {os.strerror(ctypes.get_errno())}")
        elif sched.current_slice_ns(tid) != 200_000:
            out.append(f"kernel {os.uname().release} ignores sched_runtime for SCHED_OTHER "
                       "(custom slices need Linux >= 6.12)")
        else:
            out.append(None)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return out[0]


CUSTOM_SLICES_UNSUPPORTED = _kernel_honours_custom_slices() if SLICE_SUPPORTED else None


def _in_thread(hints: ThreadHints) -> tuple[int, int | None]:
    """(nice, slice ns) of a fresh thread after applying `hints` to it."""
    out: list[tuple[int, int | None]] = []

    def run() -> None:
        sched.apply(hints, "test")
        tid = threading.get_native_id()
        out.append((os.getpriority(os.PRIO_PROCESS, tid), sched.current_slice_ns()))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0]


def test_default_hints_change_nothing() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert ThreadHints().is_default
    nice, slice_ns = _in_thread(ThreadHints())
    assert nice == mine
    assert slice_ns == sched.current_slice_ns()


def test_nice_applies_to_the_calling_thread_only() -> None:
    tid = threading.get_native_id()
    mine = os.getpriority(os.PRIO_PROCESS, tid)
    nice, _ = _in_thread(ThreadHints(nice=3))
    assert nice == min(mine + 3, 19)
    assert os.getpriority(os.PRIO_PROCESS, tid) == mine


@pytest.mark.skipif(not SLICE_SUPPORTED, reason="sched_getattr is not available here")
@pytest.mark.skipif(CUSTOM_SLICES_UNSUPPORTED is not None, reason=str(CUSTOM_SLICES_UNSUPPORTED))
def test_latency_slice_is_set_and_keeps_the_nice_value() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    before = sched.current_slice_ns()
    assert before != 200_000  # else the check below could not tell "set" from "left alone"
    nice, slice_ns = _in_thread(ThreadHints(nice=2, slice_us=200))
    assert nice == min(mine + 2, 19)
    assert slice_ns == 200_000
    assert sched.current_slice_ns() == before


def test_env_turns_the_latency_slice_off_or_sets_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWOFOLD_LATENCY_SLICE_US", raising=False)
    assert sched.latency_slice_from_env() == sched.DEFAULT_LATENCY_SLICE_US
    monkeypatch.setenv("TWOFOLD_LATENCY_SLICE_US", "0")
    assert sched.latency_slice_from_env() is None
    monkeypatch.setenv("TWOFOLD_LATENCY_SLICE_US", "250")
    assert sched.latency_slice_from_env() == 250


def test_unsupported_platform_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sched, "_syscall", lambda: None)
    assert sched.current_slice_ns() is None
    _in_thread(ThreadHints(slice_us=100))  # logs and carries on
