"""Command history: reduction is equivalent to the full history under a model of replica state,
its size tracks live state, replay order is fixed, and reduction happens when doubled."""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.controller.errors import HistoryError
from twofold.controller.history import NIL_NONCE, CommandHistory
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ColumnType,
    ComputeCommand,
    ComputeParameters,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    GlobalId,
    Hello,
    IndexDesc,
    IndexTarget,
    InitializationComplete,
    Peek,
    RelationDesc,
    Schedule,
    UpdateConfiguration,
)
from twofold.testing.profiles import examples

DESC = RelationDesc(names=["k"], types=[ColumnType("int")])


def dataflow(ids: list[GlobalId], as_of: int) -> CreateDataflow:
    return CreateDataflow(
        dataflow=DataflowDescription(
            debug_name="df" + "_".join(map(str, ids)),
            index_exports={i: (IndexDesc(on_id=i, key=[0]), DESC) for i in ids},
            as_of=Frontier.at(as_of),
        )
    )


@dataclass
class ReplicaModel:
    """What a replica holds after applying a command sequence."""

    config: ComputeParameters = field(default_factory=ComputeParameters)
    hello: int = 0
    instance: int = 0
    initialized: bool = False
    since: dict[GlobalId, Frontier] = field(default_factory=dict)  # per created export
    scheduled: set[GlobalId] = field(default_factory=set)
    writable: set[GlobalId] = field(default_factory=set)
    peeks: dict[UUID, Peek] = field(default_factory=dict)
    created: set[GlobalId] = field(default_factory=set)

    def apply(self, cmds: list[ComputeCommand], finished: set[UUID]) -> ReplicaModel:
        for cmd in cmds:
            if isinstance(cmd, Hello):
                self.hello += 1
            elif isinstance(cmd, CreateInstance):
                self.instance += 1
            elif isinstance(cmd, InitializationComplete):
                self.initialized = True
            elif isinstance(cmd, UpdateConfiguration):
                p = cmd.params
                self.config = ComputeParameters(
                    max_result_size=p.max_result_size or self.config.max_result_size,
                    dyncfg={**self.config.dyncfg, **p.dyncfg},
                )
            elif isinstance(cmd, CreateDataflow):
                assert cmd.dataflow.as_of is not None
                for i in cmd.dataflow.export_ids():
                    assert i not in self.created, "export created twice"
                    self.created.add(i)
                    self.since[i] = cmd.dataflow.as_of
            elif isinstance(cmd, Schedule):
                assert cmd.id in self.created, "Schedule before CreateDataflow"
                self.scheduled.add(cmd.id)
            elif isinstance(cmd, AllowWrites):
                assert cmd.id in self.created, "AllowWrites before CreateDataflow"
                self.writable.add(cmd.id)
            elif isinstance(cmd, AllowCompaction):
                assert cmd.id in self.created, "AllowCompaction before CreateDataflow"
                assert self.since[cmd.id] <= cmd.frontier, "compaction before the as_of"
                self.since[cmd.id] = cmd.frontier
            elif isinstance(cmd, Peek):
                assert isinstance(cmd.target, IndexTarget)
                assert cmd.target.id in self.created, "Peek before CreateDataflow"
                self.peeks[cmd.uuid] = cmd
            elif isinstance(cmd, CancelPeek):
                self.peeks.pop(cmd.uuid, None)
        for u in finished:
            self.peeks.pop(u, None)
        return self

    def live(self) -> dict[str, object]:
        live = {i: f for i, f in self.since.items() if not f.is_empty}
        return {
            "config": self.config,
            "hello": min(self.hello, 1),
            "instance": self.instance,
            "initialized": self.initialized,
            "since": live,
            "scheduled": self.scheduled & set(live),
            "writable": self.writable & set(live),
            "peeks": self.peeks,
        }


@st.composite
def histories(draw: st.DrawFn, max_ops: int = 60) -> tuple[list[ComputeCommand], set[UUID]]:
    """A valid command sequence against a model of live collections, plus finished peeks."""
    cmds: list[ComputeCommand] = [Hello(nonce=UUID(int=7)), CreateInstance()]
    since: dict[GlobalId, Frontier] = {}
    peeks: dict[UUID, GlobalId] = {}
    finished: set[UUID] = set()
    scheduled: set[GlobalId] = set()
    next_id = 1
    next_uuid = 1
    init_at = draw(st.integers(0, max_ops))
    for step in range(draw(st.integers(0, max_ops))):
        if step == init_at:
            cmds.append(InitializationComplete())
        live = sorted(i for i, f in since.items() if not f.is_empty)
        op = draw(st.sampled_from(["create", "schedule", "writes", "compact", "drop", "peek",
                                   "cancel", "finish", "config"]))
        if op == "create" or not live:
            n = draw(st.integers(1, 3))
            ids = [GlobalId.user(next_id + k) for k in range(n)]
            next_id += n
            t = draw(st.integers(0, 20))
            cmds.append(dataflow(ids, t))
            for i in ids:
                since[i] = Frontier.at(t)
        elif op == "schedule":
            i = draw(st.sampled_from(live))
            if i not in scheduled:
                scheduled.add(i)
                cmds.append(Schedule(id=i))
        elif op == "writes":
            cmds.append(AllowWrites(id=draw(st.sampled_from(live))))
        elif op == "compact":
            i = draw(st.sampled_from(live))
            cur = since[i].time
            assert cur is not None
            since[i] = Frontier.at(cur + draw(st.integers(0, 5)))
            cmds.append(AllowCompaction(id=i, frontier=since[i]))
        elif op == "drop":
            i = draw(st.sampled_from(live))
            if i not in peeks.values():  # a peek's read hold keeps its target alive
                since[i] = Frontier.empty()
                cmds.append(AllowCompaction(id=i, frontier=since[i]))
        elif op == "peek":
            i = draw(st.sampled_from(live))
            u = UUID(int=draw(st.integers(0, 2**128 - 1)) ^ next_uuid)
            next_uuid += 1
            if u not in peeks and u not in finished:
                peeks[u] = i
                ts = since[i].time
                assert ts is not None
                cmds.append(Peek(uuid=u, target=IndexTarget(id=i), timestamp=ts))
        elif op in ("cancel", "finish") and peeks:
            u = draw(st.sampled_from(sorted(peeks)))
            del peeks[u]
            if op == "cancel":
                cmds.append(CancelPeek(uuid=u))
            else:
                finished.add(u)
        elif op == "config":
            cmds.append(UpdateConfiguration(params=ComputeParameters(
                max_result_size=draw(st.none() | st.integers(1, 100)),
                dyncfg=draw(st.dictionaries(st.sampled_from("abc"), st.integers(0, 3))),
            )))
    return cmds, finished


REPLAY_RANK = {
    Hello: 0, CreateInstance: 1, UpdateConfiguration: 2, CreateDataflow: 3, Schedule: 4,
    Peek: 5, AllowCompaction: 6, AllowWrites: 7, InitializationComplete: 8,
}


@settings(max_examples=examples(100), deadline=None)
@given(histories())
def test_reduced_history_is_equivalent_to_full_history(
    h: tuple[list[ComputeCommand], set[UUID]],
) -> None:
    cmds, finished = h
    history = CommandHistory()
    for c in cmds:
        history.push(c)
    for u in finished:
        history.finish_peek(u)
    history.reduce()
    reduced = history.commands()

    full_model = ReplicaModel().apply(cmds, finished)
    reduced_model = ReplicaModel().apply(reduced, set())  # asserts dependency order too
    assert reduced_model.live() == full_model.live()

    # Fixed replay order, nonce stored as nil, no cancels.
    ranks = [REPLAY_RANK[type(c)] for c in reduced]
    assert ranks == sorted(ranks)
    assert isinstance(reduced[0], Hello) and reduced[0].nonce == NIL_NONCE
    peeks = [c.uuid for c in reduced if isinstance(c, Peek)]
    assert peeks == sorted(peeks)
    compacted = [c.id for c in reduced if isinstance(c, AllowCompaction)]
    assert compacted == sorted(compacted)
    assert sum(isinstance(c, UpdateConfiguration) for c in reduced) <= 1

    # Reduction is idempotent.
    history.reduce()
    assert history.commands() == reduced


def live_size(model: ReplicaModel) -> int:
    live = model.live()
    n_live = len(live["since"])  # type: ignore[arg-type]
    n_peeks = len(live["peeks"])  # type: ignore[arg-type]
    # hello, instance, config, init + per live export: dataflow, schedule, compaction, writes.
    return 4 + 4 * n_live + n_peeks


@settings(max_examples=examples(20), deadline=None)
@given(st.data())
def test_size_tracks_live_state_not_traffic(data: st.DataObject) -> None:
    history = CommandHistory()
    model_cmds: list[ComputeCommand] = []
    history.push(Hello(nonce=UUID(int=1)))
    history.push(CreateInstance())
    history.push(InitializationComplete())
    next_id = 1
    max_bound = 0
    model = ReplicaModel().apply(history.commands(), set())
    for _round in range(60):
        # Churn: create a few, compact, peek, cancel, drop — traffic grows, live state doesn't.
        ids = [GlobalId.user(next_id + k) for k in range(data.draw(st.integers(1, 3)))]
        next_id += len(ids)
        batch: list[ComputeCommand] = [dataflow(ids, 0), *(Schedule(id=i) for i in ids)]
        for t in range(1, data.draw(st.integers(1, 6))):
            batch += [AllowCompaction(id=i, frontier=Frontier.at(t)) for i in ids]
            u = UUID(int=next_id * 1000 + t)
            batch += [Peek(uuid=u, target=IndexTarget(id=ids[0]), timestamp=t), CancelPeek(uuid=u)]
        batch += [UpdateConfiguration(params=ComputeParameters(max_result_size=next_id))]
        if data.draw(st.booleans()) or next_id > 10:
            batch += [AllowCompaction(id=i, frontier=Frontier.empty()) for i in ids]
        for c in batch:
            history.push(c)
            model.apply([c], set())
            max_bound = max(max_bound, live_size(model))
            # Reduced whenever doubled: never more than twice the largest live size plus one.
            assert len(history) <= 2 * max_bound + 1
        model_cmds += batch
    history.reduce()
    assert len(history) <= live_size(ReplicaModel().apply(model_cmds, set()))
    # At most 12 live exports and one live peek at a time, however long the churn runs.
    assert max_bound <= 4 + 4 * 12 + 1


def test_reduces_when_doubled() -> None:
    history = CommandHistory()
    history.push(Hello(nonce=UUID(int=1)))  # 1 > 2*0: the first push reduces
    assert history.reductions == 1
    history.push(CreateInstance())  # 2 <= 2*1
    assert history.reductions == 1
    history.push(UpdateConfiguration(params=ComputeParameters(max_result_size=1)))  # 3 > 2
    assert history.reductions == 2 and len(history) == 3
    for t in range(2, 5):  # lengths 4, 5, 6 <= 2*3
        history.push(UpdateConfiguration(params=ComputeParameters(max_result_size=t)))
    assert history.reductions == 2 and len(history) == 6
    history.push(UpdateConfiguration(params=ComputeParameters(max_result_size=10)))  # 7 > 6
    assert history.reductions == 3
    assert history.commands() == [
        Hello(nonce=NIL_NONCE),
        CreateInstance(),
        UpdateConfiguration(params=ComputeParameters(max_result_size=10)),
    ]


def test_as_of_advances_to_meet_of_export_compactions() -> None:
    a, b = GlobalId.user(1), GlobalId.user(2)
    history = CommandHistory()
    sequence: list[ComputeCommand] = [
        Hello(nonce=UUID(int=1)), CreateInstance(), dataflow([a, b], 3), Schedule(id=a),
        Schedule(id=b), AllowWrites(id=b), AllowCompaction(id=a, frontier=Frontier.at(10)),
        AllowCompaction(id=b, frontier=Frontier.at(7)), InitializationComplete(),
    ]
    for c in sequence:
        history.push(c)
    history.reduce()
    cmds = history.commands()
    created = [c for c in cmds if isinstance(c, CreateDataflow)]
    assert [c.dataflow.as_of for c in created] == [Frontier.at(7)]
    # b's compaction is folded into the as_of; a's stays; order is fixed.
    assert cmds[3:] == [
        Schedule(id=a), Schedule(id=b), AllowCompaction(id=a, frontier=Frontier.at(10)),
        AllowWrites(id=b), InitializationComplete(),
    ]

    # Dropping both exports removes the dataflow, its schedules, writes and compactions.
    history.push(AllowCompaction(id=a, frontier=Frontier.empty()))
    history.push(AllowCompaction(id=b, frontier=Frontier.empty()))
    history.reduce()
    assert history.commands() == [
        Hello(nonce=NIL_NONCE), CreateInstance(), InitializationComplete(),
    ]


def test_introspection_compactions_are_kept() -> None:
    si = GlobalId.introspection(1)
    history = CommandHistory()
    history.push(Hello(nonce=UUID(int=1)))
    history.push(CreateInstance())
    history.push(AllowCompaction(id=si, frontier=Frontier.at(5)))
    history.push(AllowCompaction(id=si, frontier=Frontier.at(9)))
    history.reduce()
    assert history.commands()[-1] == AllowCompaction(id=si, frontier=Frontier.at(9))


def test_finished_peeks_are_forgotten() -> None:
    a = GlobalId.user(1)
    u1, u2 = UUID(int=2), UUID(int=1)
    history = CommandHistory()
    sequence: list[ComputeCommand] = [
        Hello(nonce=UUID(int=1)), CreateInstance(), dataflow([a], 0),
        Peek(uuid=u1, target=IndexTarget(id=a), timestamp=0),
        Peek(uuid=u2, target=IndexTarget(id=a), timestamp=0),
    ]
    for c in sequence:
        history.push(c)
    history.reduce()
    assert [c.uuid for c in history.commands() if isinstance(c, Peek)] == [u2, u1]
    history.finish_peek(u1)
    history.reduce()
    assert [c.uuid for c in history.commands() if isinstance(c, Peek)] == [u2]


def test_invalid_histories_are_refused() -> None:
    history = CommandHistory()
    history.push(Hello(nonce=UUID(int=1)))
    history.push(Hello(nonce=UUID(int=2)))  # only detected at reduction: reduce raises
    with pytest.raises(HistoryError, match="two Hello"):
        history.reduce()
    with pytest.raises(HistoryError, match="no as_of"):
        CommandHistory().push(
            CreateDataflow(dataflow=DataflowDescription(debug_name="x", as_of=None))
        )
