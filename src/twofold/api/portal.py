"""Running a coroutine on the database's event-loop thread and blocking for it — interruptibly.

A signal reaches a process through any of its threads, and Python runs its handler only in the
main thread, when that thread next runs Python code. A main thread blocked in an untimed wait
on the answer never does if the kernel picked another thread (the loop, a runtime, a polars
worker) — so Ctrl-C did nothing until the read timed out. `run_blocking` waits in short timed
slices instead, so a `KeyboardInterrupt` (or any signal handler's exception) is raised within
`SLICE` seconds. It then cancels the coroutine and waits (bounded) for it to unwind: a read's
cancellation cancels its peek and releases its read hold, so the database stays usable.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

T = TypeVar("T")

SLICE: Final = 0.1
"""Seconds between checks for a pending signal while blocked (no cost when the answer comes:
the wait returns as soon as the future is done)."""
UNWIND: Final = 5.0
"""Seconds an interrupted call may take to cancel cleanly before the interrupt is re-raised."""


def run_blocking(coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop) -> T:
    """Run `coro` on `loop` (another thread's) and return its result; see the module docstring."""
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        while True:
            try:
                return future.result(SLICE)
            except TimeoutError:
                if future.done():
                    raise  # the call's own TimeoutError, not the slice's

    except BaseException:
        if not future.done():
            future.cancel()  # cancels the task on the loop: it unwinds its read there
            concurrent.futures.wait([future], UNWIND)
        raise
