"""The instance decision core: scheduling, peeks, subscribes, copy-tos, drops and cleanup."""

from __future__ import annotations

from uuid import UUID

import pytest

from twofold.controller.dataflows import copy_to_dataflow, peek_dataflow, subscribe_dataflow
from twofold.controller.errors import (
    CollectionExists,
    InvalidDataflow,
    InvalidRead,
    SinceViolation,
    UnknownCollection,
)
from twofold.controller.holds import LagWindow, NoCompaction
from twofold.controller.instance import (
    CollectionForgotten,
    CopyToDone,
    FrontierAdvanced,
    InstanceState,
    PeekAnswered,
    SubscribeDelivered,
)
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    Constant,
    CopyToResponse,
    CopyToRowCount,
    CreateDataflow,
    CreateInstance,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    IndexDesc,
    IndexImport,
    IndexTarget,
    InitializationComplete,
    InstanceConfig,
    LoggingConfig,
    Peek,
    PeekResponse,
    PeekRows,
    Schedule,
    StorageTarget,
    SubscribeBatch,
    SubscribeResponse,
)

from .helpers import DESC, index_dataflow, mv_dataflow

U1, U2, U3 = GlobalId.user(1), GlobalId.user(2), GlobalId.user(3)
E = Frontier.empty()


def at(t: int) -> Frontier:
    return Frontier.at(t)


def started(policy=None, replicas=(1,)) -> InstanceState:  # type: ignore[no-untyped-def]
    s = InstanceState(read_policy=policy or LagWindow(10))
    s.start()
    for r in replicas:
        s.connect_replica(r)
    return s


def test_start_and_replay() -> None:
    si = GlobalId.introspection(1)
    s = InstanceState(InstanceConfig(logging=LoggingConfig(index_logs={"arrangements": si})))
    fx = s.start()
    assert [type(c) for c in fx.commands] == [Hello, CreateInstance, InitializationComplete]
    assert s.collections[si].scheduled
    s.create_dataflow(index_dataflow(U1, as_of=0))
    replay, _ = s.connect_replica(1)
    assert [type(c) for c in replay] == [
        Hello, CreateInstance, CreateDataflow, Schedule, InitializationComplete,
    ]


def test_schedule_waits_for_dependencies_past_as_of() -> None:
    s = started()
    _, fx = s.create_dataflow(index_dataflow(U1, as_of=5))
    assert fx.commands[1:] == [Schedule(id=U1)]  # no compute dependencies
    desc, fx = s.create_dataflow(index_dataflow(U2, [U1]))
    assert desc.as_of == at(5)  # chosen: the earliest time its input is readable
    assert [type(c) for c in fx.commands] == [CreateDataflow]
    fx = s.absorb(1, Frontiers(id=U1, write_frontier=at(5)))  # 5 not sealed yet
    assert Schedule(id=U2) not in fx.commands
    fx = s.absorb(1, Frontiers(id=U1, write_frontier=at(6)))
    assert fx.commands == [Schedule(id=U2)]
    assert FrontierAdvanced(U1, at(6)) in fx.events


def test_create_dataflow_validation() -> None:
    s = started()
    s.create_dataflow(index_dataflow(U1, as_of=0))
    with pytest.raises(CollectionExists):
        s.create_dataflow(index_dataflow(U1, as_of=0))
    with pytest.raises(InvalidDataflow, match="does not exist"):
        s.create_dataflow(index_dataflow(U2, [U3]))
    s.absorb(1, Frontiers(id=U1, write_frontier=at(30)))  # lag 10: since -> 20
    assert s.collections[U1].since == at(20)
    with pytest.raises(SinceViolation, match=r"since is Frontier\.at\(20\)"):
        s.create_dataflow(index_dataflow(U2, [U1], as_of=3))
    assert U2 not in s.collections


def test_materialized_view_gets_allow_writes_and_write_only_policy() -> None:
    s = started()
    s.create_dataflow(index_dataflow(U1, as_of=0))
    _, fx = s.create_dataflow(mv_dataflow(U2, U1))
    assert fx.commands[-1] == AllowWrites(id=U2)
    with pytest.raises(InvalidRead, match="materialized view, not an index"):
        s.begin_peek(UUID(int=1), IndexTarget(id=U2), 0)
    fx = s.absorb(1, Frontiers(id=U2, write_frontier=at(8)))
    assert AllowCompaction(id=U2, frontier=at(7)) in fx.commands
    # The MV's input hold follows the MV's since.
    assert AllowCompaction(id=U1, frontier=at(0)) not in fx.commands
    assert s.collections[U1].holds.holds()[at(7)] == 1


def test_peek_first_answer_wins_and_cancel_precedes_release() -> None:
    s = started(replicas=(1, 2))
    s.create_dataflow(index_dataflow(U1, as_of=0))
    s.absorb(1, Frontiers(id=U1, write_frontier=at(5)))
    u = UUID(int=1)
    peek, fx = s.begin_peek(u, IndexTarget(id=U1))
    assert peek.timestamp == 4  # latest readable: write frontier minus one
    assert fx.commands == [peek]
    # While the peek is pending, compaction stops at its timestamp.
    fx = s.absorb(2, Frontiers(id=U1, write_frontier=at(40)))
    assert fx.commands == [AllowCompaction(id=U1, frontier=at(4))]
    rows = PeekRows(rows=[([1, 2], 1)])
    fx = s.absorb(2, PeekResponse(uuid=u, result=rows))
    assert fx.events == [PeekAnswered(u, rows)]
    assert fx.commands == [CancelPeek(uuid=u), AllowCompaction(id=U1, frontier=at(30))]
    fx = s.absorb(1, PeekResponse(uuid=u, result=rows))
    assert fx.events == [] and fx.commands == [] and s.ignored_peek_responses == 1


def test_peek_timestamps_and_since_violations() -> None:
    s = started()
    s.create_dataflow(index_dataflow(U1, as_of=3))
    assert s.choose_timestamp(U1) == 3  # nothing sealed yet: the since (the replica waits)
    s.absorb(1, Frontiers(id=U1, write_frontier=at(50)))
    assert s.choose_timestamp(U1) == 49
    assert s.choose_timestamp(U1, 45) == 45
    with pytest.raises(SinceViolation):
        s.choose_timestamp(U1, 39)
    with pytest.raises(UnknownCollection):
        s.choose_timestamp(U2)
    with pytest.raises(InvalidRead, match="explicit timestamp"):
        s.begin_peek(UUID(int=9), StorageTarget(id=U2, shard="x"))
    peek, _ = s.begin_peek(UUID(int=9), StorageTarget(id=U2, shard="x"), 7)
    assert peek.timestamp == 7
    with pytest.raises(InvalidRead, match="already in use"):
        s.begin_peek(UUID(int=9), IndexTarget(id=U1))
    # Cancelling releases; cancelling twice is harmless.
    assert s.cancel_peek(UUID(int=9)).commands == [CancelPeek(uuid=UUID(int=9))]
    assert s.cancel_peek(UUID(int=9)).commands == []


def test_drop_compacts_to_empty_and_cleanup_releases_inputs() -> None:
    s = started(NoCompaction(), replicas=(1, 2))
    s.create_dataflow(index_dataflow(U1, as_of=0))
    s.create_dataflow(index_dataflow(U2, [U1], as_of=2))
    u = UUID(int=5)
    s.begin_peek(u, IndexTarget(id=U2), 2)
    assert s.drop(U2).commands == []  # the pending peek still holds it
    fx = s.cancel_peek(u)
    assert fx.commands == [CancelPeek(uuid=u), AllowCompaction(id=U2, frontier=E)]
    fx = s.drop(U1)
    # U2 is not cleaned up yet: its hold on U1 (at U2's as_of) remains.
    assert fx.commands == [AllowCompaction(id=U1, frontier=at(2))]
    s.absorb(1, Frontiers(id=U2, write_frontier=E, input_frontier=E, output_frontier=E))
    assert U2 in s.collections  # replica 2 has not reported yet
    fx = s.absorb(2, Frontiers(id=U2, write_frontier=E, input_frontier=E, output_frontier=E))
    assert U2 not in s.collections
    assert fx.commands == [AllowCompaction(id=U1, frontier=E)]
    # A reconnecting replica is not sent the dropped dataflows and counts as empty for them.
    replay, _ = s.connect_replica(2)
    assert not any(isinstance(c, CreateDataflow) for c in replay)
    s.absorb(1, Frontiers(id=U1, write_frontier=E, input_frontier=E, output_frontier=E))
    assert s.collections == {}


def test_unknown_collection_reports_are_counted() -> None:
    s = started()
    fx = s.absorb(1, Frontiers(id=U3, write_frontier=at(1)))
    assert fx.commands == [] and s.unknown_reports == 1


def subscribe_events(fx: object) -> list[object]:
    return [e for e in fx.events if isinstance(e, SubscribeDelivered)]  # type: ignore[attr-defined]


def test_subscribe_delivery_and_finish() -> None:
    s = started()
    s.create_dataflow(index_dataflow(U1, as_of=0))
    t1 = GlobalId.transient(1)
    desc = subscribe_dataflow(
        sink_id=t1, from_id=U1, desc=DESC,
        index_imports={U1: IndexImport(desc=IndexDesc(on_id=U1, key=[0]), relation=DESC)},
    )
    _, fx = s.create_dataflow(desc)
    assert fx.commands[1:] == [Schedule(id=t1)]  # transient: scheduled at once
    b1 = SubscribeBatch(lower=at(0), upper=at(3), updates=[(1, [1, 1], 1)])
    fx = s.absorb(1, SubscribeResponse(id=t1, event=b1))
    assert subscribe_events(fx) == [SubscribeDelivered(t1, b1, False)]
    assert AllowCompaction(id=t1, frontier=at(2)) in fx.commands  # write-only: upper - 1
    fx = s.absorb(1, SubscribeResponse(id=t1, event=b1))  # duplicate
    assert subscribe_events(fx) == []
    b2 = SubscribeBatch(lower=at(3), upper=E, updates=[])
    fx = s.absorb(1, SubscribeResponse(id=t1, event=b2))
    assert subscribe_events(fx) == [SubscribeDelivered(t1, b2, True)]
    assert AllowCompaction(id=t1, frontier=E) in fx.commands
    assert t1 not in s.collections  # its only replica reported it finished


def test_copy_to_first_result() -> None:
    s = started(replicas=(1, 2))
    t1 = GlobalId.transient(1)
    s.create_dataflow(
        copy_to_dataflow(sink_id=t1, from_id=U1, desc=DESC, path="/tmp/x", timestamp=0,
                         objects_to_build=[])
    )
    fx = s.absorb(2, CopyToResponse(id=t1, result=CopyToRowCount(count=3)))
    assert fx.events == [CopyToDone(t1, CopyToRowCount(count=3))]
    assert fx.commands == [AllowCompaction(id=t1, frontier=E)]
    fx = s.absorb(1, CopyToResponse(id=t1, result=CopyToRowCount(count=3)))
    assert fx.events == [CollectionForgotten(t1)] and t1 not in s.collections


def test_peek_dataflow_builder() -> None:
    b, i = GlobalId.transient(1), GlobalId.transient(2)
    d = peek_dataflow(build_id=b, index_id=i, plan=Constant(rows=[([1, 2], 1)]), desc=DESC,
                      timestamp=7)
    assert d.is_peek_dataflow() and d.as_of == at(7) and d.until == at(8)
    with pytest.raises(ValueError, match="transient"):
        peek_dataflow(build_id=U1, index_id=i, plan=Constant(rows=[]), desc=DESC, timestamp=0)
    s = started()
    _, fx = s.create_dataflow(d)
    assert fx.commands[1:] == [Schedule(id=i)]
    peek, _ = s.begin_peek(UUID(int=3), IndexTarget(id=i), 7)
    assert isinstance(peek, Peek)


def test_regressions_are_counted_by_the_instance() -> None:
    s = started()
    s.create_dataflow(index_dataflow(U1, as_of=0))
    s.absorb(1, Frontiers(id=U1, write_frontier=at(9)))
    fx = s.absorb(1, Frontiers(id=U1, write_frontier=at(4)))
    assert fx.commands == [] and fx.events == []
    assert s.regression_count == 1 and s.collections[U1].write_frontier == at(9)


def test_replay_refreshes_source_uppers() -> None:
    from twofold.protocol import SourceImport

    uppers = {"shard-a": at(42)}
    s = InstanceState(source_upper=uppers.get)
    s.start()
    src = GlobalId.user(7)
    d = index_dataflow(U1, as_of=0)
    d = type(d)(
        debug_name=d.debug_name,
        source_imports={src: SourceImport(shard="shard-a", desc=DESC)},
        objects_to_build=d.objects_to_build,
        index_exports=d.index_exports,
        as_of=d.as_of,
    )
    s.create_dataflow(d)
    replay, _ = s.connect_replica(1)
    (created,) = [c for c in replay if isinstance(c, CreateDataflow)]
    assert created.dataflow.source_imports[src].upper == at(42)
    uppers.clear()  # unknown shards keep the recorded upper
    replay, _ = s.connect_replica(1)
    (created,) = [c for c in replay if isinstance(c, CreateDataflow)]
    assert created.dataflow.source_imports[src].upper == at(42)


def test_schedule_waits_for_dependencies_to_be_scheduled() -> None:
    s = started()
    s.create_dataflow(index_dataflow(U1, as_of=5))
    s.create_dataflow(index_dataflow(U2, [U1], as_of=5))
    s.create_dataflow(index_dataflow(U3, [U2], as_of=5))
    # U2 is readable past 5, but not scheduled yet: U3 must wait for it.
    fx = s.absorb(1, Frontiers(id=U2, write_frontier=at(6)))
    assert not any(isinstance(c, Schedule) for c in fx.commands)
    fx = s.absorb(1, Frontiers(id=U1, write_frontier=at(6)))
    assert [c for c in fx.commands if isinstance(c, Schedule)] == [
        Schedule(id=U2), Schedule(id=U3),
    ]
