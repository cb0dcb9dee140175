"""The timestamp oracle: strictly increasing write timestamps.

Timestamps are milliseconds since the Unix epoch by default. The oracle never hands out a time it
handed out before, nor one below it, even if the clock steps back: `write_ts` returns
`max(clock(), last + 1)`. `observe(t)` fast-forwards it past a time learnt elsewhere (another
process's write, a shard's upper), so its next timestamp is usable there. The clock is injectable
so tests can step it backwards deterministically. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from twofold.protocol import MAX_TIME


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch, from the system's real-time clock."""
    return time.time_ns() // 1_000_000


class TimestampOracle:
    """Hands out strictly increasing timestamps; `read_ts` is the latest one handed out."""

    def __init__(self, clock: Callable[[], int] = wall_clock_ms) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last = -1

    def write_ts(self, *, at_least: int = 0) -> int:
        """A fresh timestamp, greater than every earlier one and at least `at_least`."""
        with self._lock:
            t = max(self._clock(), self._last + 1, at_least)
            if t > MAX_TIME:
                raise OverflowError("the timestamp oracle has exhausted the 64-bit time domain")
            self._last = t
            return t

    def read_ts(self) -> int:
        """The latest timestamp handed out (0 if none yet): every write the oracle stamped
        is at or before it."""
        with self._lock:
            return max(self._last, 0)

    def observe(self, t: int) -> None:
        """Make every later `write_ts` greater than `t`."""
        with self._lock:
            self._last = max(self._last, t)
