"""An idle runtime skips steps that would change nothing (`ComputeWorker.skip_idle_step`).

The maintenance process steps every poll interval (5 ms) while it has shards to poll, and idle
each step was ~0.3 ms of CPU (cold caches after each wait), competing with the front for the
cores. A step is skipped only when the last one changed nothing, nothing arrived since (a
command, a waker), nothing is pending or due, and the storage's change token says no commit
ended since the last step's polls. These tests pin each of those conditions, and a property
checks that a skipping worker publishes exactly what an always-stepping one does, after every
poll, under random writes by this handle and by another.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings
from tests.runtime.helpers import KV

from twofold.engine import ArrangementSnapshot
from twofold.protocol import (
    AllowCompaction,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    GlobalId,
    Hello,
    IndexDesc,
    IndexTarget,
    InitializationComplete,
    InstanceConfig,
    LoggingConfig,
    MaterializedViewSink,
    Peek,
    Schedule,
    SinkDesc,
    SourceImport,
)
from twofold.runtime import worker as worker_module
from twofold.runtime.registry import PublicationRegistry
from twofold.runtime.worker import ComputeWorker
from twofold.storage import Storage, Table, open_storage
from twofold.testing.profiles import examples

SRC, IDX = GlobalId.user(1), GlobalId.user(2)


def _index(t: Table, as_of: int) -> CreateDataflow:
    return CreateDataflow(DataflowDescription(
        "idx", source_imports={SRC: SourceImport(t.shard.shard_id, KV)},
        index_exports={IDX: (IndexDesc(SRC, [0]), KV)}, as_of=Frontier.at(as_of)))


def _maintenance(storage: Storage, t: Table, as_of: int, *,
                 config: InstanceConfig | None = None,
                 ) -> tuple[ComputeWorker, PublicationRegistry[ArrangementSnapshot]]:
    registry: PublicationRegistry[ArrangementSnapshot] = PublicationRegistry()
    w = ComputeWorker("maintenance", open_storage=lambda _url: storage, registry=registry)
    for command in (Hello(uuid.uuid4()), CreateInstance(config or InstanceConfig()),
                    InitializationComplete(), _index(t, as_of), Schedule(IDX)):
        w.handle(command)
    return w, registry


def _settle(w: ComputeWorker) -> None:
    """Step until a step changes nothing (the skip's precondition)."""
    for _ in range(20):
        w.step()
        w.take_responses()
        w.maintain()
        if w.skip_idle_step():
            return
    raise AssertionError("the worker never settled")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[str, Storage, Table, int]]:
    url = f"sqlite:///{tmp_path}/idle.db"
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    ts = t.insert([[1, "a"], [2, "b"]])
    yield url, storage, t, ts
    storage.close()


def test_an_idle_worker_skips_and_polls_on_schedule(db: tuple[str, Storage, Table, int]) -> None:
    _, storage, t, ts = db
    w, _ = _maintenance(storage, t, ts)
    try:
        _settle(w)
        polled = w.polled_at
        assert w.skip_idle_step()  # still nothing: skipped again
        assert w.polled_at > polled  # and it counts as the poll the next wait is due from
        timeout = w.wait_timeout()
        assert timeout is not None and timeout > 0
    finally:
        w.shutdown()


@pytest.mark.parametrize("writer", ["another handle", "this handle"])
def test_a_commit_ends_the_skipping(db: tuple[str, Storage, Table, int], writer: str) -> None:
    url, storage, t, ts = db
    w, registry = _maintenance(storage, t, ts)
    other = open_storage(url) if writer == "another handle" else storage
    try:
        _settle(w)
        ts2 = other.table("t").insert([[3, "c"]])
        assert not w.skip_idle_step()
        w.step()
        snap = registry.lookup(IDX)
        assert snap is not None
        assert Frontier.at(ts2 + 1).less_equal(snap.upper)
        assert sorted(r for r, _ in snap.read_rows(ts2)) == [[1, "a"], [2, "b"], [3, "c"]]
    finally:
        w.shutdown()
        if other is not storage:
            other.close()


def test_a_command_or_a_hold_ends_the_skipping(db: tuple[str, Storage, Table, int]) -> None:
    _, storage, t, ts = db
    w, registry = _maintenance(storage, t, ts)
    try:
        _settle(w)
        w.handle(AllowCompaction(IDX, Frontier.at(ts)))
        assert not w.skip_idle_step()
        _settle(w)
        registry.apply_standing_hold(IDX, Frontier.at(ts))  # wakes the holder: re-check
        assert not w.skip_idle_step()
    finally:
        w.shutdown()


def test_a_pending_peek_is_retried(db: tuple[str, Storage, Table, int]) -> None:
    _, storage, t, ts = db
    solo = ComputeWorker("solo", open_storage=lambda _url: storage)
    try:
        for command in (Hello(uuid.uuid4()), CreateInstance(InstanceConfig()),
                        InitializationComplete(), _index(t, ts), Schedule(IDX)):
            solo.handle(command)
        _settle(solo)
        solo.handle(Peek(uuid.uuid4(), IndexTarget(IDX), ts + 1_000_000))  # waits for upper
        solo.step()
        assert len(solo.peeks)
        assert not solo.skip_idle_step()
    finally:
        solo.shutdown()


def test_introspection_still_updates(db: tuple[str, Storage, Table, int]) -> None:
    _, storage, t, ts = db
    logging = LoggingConfig(interval_ms=50, enable_logging=True,
                            index_logs={"step_durations": GlobalId.introspection(1)})
    w, _ = _maintenance(storage, t, ts, config=InstanceConfig(logging=logging))
    try:
        _settle(w)
        assert w.introspection is not None
        w.introspection._next = 0.0  # due now
        assert not w.skip_idle_step()
    finally:
        w.shutdown()


def test_a_materialized_view_never_skips(db: tuple[str, Storage, Table, int]) -> None:
    _, storage, t, ts = db
    out = storage.create_table("mv", KV)
    w = ComputeWorker("maintenance", open_storage=lambda _url: storage,
                      registry=PublicationRegistry())
    try:
        for command in (
            Hello(uuid.uuid4()), CreateInstance(InstanceConfig()), InitializationComplete(),
            CreateDataflow(DataflowDescription(
                "mv", source_imports={SRC: SourceImport(t.shard.shard_id, KV)},
                sink_exports={GlobalId.user(9): SinkDesc(
                    SRC, KV, MaterializedViewSink(out.shard.shard_id))},
                as_of=Frontier.at(ts))),
            Schedule(GlobalId.user(9)),
        ):
            w.handle(command)
        for _ in range(5):
            w.step()
            w.maintain()
            assert not w.skip_idle_step()  # its writes may retry: it polls as before
    finally:
        w.shutdown()


def test_skipping_is_bounded_in_time(db: tuple[str, Storage, Table, int],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _, storage, t, ts = db
    w, _ = _maintenance(storage, t, ts)
    try:
        _settle(w)
        monkeypatch.setattr(worker_module, "IDLE_SKIP_MAX", 0.0)
        assert not w.skip_idle_step()
    finally:
        w.shutdown()


def test_storage_without_a_change_token_never_skips() -> None:
    storage = open_storage(f"memory://idle-{uuid.uuid4().hex}")
    t = storage.create_table("t", KV)
    ts = t.insert([[1, "a"]])
    w, _ = _maintenance(storage, t, ts)
    try:
        for _ in range(5):
            w.step()
            w.maintain()
            assert not w.skip_idle_step()
    finally:
        w.shutdown()
        storage.close()


OPS = st.lists(st.one_of(
    st.tuples(st.sampled_from(["other", "own"]), st.integers(0, 5)),
    st.just(("poll", 0)),
), max_size=25)


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_skipping_worker_publishes_what_a_stepping_one_does(
        tmp_path: Path, ops: list[tuple[str, int]]) -> None:
    url = f"sqlite:///{tmp_path}/prop-{uuid.uuid4().hex}.db"
    writer = open_storage(url)
    t = writer.create_table("t", KV)
    ts = t.insert([[0, "x"]])
    mine, theirs = open_storage(url), open_storage(url)
    skipper, skipped_reg = _maintenance(mine, mine.table("t"), ts)
    stepper, stepped_reg = _maintenance(theirs, theirs.table("t"), ts)
    try:
        for op, k in [*ops, ("poll", 0)]:
            if op != "poll":
                # Another process's commit (another connection), or one of the skipper's
                # own handle (which its connection's data_version does not count).
                (writer if op == "other" else mine).table("t").insert([[k, str(k)]])
                continue
            # One poll each: the skipper steps only when it cannot prove the step idle.
            if not skipper.skip_idle_step():
                skipper.step()
                skipper.maintain()
            stepper.step()
            stepper.maintain()
            a, b = skipped_reg.lookup(IDX), stepped_reg.lookup(IDX)
            assert a is not None and b is not None
            assert a.upper == b.upper
            last = b.upper.step_back()
            assert last is not None
            assert sorted(a.read_rows(last)) == sorted(b.read_rows(last))
    finally:
        skipper.shutdown()
        stepper.shutdown()
        for s in (writer, mine, theirs):
            s.close()
