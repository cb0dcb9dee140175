"""Read holds and read policies.

Contract: a collection's `ReadHolds` is a multiset of frontiers; its **since** is their meet
(empty when no hold remains — the collection may be dropped). Every change that moves the since
returns the new since, which the caller turns into `AllowCompaction(id, since)`.

Invariants protected:
- the since never goes backwards: a hold below the current since cannot be acquired (that time
  may already be compacted), so `acquire` raises instead;
- releasing a hold that is not held is a bug and raises, rather than silently corrupting counts.

A `ReadPolicy` maps a collection's write frontier to its own **implied hold**: `LagWindow` keeps
a window of history behind the write frontier, `NoCompaction` never moves, and `WriteOnly` (for
sinks and subscribes, whose replay must restart at their last complete time) holds one step
behind the write frontier.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from twofold.protocol import MAX_TIME, Frontier


class HoldError(ValueError):
    """An invalid read-hold change (acquiring below the since, releasing an absent hold)."""


class ReadHolds:
    """A multiset of read holds; `since` is their meet (empty when there are none).

    Created with its first hold (a collection's implied hold at its `as_of`); once every hold
    is released the since is empty for good: nothing can be held again.
    """

    __slots__ = ("_holds", "_since")

    def __init__(self, initial: Frontier) -> None:
        self._holds: Counter[Frontier] = Counter({initial: 1})
        self._since = initial

    @property
    def since(self) -> Frontier:
        return self._since

    def __len__(self) -> int:
        return sum(self._holds.values())

    def holds(self) -> dict[Frontier, int]:
        return dict(self._holds)

    def _recompute(self) -> Frontier | None:
        new = Frontier.empty()
        for f in self._holds:
            new = new.meet(f)
        if new != self._since:
            self._since = new
            return new
        return None

    def acquire(self, frontier: Frontier) -> Frontier | None:
        """Add a hold at `frontier`; refuses to hold below a non-empty since."""
        if not self._since <= frontier:
            raise HoldError(f"cannot hold at {frontier!r}: the since is already {self._since!r}")
        self._holds[frontier] += 1
        return self._recompute()

    def release(self, frontier: Frontier) -> Frontier | None:
        """Remove one hold at `frontier`. Returns the new since if it moved."""
        if self._holds[frontier] <= 0:
            del self._holds[frontier]
            raise HoldError(f"no read hold at {frontier!r} to release")
        self._holds[frontier] -= 1
        if self._holds[frontier] == 0:
            del self._holds[frontier]
        return self._recompute()

    def downgrade(self, old: Frontier, new: Frontier) -> Frontier | None:
        """Move one hold from `old` to `new` (`new >= old`). Returns the new since if it moved."""
        if not old <= new:
            raise HoldError(f"cannot move a read hold backwards from {old!r} to {new!r}")
        if old == new:
            return None
        if self._holds[old] <= 0:
            del self._holds[old]
            raise HoldError(f"no read hold at {old!r} to downgrade")
        self._holds[old] -= 1
        if self._holds[old] == 0:
            del self._holds[old]
        self._holds[new] += 1
        return self._recompute()


class ReadPolicy(Protocol):
    """Where a collection's implied read hold should be, given its write frontier."""

    def implied_hold(self, write_frontier: Frontier, current: Frontier) -> Frontier:
        """The new implied hold; must be `>= current` (holds only move forward)."""
        ...


@dataclass(frozen=True)
class LagWindow:
    """Keep `lag` time units (ms, for millisecond timestamps) of history behind the write
    frontier. A closed (empty) write frontier keeps only the last time, `MAX_TIME`."""

    lag: int = 1000

    def __post_init__(self) -> None:
        if self.lag < 0:
            raise ValueError(f"LagWindow.lag must be >= 0, got {self.lag}")

    def implied_hold(self, write_frontier: Frontier, current: Frontier) -> Frontier:
        t = write_frontier.time
        target = Frontier.at(MAX_TIME) if t is None else Frontier.at(max(0, t - self.lag))
        return current.join(target)


@dataclass(frozen=True)
class NoCompaction:
    """Never compact: the implied hold stays at the `as_of`."""

    def implied_hold(self, write_frontier: Frontier, current: Frontier) -> Frontier:
        return current


@dataclass(frozen=True)
class WriteOnly:
    """One step behind the write frontier: a replay restarts at the last complete time, so a
    subscribe's snapshot lands at a time the controller has already delivered (and trims)."""

    def implied_hold(self, write_frontier: Frontier, current: Frontier) -> Frontier:
        t = write_frontier.step_back()
        return current if t is None else current.join(Frontier.at(t))


DEFAULT_READ_POLICY = LagWindow(1000)
