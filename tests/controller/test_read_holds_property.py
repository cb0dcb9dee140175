"""Property: over random create/report/peek/answer/cancel/drop/reconnect sequences, no
`AllowCompaction` passes a time an outstanding peek or a live dataflow needs; compaction never
goes backwards; and once everything is dropped and replicas report empty, every hold is released
and every collection forgotten."""

from __future__ import annotations

from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.controller.errors import SinceViolation
from twofold.controller.holds import LagWindow
from twofold.controller.instance import InstanceState
from twofold.protocol import (
    AllowCompaction,
    CancelPeek,
    ComputeCommand,
    Frontier,
    Frontiers,
    GlobalId,
    IndexTarget,
    Peek,
    PeekResponse,
    PeekRows,
)
from twofold.testing.profiles import examples

from .helpers import index_dataflow

E = Frontier.empty()
REPLICAS = (1, 2)


class Checker:
    """Replays the emitted commands against what outstanding readers need."""

    def __init__(self) -> None:
        self.deps: dict[GlobalId, list[GlobalId]] = {}
        self.since: dict[GlobalId, Frontier] = {}
        self.pending: dict[UUID, tuple[GlobalId, int]] = {}
        self.dropped: set[GlobalId] = set()
        self.empty_reported: dict[GlobalId, set[int]] = {}

    def needs(self, d: GlobalId) -> bool:
        """Dataflow `d` still reads its inputs (not dropped-and-reported-empty everywhere)."""
        return not (
            self.since[d].is_empty and self.empty_reported.get(d, set()) >= set(REPLICAS)
        )

    def check(self, cmds: list[ComputeCommand]) -> None:
        for c in cmds:
            if isinstance(c, Peek):
                assert isinstance(c.target, IndexTarget)
                self.pending[c.uuid] = (c.target.id, c.timestamp)
            elif isinstance(c, CancelPeek):
                self.pending.pop(c.uuid, None)
            elif isinstance(c, AllowCompaction):
                f = c.frontier
                assert self.since[c.id] <= f, "compaction went backwards"
                if f.is_empty:
                    assert c.id in self.dropped, "compacted to empty without a drop"
                for target, ts in self.pending.values():
                    if target == c.id:
                        assert f <= Frontier.at(ts), f"compacted {c.id} past pending peek at {ts}"
                for d, deps in self.deps.items():
                    if c.id in deps and self.needs(d):
                        assert f <= self.since[d], f"compacted {c.id} past what {d} reads"
                self.since[c.id] = f


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_compaction_never_passes_what_readers_need(data: st.DataObject) -> None:
    s = InstanceState(read_policy=LagWindow(data.draw(st.integers(0, 3))))
    s.start()
    for r in REPLICAS:
        s.connect_replica(r)
    chk = Checker()
    reported: dict[tuple[int, GlobalId], int] = {}
    next_id, next_uuid = 1, 1

    def live() -> list[GlobalId]:
        return sorted(i for i in chk.deps if i not in chk.dropped)

    for _ in range(data.draw(st.integers(5, 60))):
        op = data.draw(st.sampled_from(
            ["create", "report", "report", "report", "peek", "answer", "cancel", "drop",
             "reconnect", "empty"]
        ))  # fmt: skip
        ids = live()
        cmds: list[ComputeCommand] = []
        if op == "create" or not ids:
            new = GlobalId.user(next_id)
            next_id += 1
            deps = sorted(data.draw(st.sets(st.sampled_from(ids), max_size=2))) if ids else []
            desc, fx = s.create_dataflow(index_dataflow(new, deps))
            assert desc.as_of is not None
            chk.deps[new] = deps
            chk.since[new] = desc.as_of
            cmds = fx.commands
        elif op == "report":
            r = data.draw(st.sampled_from(REPLICAS))
            i = data.draw(st.sampled_from(ids))
            # Mostly forward; sometimes a regression, which must change nothing.
            t = max(0, reported.get((r, i), 0) + data.draw(st.integers(-2, 4)))
            reported[(r, i)] = max(t, reported.get((r, i), 0))
            cmds = s.absorb(r, Frontiers(id=i, write_frontier=Frontier.at(t))).commands
        elif op == "peek":
            i = data.draw(st.sampled_from(ids))
            ts = data.draw(st.none() | st.integers(0, 20))
            since = s.collections[i].since
            try:
                _peek, fx = s.begin_peek(UUID(int=next_uuid), IndexTarget(id=i), ts)
                assert ts is None or since.contains(ts)
                next_uuid += 1
                cmds = fx.commands
            except SinceViolation:
                assert ts is not None and not since.contains(ts)
        elif op in ("answer", "cancel") and chk.pending:
            u = data.draw(st.sampled_from(sorted(chk.pending)))
            if op == "answer":
                r = data.draw(st.sampled_from(REPLICAS))
                fx = s.absorb(r, PeekResponse(uuid=u, result=PeekRows(rows=[])))
                assert len(fx.events) == 1
            else:
                fx = s.cancel_peek(u)
            cmds = fx.commands
        elif op == "drop":
            i = data.draw(st.sampled_from(ids))
            chk.dropped.add(i)
            cmds = s.drop(i).commands
        elif op == "reconnect":
            r = data.draw(st.sampled_from(REPLICAS))
            for d in chk.deps:
                if chk.since[d].is_empty:
                    chk.empty_reported.setdefault(d, set()).add(r)  # not replayed
                else:
                    chk.empty_reported.get(d, set()).discard(r)
            reported = {k: v for k, v in reported.items() if k[0] != r}
            _, fx = s.connect_replica(r)
            cmds = fx.commands
        elif op == "empty":
            # Replicas report terminal frontiers only for collections compacted to empty.
            gone = [d for d in chk.deps if chk.since[d].is_empty and d in s.collections]
            if gone:
                d = data.draw(st.sampled_from(gone))
                r = data.draw(st.sampled_from(REPLICAS))
                chk.empty_reported.setdefault(d, set()).add(r)
                cmds = s.absorb(r, Frontiers(id=d, write_frontier=E, input_frontier=E,
                                             output_frontier=E)).commands
        chk.check(cmds)

    # Wind down: finish every peek, drop everything, replicas report empty: all is released.
    for u in sorted(chk.pending):
        chk.check(s.cancel_peek(u).commands)
    for i in live():
        chk.dropped.add(i)
        chk.check(s.drop(i).commands)
    for _ in range(len(chk.deps) + 1):
        for d in list(s.collections):
            if chk.since[d].is_empty:
                for r in REPLICAS:
                    chk.empty_reported.setdefault(d, set()).add(r)
                    chk.check(s.absorb(r, Frontiers(id=d, write_frontier=E, input_frontier=E,
                                                    output_frontier=E)).commands)
    assert s.collections == {}
    assert all(f.is_empty for f in chk.since.values())
    assert s.peeks == {}
