"""Read holds (multiset, since = meet) and read policies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.controller.holds import HoldError, LagWindow, NoCompaction, ReadHolds, WriteOnly
from twofold.protocol import MAX_TIME, Frontier
from twofold.testing.profiles import examples


def at(t: int) -> Frontier:
    return Frontier.at(t)


def test_since_is_meet_of_holds() -> None:
    h = ReadHolds(at(3))
    assert h.since == at(3)
    assert h.acquire(at(5)) is None
    assert h.acquire(at(5)) is None
    assert h.downgrade(at(3), at(4)) == at(4)
    assert h.release(at(4)) == at(5)
    assert h.release(at(5)) is None  # one more hold at 5 remains
    assert h.release(at(5)) == Frontier.empty()
    # Once empty, the collection can never be held again.
    with pytest.raises(HoldError, match="since"):
        h.acquire(at(9))


def test_invalid_changes_raise_and_change_nothing() -> None:
    h = ReadHolds(at(3))
    with pytest.raises(HoldError, match="cannot hold at"):
        h.acquire(at(2))
    with pytest.raises(HoldError, match="no read hold"):
        h.release(at(7))
    with pytest.raises(HoldError, match="backwards"):
        h.downgrade(at(3), at(1))
    with pytest.raises(HoldError, match="no read hold"):
        h.downgrade(at(4), at(5))
    assert h.holds() == {at(3): 1} and h.since == at(3)


def test_read_policies() -> None:
    lag = LagWindow(10)
    assert lag.implied_hold(at(25), at(0)) == at(15)
    assert lag.implied_hold(at(5), at(0)) == at(0)
    assert lag.implied_hold(at(12), at(7)) == at(7)  # never moves back
    assert lag.implied_hold(Frontier.empty(), at(7)) == at(MAX_TIME)
    assert NoCompaction().implied_hold(at(100), at(3)) == at(3)
    assert WriteOnly().implied_hold(at(100), at(3)) == at(99)
    assert WriteOnly().implied_hold(at(0), at(0)) == at(0)
    with pytest.raises(ValueError, match="lag"):
        LagWindow(-1)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30)), max_size=50))
def test_since_tracks_meet(ops: list[tuple[bool, int]]) -> None:
    h = ReadHolds(at(0))
    held = [0]
    last = h.since
    for acquire, t in ops:
        if acquire:
            if not held or t < min(held):
                continue
            h.acquire(at(t))
            held.append(t)
        elif held:
            x = held[t % len(held)]
            h.release(at(x))
            held.remove(x)
        expected = at(min(held)) if held else Frontier.empty()
        assert h.since == expected
        assert last <= h.since  # never backwards
        last = h.since
