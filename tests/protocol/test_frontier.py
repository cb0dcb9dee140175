"""Frontier: lattice laws, total order, `contains`, the readable window, wire form."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twofold.protocol import MAX_TIME, Frontier
from twofold.testing.strategies import frontiers, timestamps

EMPTY = Frontier.empty()


@given(frontiers(), frontiers())
def test_meet_and_join_are_commutative(a: Frontier, b: Frontier) -> None:
    assert a.meet(b) == b.meet(a)
    assert a.join(b) == b.join(a)


@given(frontiers(), frontiers(), frontiers())
def test_meet_and_join_are_associative(a: Frontier, b: Frontier, c: Frontier) -> None:
    assert a.meet(b).meet(c) == a.meet(b.meet(c))
    assert a.join(b).join(c) == a.join(b.join(c))


@given(frontiers())
def test_meet_and_join_are_idempotent(a: Frontier) -> None:
    assert a.meet(a) == a
    assert a.join(a) == a


@given(frontiers(), frontiers())
def test_absorption(a: Frontier, b: Frontier) -> None:
    assert a.meet(a.join(b)) == a
    assert a.join(a.meet(b)) == a


@given(frontiers(), frontiers())
def test_meet_is_lower_and_join_is_higher(a: Frontier, b: Frontier) -> None:
    assert a.meet(b) <= a and a.meet(b) <= b
    assert a <= a.join(b) and b <= a.join(b)
    assert {a.meet(b), a.join(b)} == {a, b}


@given(frontiers(), frontiers())
def test_order_is_total_and_consistent_with_less_equal(a: Frontier, b: Frontier) -> None:
    assert a.less_equal(b) or b.less_equal(a)
    assert (a <= b) == a.less_equal(b)
    assert (a >= b) == b.less_equal(a)
    assert (a < b) == (a.less_equal(b) and a != b)
    assert (a > b) == (b.less_equal(a) and a != b)
    # Antisymmetry: mutual <= only for equal frontiers.
    assert (a <= b and b <= a) == (a == b)


@given(frontiers(), frontiers(), frontiers())
def test_order_is_transitive(a: Frontier, b: Frontier, c: Frontier) -> None:
    if a <= b and b <= c:
        assert a <= c


@given(timestamps(), timestamps())
def test_at_orders_like_its_times(x: int, y: int) -> None:
    assert (Frontier.at(x) <= Frontier.at(y)) == (x <= y)


@given(frontiers())
def test_empty_is_top_and_minimum_is_bottom(a: Frontier) -> None:
    assert a <= EMPTY
    assert Frontier.minimum() <= a
    assert a.join(EMPTY) == EMPTY
    assert a.meet(EMPTY) == a
    assert a.meet(Frontier.minimum()) == Frontier.minimum()
    if not a.is_empty:
        assert not EMPTY.less_equal(a)
        assert not EMPTY <= a  # noqa: SIM300 - the operator form is under test
        assert a < EMPTY


def test_minimum_is_at_zero_and_accessors() -> None:
    assert Frontier.minimum() == Frontier.at(0)
    assert Frontier.at(5).time == 5 and not Frontier.at(5).is_empty
    assert EMPTY.time is None and EMPTY.is_empty
    assert Frontier.at(MAX_TIME).time == MAX_TIME


@given(frontiers(), timestamps())
def test_contains(f: Frontier, t: int) -> None:
    expected = f.time is not None and f.time <= t
    assert f.contains(t) == expected
    assert f.less_equal_time(t) == expected


@given(timestamps())
def test_empty_contains_nothing_and_at_contains_itself(t: int) -> None:
    assert not EMPTY.contains(t)
    assert Frontier.at(t).contains(t)
    assert Frontier.minimum().contains(t)
    if t > 0:
        assert not Frontier.at(t).contains(t - 1)


@given(frontiers(), frontiers(), timestamps())
def test_readable_window_is_since_le_t_lt_upper(since: Frontier, upper: Frontier, t: int) -> None:
    s, u = since.time, upper.time
    expected = s is not None and s <= t and (u is None or t < u)
    assert upper.readable_at(t, since=since) == expected


def test_readable_window_edges() -> None:
    since, upper = Frontier.at(3), Frontier.at(5)
    assert [t for t in range(8) if upper.readable_at(t, since=since)] == [3, 4]
    assert EMPTY.readable_at(MAX_TIME, since=Frontier.at(0))
    # A compacted-away (empty) since makes nothing readable.
    assert not EMPTY.readable_at(0, since=EMPTY)


@given(frontiers())
def test_wire_form_round_trips(f: Frontier) -> None:
    wire = f.to_wire()
    assert wire == ([] if f.time is None else [f.time])
    assert Frontier.from_wire(wire) == f


@pytest.mark.parametrize("bad", [[1, 2], "x", None, [-1], [2**64], [1.5], [True]])
def test_from_wire_rejects_bad_input(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        Frontier.from_wire(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 2**64, 1.0, True, "3"])
def test_at_rejects_non_timestamps(bad: object) -> None:
    with pytest.raises((ValueError, TypeError), match="timestamp"):
        Frontier.at(bad)  # type: ignore[arg-type]


@given(frontiers(), frontiers())
def test_value_semantics(a: Frontier, b: Frontier) -> None:
    copy = Frontier.from_wire(a.to_wire())
    assert copy == a and hash(copy) == hash(a)
    assert (a == b) == (a.time == b.time)
    assert len({a, copy}) == 1


def test_frontier_is_immutable() -> None:
    f = Frontier.at(3)
    with pytest.raises(AttributeError):
        f._time = 4
    with pytest.raises(AttributeError):
        f.anything = 1
    with pytest.raises(AttributeError):
        del f._time
    with pytest.raises(AttributeError):
        del Frontier.empty()._time
    assert f == Frontier.at(3) and Frontier.empty().is_empty


def test_step_back() -> None:
    assert Frontier.at(5).step_back() == 4
    assert Frontier.at(0).step_back() is None
    assert EMPTY.step_back() == MAX_TIME


def test_comparison_with_other_types_is_refused() -> None:
    assert Frontier.at(1) != 1
    with pytest.raises(TypeError):
        _ = Frontier.at(1) <= 1  # type: ignore[operator]


@given(st.lists(frontiers(), min_size=1, max_size=6))
def test_sorting_agrees_with_meet_and_join(fs: list[Frontier]) -> None:
    ordered = sorted(fs)
    lo, hi = fs[0], fs[0]
    for f in fs[1:]:
        lo, hi = lo.meet(f), hi.join(f)
    assert ordered[0] == lo and ordered[-1] == hi
