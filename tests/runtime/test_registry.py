"""The publication registry: readiness, tombstones, reset, standing holds (I1c)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import Frontier, GlobalId
from twofold.runtime.registry import PublicationClosed, PublicationRegistry
from twofold.testing.profiles import examples


@dataclass(frozen=True)
class Snap:
    since: Frontier
    upper: Frontier


U1 = GlobalId.user(1)


def snap(since: int, upper: int) -> Snap:
    return Snap(Frontier.at(since), Frontier.at(upper))


def test_unpublished_lookup_is_none_not_error() -> None:
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    assert reg.lookup(U1) is None


def test_publish_replaces_atomically_and_wakes_readers() -> None:
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    woken: list[GlobalId] = []
    reg.add_reader_waker(woken.append)
    s1, s2 = snap(0, 5), snap(0, 9)
    reg.publish(U1, s1)
    held = reg.lookup(U1)
    reg.publish(U1, s2)
    assert held is s1  # a held snapshot is unaffected by later publishes
    assert reg.lookup(U1) is s2
    assert woken == [U1, U1]


def test_close_tombstones_and_wakes() -> None:
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    woken: list[GlobalId] = []
    reg.add_reader_waker(woken.append)
    reg.publish(U1, snap(0, 1))
    reg.close(U1)
    with pytest.raises(PublicationClosed, match="u1"):
        reg.lookup(U1)
    assert woken == [U1, U1]
    # Closing an id never published also tombstones it (a read arriving later must not hang).
    reg.close(GlobalId.user(2))
    with pytest.raises(PublicationClosed):
        reg.lookup(GlobalId.user(2))


def test_reset_forgets_tombstones_but_keeps_standing_holds() -> None:
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    reg.publish(U1, snap(3, 9))
    reg.apply_standing_hold(U1, Frontier.at(5))
    reg.close(GlobalId.user(2))
    reg.reset()
    assert reg.lookup(U1) is None
    assert reg.lookup(GlobalId.user(2)) is None
    assert reg.standing_hold(U1) == Frontier.at(5)


def test_standing_hold_seeded_at_first_publish_since() -> None:
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    reg.publish(U1, snap(7, 9))
    assert reg.standing_hold(U1) == Frontier.at(7)
    # Later publishes do not move the hold: only interactive raises it.
    reg.publish(U1, snap(8, 12))
    assert reg.standing_hold(U1) == Frontier.at(7)
    assert reg.compaction_target(U1, Frontier.at(11)) == Frontier.at(7)


def test_standing_hold_only_rises_and_empty_removes() -> None:
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    holders: list[GlobalId] = []
    reg.add_hold_waker(holders.append)
    reg.publish(U1, snap(0, 1))
    reg.apply_standing_hold(U1, Frontier.at(4))
    reg.apply_standing_hold(U1, Frontier.at(2))
    assert reg.standing_hold(U1) == Frontier.at(4)
    assert holders == [U1, U1]
    reg.apply_standing_hold(U1, Frontier.empty())
    assert reg.standing_hold(U1) is None
    # Without a hold, maintenance follows the controller.
    assert reg.compaction_target(U1, Frontier.at(10)) == Frontier.at(10)


def test_hold_before_first_publish_is_kept() -> None:
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    reg.apply_standing_hold(U1, Frontier.at(3))
    reg.publish(U1, snap(0, 5))
    assert reg.standing_hold(U1) == Frontier.at(3)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ctl", "int"]), st.integers(0, 20)), max_size=30))
def test_i1c_target_never_passes_the_interactive_position(
    events: list[tuple[str, int]],
) -> None:
    """Whatever the controller allows, maintenance's target is at most the join of what
    interactive has applied (or the seed)."""
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    reg.publish(U1, snap(0, 100))
    allowed = Frontier.at(0)
    applied = Frontier.at(0)
    for who, t in events:
        f = Frontier.at(t)
        if who == "ctl":
            allowed = allowed.join(f)
        else:
            reg.apply_standing_hold(U1, f)
            applied = applied.join(f)
        target = reg.compaction_target(U1, allowed)
        assert target <= applied
        assert target <= allowed


def test_concurrent_publish_and_lookup_see_whole_snapshots() -> None:
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    done = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        last = -1
        while not done.is_set():
            s = reg.lookup(U1)
            if s is None:
                continue
            assert s.upper.time is not None and s.since.time is not None
            if s.upper.time < last:
                errors.append(f"upper went back: {s.upper.time} < {last}")
            last = s.upper.time
            if s.since.time + 1 != s.upper.time:
                errors.append("torn snapshot")

    t = threading.Thread(target=reader)
    t.start()
    for i in range(20_000):
        reg.publish(U1, snap(i, i + 1))
    done.set()
    t.join()
    assert errors == []


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["publish", "hold", "unhold", "close", "reset"]),
            st.integers(0, 2),
            st.integers(0, 9),
        ),
        max_size=25,
    )
)
def test_lookup_held_is_lookup_and_standing_hold(ops: list[tuple[str, int, int]]) -> None:
    """`lookup_held` (the front's one-lock read) answers what `lookup` and `standing_hold`
    answer, and raises where `lookup` raises, whatever happened before."""
    reg: PublicationRegistry[Snap] = PublicationRegistry()
    ids = [GlobalId.user(i + 1) for i in range(3)]
    for op, i, t in ops:
        gid = ids[i]
        if op == "publish":
            reg.publish(gid, snap(t, t + 1))
        elif op == "hold":
            reg.apply_standing_hold(gid, Frontier.at(t))
        elif op == "unhold":
            reg.apply_standing_hold(gid, Frontier.empty())
        elif op == "close":
            reg.close(gid)
        else:
            reg.reset()
        for g in ids:
            try:
                want: object = (reg.lookup(g), reg.standing_hold(g))
            except PublicationClosed:
                want = PublicationClosed
            try:
                got: object = reg.lookup_held(g)
            except PublicationClosed:
                got = PublicationClosed
            assert got == want
