"""Two-runtime specifics, driven at the state-machine level (`helpers.Workers`): the runtimes'
progress is interleaved explicitly, so the races `spec/runtime.md` names are produced on purpose.

- Readiness: a peek replayed after `Hello` before maintenance republishes its index waits, then
  answers correctly; a peek on a dropped index errors instead of hanging (either order of the
  two runtimes applying the drop).
- I1/I1c: a peek dataflow created at `as_of` X importing an index, then dropped and followed by
  `AllowCompaction(index, X + k)`, is never compacted under while interactive may still read it,
  and no peek is ever answered wrongly — a hypothesis property over random interleavings, and a
  check that the property fails without the standing hold.
- A stalled interactive runtime holds shared compaction back; it is released when it resumes.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.runtime.helpers import KV, Mode, Workers, multiset, unique_url

from twofold.protocol import (
    AllowCompaction,
    BuildDesc,
    CancelPeek,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    Hello,
    IndexDesc,
    IndexImport,
    IndexTarget,
    InitializationComplete,
    InstanceConfig,
    Mfp,
    Peek,
    PeekCanceled,
    PeekError,
    PeekRows,
    Schedule,
    SourceImport,
)
from twofold.storage import Storage, Table, open_storage
from twofold.testing.profiles import examples

MAINT, INTER = 0, 1
SRC, IDX = GlobalId.user(1), GlobalId.user(2)


@dataclass
class World:
    """A table with a history of writes, and an index over it maintained by `workers`."""

    storage: Storage
    table: Table
    workers: Workers
    times: list[int]
    log: list[tuple[list[Any], int, int]]

    def state_at(self, t: int) -> dict[tuple[Any, ...], int]:
        return multiset((row, diff) for row, time, diff in self.log if time <= t)


def _index_dataflow(t: Table, as_of: int) -> CreateDataflow:
    return CreateDataflow(DataflowDescription(
        "index", source_imports={SRC: SourceImport(t.shard.shard_id, KV)},
        index_exports={IDX: (IndexDesc(SRC, [0]), KV)}, as_of=Frontier.at(as_of)))


def _peek_dataflow(n: int, as_of: int) -> tuple[GlobalId, CreateDataflow]:
    export, mid = GlobalId.transient(100 + n), GlobalId.transient(10_000 + n)
    desc = DataflowDescription(
        f"peek-{export}", index_imports={IDX: IndexImport(IndexDesc(SRC, [0]), KV)},
        objects_to_build=[BuildDesc(mid, Mfp(input=Get(IDX)))],
        index_exports={export: (IndexDesc(mid, [0]), KV)},
        as_of=Frontier.at(as_of), until=Frontier.at(as_of + 1))
    assert desc.is_peek_dataflow()
    return export, CreateDataflow(desc)


@pytest.fixture
def world() -> Iterator[World]:
    with world_of("two") as w:
        yield w


@contextlib.contextmanager
def world_of(mode: Mode) -> Iterator[World]:
    storage = open_storage(unique_url("w"))
    t = storage.create_table("t", KV)
    log: list[tuple[list[Any], int, int]] = []
    times = []
    for rows, diff in [([[1, "a"], [2, "b"]], 1), ([[3, "c"]], 1), ([[1, "a"]], -1),
                       ([[4, "d"], [2, "x"]], 1), ([[3, "c"]], -1)]:
        ts = t.write(rows, diff)
        times.append(ts)
        log.extend((r, ts, diff) for r in rows)
    w = Workers(mode, storage)
    w.send(Hello(uuid.uuid4()), CreateInstance(InstanceConfig()), InitializationComplete(),
           _index_dataflow(t, times[0]), Schedule(IDX))
    w.settle(lambda: Frontier.at(times[-1] + 1) <= (w.check.last(IDX) or Frontier.minimum()))
    try:
        yield World(storage, t, w, times, log)
    finally:
        w.close()
        storage.close()


def _since(world: World) -> Frontier:
    arr = world.workers.maintenance.dataflows[IDX].export(IDX)
    since: Frontier = arr.since
    return since


# -- readiness -------------------------------------------------------------------------------------


def test_peek_replayed_before_republication_waits_then_answers(world: World) -> None:
    w, t = world.workers, world.table
    w.send(Hello(uuid.uuid4()), CreateInstance(InstanceConfig()), InitializationComplete(),
           _index_dataflow(t, world.times[0]), Schedule(IDX))
    u = uuid.uuid4()
    w.send(Peek(u, IndexTarget(IDX), world.times[2]))
    # Maintenance sees the Hello (forgetting its publications) but not yet the replayed create.
    w.deliver(MAINT)
    assert w.registry is not None and w.registry.lookup(IDX) is None
    # Interactive applies everything, including the peek, and steps: it must wait, not error
    # and not answer from an empty placeholder.
    w.deliver(INTER, n=len(w.queues[INTER]))
    for _ in range(3):
        w.step(INTER)
    assert u not in w.check.peek_results
    w.settle(lambda: u in w.check.peek_results)
    result = w.check.peek_results[u]
    assert isinstance(result, PeekRows)
    assert multiset(result.rows) == world.state_at(world.times[2])


@pytest.mark.parametrize("maintenance_first", [True, False])
def test_peek_on_dropped_index_errors_instead_of_hanging(world: World,
                                                         maintenance_first: bool) -> None:
    w = world.workers
    u = uuid.uuid4()
    w.send(Peek(u, IndexTarget(IDX), world.times[-1] + 1_000))  # a future time: it waits
    w.deliver(INTER)
    w.step(INTER)
    assert u not in w.check.peek_results
    w.send(AllowCompaction(IDX, Frontier.empty()))
    order = [MAINT, INTER] if maintenance_first else [INTER, MAINT]
    for which in order:
        w.deliver(which)
        w.step(which)
    w.step(INTER)
    result = w.check.peek_results.get(u)
    assert isinstance(result, PeekError) and str(IDX) in result.message, result
    # A later peek of the dropped id errors too (the router counts it as a violation).
    u2 = uuid.uuid4()
    w.send(Peek(u2, IndexTarget(IDX), world.times[0]))
    w.settle(lambda: u2 in w.check.peek_results)
    assert isinstance(w.check.peek_results[u2], PeekError)


# -- compaction ------------------------------------------------------------------------------------


def test_stalled_interactive_holds_compaction_back_until_it_resumes(world: World) -> None:
    w = world.workers
    seed = _since(world)
    assert seed == Frontier.at(world.times[0])
    target = Frontier.at(world.times[3])
    w.send(AllowCompaction(IDX, target))
    w.deliver(MAINT)
    for _ in range(3):
        w.step(MAINT)
    assert _since(world) == seed, "compacted past the stalled interactive runtime's position"
    assert w.registry is not None and w.registry.standing_hold(IDX) == seed
    w.deliver(INTER)  # interactive resumes and applies the broadcast compaction
    assert w.registry.standing_hold(IDX) == target
    w.step(MAINT)
    assert _since(world) == target
    snap = w.registry.lookup(IDX)
    assert snap is not None and snap.since == target


@dataclass(frozen=True)
class Reader:
    """One read at `as_of`: a peek dataflow (or a direct index peek) that the controller either
    keeps until answered or cancels and drops at once."""

    as_of_index: int
    via_dataflow: bool
    drop_early: bool


readers_st = st.lists(st.builds(Reader, st.integers(0, 3), st.booleans(), st.booleans()),
                      min_size=1, max_size=3)


def _run_i1_race(world: World, readers: list[Reader], k: int, schedule: list[int]) -> None:
    """The controller's script for `readers`, then `schedule` (0/1: deliver one command to
    maintenance/interactive, 2/3: step maintenance/interactive), then settle; checks I1 after
    every action and every answer at the end."""
    w = world.workers
    peeks: list[tuple[uuid.UUID, Reader, int, GlobalId | None]] = []
    for n, r in enumerate(readers):
        x = world.times[r.as_of_index]
        u = uuid.uuid4()
        if r.via_dataflow:
            made, create = _peek_dataflow(n, x)
            w.send(create, Schedule(made), Peek(u, IndexTarget(made), x))
            peeks.append((u, r, x, made))
        else:
            w.send(Peek(u, IndexTarget(IDX), x))
            peeks.append((u, r, x, None))
    for u, r, _, export in peeks:
        if r.drop_early:
            w.send(CancelPeek(u))
            if export is not None:
                w.send(AllowCompaction(export, Frontier.empty()))
    # The controller releases its holds for dropped readers only: it compacts to the earliest
    # as_of it still needs, and k steps past the latest write if it needs none.
    live = [x for _, r, x, _ in peeks if not r.drop_early]
    target = min([world.times[-1] + k, *live])
    w.send(AllowCompaction(IDX, Frontier.at(target)))

    failures: list[str] = []

    def check_i1() -> None:
        since = _since(world)
        for hosted in w.interactive.order:
            if hosted.failed is not None:
                failures.append(hosted.failed)
            if IDX in hosted.desc.index_imports and not hosted.finished:
                assert since.less_equal(Frontier.at(hosted.as_of)), (
                    f"index compacted to {since} under a live dataflow at as_of {hosted.as_of}")

    for action in schedule:
        if action < 2:
            w.deliver(action)
        else:
            w.step(action - 2)
        check_i1()
    pending = [u for u, r, _, _ in peeks]
    w.settle(lambda: all(u in w.check.peek_results for u in pending))
    check_i1()
    assert not failures, failures
    for u, r, x, _ in peeks:
        result = w.check.peek_results[u]
        if isinstance(result, PeekCanceled):
            assert r.drop_early
            continue
        assert isinstance(result, PeekRows), (r, result)
        assert multiset(result.rows) == world.state_at(x), (r, x)
    # Once both runtimes have caught up, the index is compacted exactly to the target.
    w.settle()
    assert _since(world) == Frontier.at(target)


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(readers=readers_st, k=st.integers(1, 3),
       schedule=st.lists(st.integers(0, 3), max_size=40))
def test_i1_race_never_compacts_under_a_reader(world: World, readers: list[Reader], k: int,
                                               schedule: list[int]) -> None:
    # A fresh world per example: hypothesis reuses function-scoped fixtures across examples.
    with world_of("two") as fresh:
        _run_i1_race(fresh, readers, k, schedule)


def test_without_the_standing_hold_the_race_is_caught(world: World,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The property above has teeth: with compaction ignoring interactive's standing hold, the
    Materialize counterexample (create queued on interactive, drop, compaction applied by
    maintenance first) compacts under the queued dataflow."""
    from twofold.runtime.registry import PublicationRegistry
    monkeypatch.setattr(PublicationRegistry, "compaction_target",
                        lambda self, gid, allowed: allowed)
    reader = Reader(as_of_index=1, via_dataflow=True, drop_early=True)
    # Maintenance applies everything and steps before interactive applies the create.
    with pytest.raises(AssertionError, match=r"compacted .* under a live dataflow"):
        _run_i1_race(world, [reader], 1, [0, 2, 1])


# -- the since gate --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["one", "two"])
def test_peek_right_behind_allow_compaction_errors(mode: Mode) -> None:
    with world_of(mode) as world:
        w = world.workers
        since = world.times[3]
        u = uuid.uuid4()
        w.send(AllowCompaction(IDX, Frontier.at(since)), Peek(u, IndexTarget(IDX),
                                                              world.times[1]))
        if mode == "two":
            w.deliver(MAINT)  # maintenance applies the compaction but has not stepped yet
        w.deliver(len(w.workers) - 1, n=2)  # the runtime serving peeks applies both
        w.settle(lambda: u in w.check.peek_results)
        result = w.check.peek_results[u]
        assert isinstance(result, PeekError) and "since" in result.message, result


# -- deferred merges -------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["one", "two"])
def test_a_step_reports_its_frontier_before_it_merges(mode: Mode) -> None:
    """The step that absorbs a write reports the new frontier (and, with two runtimes,
    publishes a snapshot readable there) without merging; `maintain` merges afterwards, and
    republishes the same contents with fewer batches."""
    with world_of(mode) as world:
        w = world.workers
        runtime = w.maintenance
        arr = runtime.dataflows[IDX].export(IDX)
        arr.maintain()
        before = arr.batch_count
        rows = [[100 + i, "z"] for i in range(len(arr))]  # large enough to merge at once
        ts = world.table.write(rows, 1)
        world.log.extend((r, ts, 1) for r in rows)
        runtime.step()  # a step alone, without the loop's `maintain` after it
        w._collect(0)
        assert Frontier.at(ts + 1) <= (w.check.last(IDX) or Frontier.minimum())
        assert arr.batch_count == before + 1, "the step merged"
        if w.registry is not None:
            assert len(w.registry.lookup(IDX).data) == before + 1
        runtime.maintain()
        merged = arr.batch_count
        assert merged < before + 1
        snap = w.registry.lookup(IDX) if w.registry is not None else arr.snapshot()
        assert len(snap.data) == merged, "the merged batches were published again"
        assert Frontier.at(ts + 1) <= snap.upper
        assert multiset(snap.read_rows(ts)) == world.state_at(ts)
