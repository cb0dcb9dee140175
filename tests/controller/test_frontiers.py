"""Frontier tracking: regressions are counted and never applied; the global write frontier is
the maximum over replicas and never regresses."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.controller.frontiers import CollectionFrontiers, FrontierKind
from twofold.protocol import Frontier, GlobalId
from twofold.testing.profiles import examples

ID = GlobalId.user(1)


def test_regressions_are_counted_not_applied() -> None:
    f = CollectionFrontiers(ID, Frontier.at(0))
    assert f.observe(1, write=Frontier.at(5), input=Frontier.at(4)) == Frontier.at(5)
    assert f.observe(1, write=Frontier.at(3), input=Frontier.at(2), output=Frontier.at(1)) is None
    r = f.replica(1)
    assert r is not None
    assert (r.write, r.input, r.output) == (Frontier.at(5), Frontier.at(4), Frontier.at(1))
    assert [(g.kind, g.old, g.new) for g in f.regressions] == [
        (FrontierKind.INPUT, Frontier.at(4), Frontier.at(2)),
        (FrontierKind.WRITE, Frontier.at(5), Frontier.at(3)),
    ]
    # Empty is terminal: nothing after it applies.
    f.observe(1, write=Frontier.empty())
    f.observe(1, write=Frontier.at(9))
    assert f.write_frontier.is_empty and len(f.regressions) == 3


def test_global_write_frontier_is_max_over_replicas() -> None:
    f = CollectionFrontiers(ID, Frontier.at(2))
    f.add_replica(1)
    f.add_replica(2)
    assert f.observe(1, write=Frontier.at(4)) == Frontier.at(4)
    assert f.observe(2, write=Frontier.at(3)) is None  # behind replica 1: not news
    assert f.observe(2, write=Frontier.at(7)) == Frontier.at(7)
    assert f.write_frontier == Frontier.at(7)
    assert f.regressions == []
    # A reconnected replica restarts from the minimum: its early reports are not regressions.
    f.add_replica(2)
    assert f.observe(2, write=Frontier.at(1)) is None
    assert f.regressions == [] and f.write_frontier == Frontier.at(7)


def test_all_replicas_empty() -> None:
    f = CollectionFrontiers(ID, Frontier.at(0))
    f.add_replica(1)
    f.add_replica(2, Frontier.empty())
    assert not f.all_replicas_empty()
    e = Frontier.empty()
    f.observe(1, e, e, e)
    assert f.all_replicas_empty()


reports = st.lists(
    st.tuples(
        st.integers(1, 3),
        st.sampled_from(list(FrontierKind)),
        st.none() | st.integers(0, 20),  # None: the empty frontier
        st.booleans(),  # reconnect this replica first
    ),
    max_size=60,
)


@settings(max_examples=examples(200), deadline=None)
@given(reports)
def test_frontiers_never_regress(ops: list[tuple[int, FrontierKind, int | None, bool]]) -> None:
    f = CollectionFrontiers(ID, Frontier.at(0))
    seen_max = Frontier.at(0)
    for replica, kind, t, reconnect in ops:
        if reconnect:
            f.add_replica(replica)
        before = f.replica(replica)
        old = before.get(kind) if before is not None else Frontier.minimum()
        new = Frontier.empty() if t is None else Frontier.at(t)
        prev_global = f.write_frontier
        n_reg = len(f.regressions)
        f.observe(replica, **{kind.value: new})
        after = f.replica(replica)
        assert after is not None
        if new < old:
            assert after.get(kind) == old and len(f.regressions) == n_reg + 1
        else:
            assert after.get(kind) == new and len(f.regressions) == n_reg
        if kind is FrontierKind.WRITE and not new < old:
            seen_max = seen_max.join(new)
        assert prev_global <= f.write_frontier
        assert f.write_frontier == seen_max
