"""Reconnection backoff: a pure policy object.

Contract: `next_delay()` returns `initial`, then multiplies by `factor` on each call, never
exceeding `cap`; `reset()` (after a healthy connection) starts over. No clock, no sleeping — the
caller sleeps, so tests inject a zero policy or a fake sleep and never wait on real time.
"""

from __future__ import annotations


class Backoff:
    """Capped exponential backoff."""

    __slots__ = ("_next", "cap", "factor", "initial")

    def __init__(self, initial: float = 0.05, factor: float = 2.0, cap: float = 1.0) -> None:
        if initial < 0 or cap < 0:
            raise ValueError(f"backoff delays must be >= 0, got initial={initial}, cap={cap}")
        if factor < 1:
            raise ValueError(f"backoff factor must be >= 1, got {factor}")
        self.initial = initial
        self.factor = factor
        self.cap = cap
        self._next = min(initial, cap)

    def next_delay(self) -> float:
        """The delay before the next attempt; grows geometrically up to `cap`."""
        delay = self._next
        self._next = min(self._next * self.factor, self.cap)
        return delay

    def reset(self) -> None:
        self._next = min(self.initial, self.cap)
