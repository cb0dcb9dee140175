"""Read holds a front end takes for a session (`InstanceState.acquire_hold`/`release_hold`, the
pgwire server's transactions): they keep the since at the held time while the read policy
would move it, refuse a time already compacted, and give compaction back when released."""

from __future__ import annotations

import pytest

from twofold.controller.errors import UnknownCollection
from twofold.controller.holds import HoldError, LagWindow
from twofold.controller.instance import InstanceState
from twofold.protocol import AllowCompaction, Frontier, Frontiers, GlobalId

from .helpers import index_dataflow

U1, U2 = GlobalId.user(1), GlobalId.user(2)


def test_a_session_hold_keeps_the_since_until_released() -> None:
    s = InstanceState(read_policy=LagWindow(10))
    s.start()
    s.connect_replica(1)
    s.create_dataflow(index_dataflow(U1, as_of=0))
    s.absorb(1, Frontiers(id=U1, write_frontier=Frontier.at(20)))
    assert s.collection(U1).since == Frontier.at(10)
    s.acquire_hold(U1, Frontier.at(12))
    fx = s.absorb(1, Frontiers(id=U1, write_frontier=Frontier.at(50)))
    assert s.collection(U1).since == Frontier.at(12)  # the policy alone would say 40
    assert AllowCompaction(id=U1, frontier=Frontier.at(12)) in fx.commands
    with pytest.raises(HoldError):
        s.acquire_hold(U1, Frontier.at(11))  # already compacted past
    fx = s.release_hold(U1, Frontier.at(12))
    assert s.collection(U1).since == Frontier.at(40)
    assert fx.commands == [AllowCompaction(id=U1, frontier=Frontier.at(40))]
    with pytest.raises(HoldError):
        s.release_hold(U1, Frontier.at(12))  # not held any more
    with pytest.raises(UnknownCollection):
        s.acquire_hold(U2, Frontier.at(12))
    assert s.release_hold(U2, Frontier.at(12)).commands == []  # forgotten: nothing to do
