"""Time and frontiers.

Timestamps are ints in `[0, 2**64)`, totally ordered. Under a total order an antichain has at most
one element, so a `Frontier` is either `Frontier.at(t)` ("every time >= t may still change") or
`Frontier.empty()` ("closed"), which is the top of the lattice. A collection is readable at `t`
iff `since <= t` and `upper` does not contain `t` (`readable_at`).
"""

from __future__ import annotations

from typing import Any, Final

MAX_TIME: Final = 2**64 - 1
"""The largest representable timestamp."""


def check_time(t: object) -> int:
    """Return `t` if it is a valid timestamp, else raise `ValueError`/`TypeError`."""
    if isinstance(t, bool) or not isinstance(t, int):
        raise TypeError(f"a timestamp must be an int, got {type(t).__name__}")
    if not 0 <= t <= MAX_TIME:
        raise ValueError(f"a timestamp must lie in [0, 2**64), got {t}")
    return t


class Frontier:
    """An antichain of timestamps under a total order: `at(t)` or `empty()`. Immutable."""

    __slots__ = ("_time",)
    _time: int | None

    def __init__(self, time: int | None) -> None:
        object.__setattr__(self, "_time", None if time is None else check_time(time))

    @classmethod
    def at(cls, t: int) -> Frontier:
        return cls(t)

    @classmethod
    def empty(cls) -> Frontier:
        return _EMPTY

    @classmethod
    def minimum(cls) -> Frontier:
        return _MINIMUM

    @classmethod
    def from_wire(cls, elements: list[int]) -> Frontier:
        """Build from the wire form: a list of zero or one integers."""
        if not isinstance(elements, list) or len(elements) > 1:
            raise ValueError(f"a frontier is a list of zero or one timestamps, got {elements!r}")
        return cls(elements[0]) if elements else _EMPTY

    def to_wire(self) -> list[int]:
        return [] if self._time is None else [self._time]

    @property
    def is_empty(self) -> bool:
        return self._time is None

    @property
    def time(self) -> int | None:
        return self._time

    def less_equal(self, other: Frontier) -> bool:
        """`at(x) <= at(y)` iff `x <= y`; all `<= empty()`; `empty() <= at(x)` is false."""
        if other._time is None:
            return True
        if self._time is None:
            return False
        return self._time <= other._time

    def meet(self, other: Frontier) -> Frontier:
        """The lower of the two."""
        return self if self.less_equal(other) else other

    def join(self, other: Frontier) -> Frontier:
        """The higher of the two."""
        return other if self.less_equal(other) else self

    def contains(self, t: int) -> bool:
        """True iff `t` is at or beyond this frontier (`at(x)` contains `t` iff `x <= t`)."""
        return self._time is not None and self._time <= t

    less_equal_time = contains

    def readable_at(self, t: int, *, since: Frontier) -> bool:
        """Treating `self` as an `upper`: is a collection with this `since` readable at `t`?"""
        return since.contains(t) and not self.contains(t)

    def step_back(self) -> int | None:
        """The latest time *not* in this frontier (`t - 1` for `at(t)`), or `None` if none is.

        For an `upper`, this is the latest complete time. For `empty()` it is `MAX_TIME`.
        """
        if self._time is None:
            return MAX_TIME
        return self._time - 1 if self._time > 0 else None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Frontier is immutable")

    def __delattr__(self, name: str) -> None:
        # Without this, `del f._time` would empty the slot (and could corrupt the shared
        # `empty()`/`minimum()` instances).
        raise AttributeError("Frontier is immutable")

    def __le__(self, other: Frontier) -> bool:
        if not isinstance(other, Frontier):
            return NotImplemented
        return self.less_equal(other)

    def __lt__(self, other: Frontier) -> bool:
        if not isinstance(other, Frontier):
            return NotImplemented
        return self.less_equal(other) and self != other

    def __ge__(self, other: Frontier) -> bool:
        if not isinstance(other, Frontier):
            return NotImplemented
        return other.less_equal(self)

    def __gt__(self, other: Frontier) -> bool:
        if not isinstance(other, Frontier):
            return NotImplemented
        return other.less_equal(self) and self != other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frontier):
            return NotImplemented
        return self._time == other._time

    def __hash__(self) -> int:
        return hash((Frontier, self._time))

    def __repr__(self) -> str:
        return "Frontier.empty()" if self._time is None else f"Frontier.at({self._time})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Frontier, (self._time,))


_EMPTY: Final = Frontier(None)
_MINIMUM: Final = Frontier(0)
