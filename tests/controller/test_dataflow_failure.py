"""A dataflow whose step raises an unexpected error (an engine bug, not a data error).

The runtime fails and its replica with it (shared fate); the controller notices at once,
reconnects — the embedded replica rebuilds its runtimes — and replays. The same dataflow failing
again after the replay is deterministic: its pending and later reads fail promptly with
`CollectionFailed` (naming it and the engine's message) and it is dropped, while every other
collection keeps answering. The engine bug is simulated by an operator that raises: patched
in this process, and — for the maintenance process of the process placement, a fresh
interpreter — by a `sitecustomize` on its `PYTHONPATH`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.controller.proxy import ReplicaProcess, fast_backoff, table_index, until
from tests.runtime.helpers import KV, sqlite_url, unique_url

from twofold.controller import CollectionFailed, Controller, ReplicaUnavailable
from twofold.controller.failures import FailureTracker, failed_closure
from twofold.engine.operator import Delta, NegateOp
from twofold.protocol import (
    BuildDesc,
    DataflowDescription,
    Get,
    GlobalId,
    IndexDesc,
    IndexImport,
    InstanceConfig,
    Negate,
    SinkDesc,
    SourceImport,
    SubscribeSink,
)
from twofold.protocol.errors import DataflowFailure
from twofold.replica import Replica
from twofold.runtime.worker import ComputeWorker
from twofold.storage import open_storage
from twofold.testing.profiles import examples

pytestmark = pytest.mark.timeout(120)

SRC, IDX = GlobalId.user(1), GlobalId.user(2)
BAD_SRC, BAD, BAD_BUILD = GlobalId.user(10), GlobalId.user(11), GlobalId.user(12)
WAIT = 30.0  # far below the 60 s a read waited before; a timeout here means the bug is back


def broken_negate(self: NegateOp, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
    raise RuntimeError("boom in negate")


def bad_index() -> DataflowDescription:
    """An index over `Negate(t)`: every step of it raises."""
    return DataflowDescription(
        "negated", source_imports={BAD_SRC: SourceImport("table/t", KV)},
        objects_to_build=[BuildDesc(BAD_BUILD, Negate(Get(BAD_SRC)))],
        index_exports={BAD: (IndexDesc(BAD_BUILD, [0]), KV)},
    )  # fmt: skip


SITECUSTOMIZE = """
from twofold.engine.operator import NegateOp

def _broken(self, t, inputs):
    raise RuntimeError("boom in negate")

NegateOp.step = _broken
"""


@pytest.fixture
def broken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`NegateOp` raises here and in every Python process started from here."""
    monkeypatch.setattr(NegateOp, "step", broken_negate)
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + ("" if not path else os.pathsep + path))


PLACEMENTS = {"solo": ("one", "threads"), "threads": ("two", "threads"),
              "processes": ("two", "processes")}


@contextlib.asynccontextmanager
async def served(placement: str) -> AsyncIterator[Controller]:
    """A controller over an embedded replica, with a good index `IDX` on table `t`."""
    runtimes, where = PLACEMENTS[placement]
    url = sqlite_url("fail") if where == "processes" else unique_url("fail")
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[k, f"v{k}"] for k in range(50)])
    replica = Replica(url, runtimes, placement=where)  # type: ignore[arg-type]
    try:
        async with Controller({1: replica.connect}, backoff=fast_backoff,
                              config=InstanceConfig(storage=url)) as c:
            await c.create_dataflow(table_index(SRC, IDX))
            await c.wait_for_frontier(IDX, t.upper)
            yield c
    finally:
        await replica.close()
        storage.close()


@pytest.mark.usefixtures("broken")
@pytest.mark.parametrize("placement", list(PLACEMENTS))
async def test_a_dataflow_that_fails_on_replay_fails_its_reads_and_the_rest_serves(
        placement: str) -> None:
    async with served(placement) as c:
        assert len(await c.peek(IDX, timeout=WAIT)) == 50
        desc = await c.create_dataflow(bad_index())
        assert desc.as_of is not None and desc.as_of.time is not None
        pending = asyncio.create_task(c.peek(BAD, timestamp=desc.as_of.time, timeout=WAIT))
        with pytest.raises(CollectionFailed, match=r"negated.*RuntimeError: boom in negate") as e:
            await pending
        assert e.value.id == BAD
        with pytest.raises(CollectionFailed, match="u11"):  # a later read: at once
            await c.peek(BAD, timeout=WAIT)
        with pytest.raises(CollectionFailed, match="u11"):  # as is a query reading it
            await c.create_dataflow(DataflowDescription(
                "reads-bad", index_imports={BAD: IndexImport(IndexDesc(BAD, [0]), KV)},
                objects_to_build=[BuildDesc(GlobalId.user(21), Get(BAD))],
                index_exports={GlobalId.user(20): (IndexDesc(GlobalId.user(21), [0]), KV)}))
        # The rest of the database serves: the good index answers, new dataflows run.
        assert len(await c.peek(IDX, timeout=WAIT)) == 50
        await c.create_dataflow(table_index(GlobalId.user(30), GlobalId.user(31)))
        await c.wait_for_frontier(GlobalId.user(31), c.frontier(IDX))
        assert len(await c.peek(GlobalId.user(31), timeout=WAIT)) == 50


async def test_a_bug_outside_the_engine_step_is_named_after_its_dataflow_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    publish = ComputeWorker._publish

    def broken_publish(self: ComputeWorker, gid: GlobalId, arr: Any) -> None:
        if gid == BAD:
            raise KeyError("boom in publish")
        publish(self, gid, arr)

    monkeypatch.setattr(ComputeWorker, "_publish", broken_publish)
    async with served("threads") as c:
        await c.create_dataflow(bad_index())
        with pytest.raises(CollectionFailed, match=r"negated.*KeyError: 'boom in publish'"):
            await c.peek(BAD, timeout=WAIT)
        assert len(await c.peek(IDX, timeout=WAIT)) == 50


@pytest.mark.usefixtures("broken")
async def test_a_subscribe_of_a_failed_dataflow_ends_with_the_error() -> None:
    async with served("threads") as c:
        sid = c.new_transient_id()
        sub = await c.subscribe(DataflowDescription(
            "sub-negated", source_imports={BAD_SRC: SourceImport("table/t", KV)},
            objects_to_build=[BuildDesc(BAD_BUILD, Negate(Get(BAD_SRC)))],
            sink_exports={sid: SinkDesc(BAD_BUILD, KV, SubscribeSink())}))
        with pytest.raises(CollectionFailed, match="boom in negate"):
            async with asyncio.timeout(WAIT):
                async for _ in sub:
                    pass
        assert len(await c.peek(IDX, timeout=WAIT)) == 50


def test_failure_tracker_reports_only_consecutive_failures_of_one_dataflow() -> None:
    a = DataflowFailure([BAD], "a", "boom")
    b = DataflowFailure([IDX], "b", "bang")
    tr = FailureTracker()
    assert tr.replica_failed(1, a, [1]) is None
    assert tr.replica_failed(1, b, [1]) is None  # another dataflow: the count starts again
    assert tr.replica_failed(1, ConnectionResetError(), [1]) is None  # names none: no change
    got = tr.replica_failed(1, RuntimeError(f"the maintenance runtime failed: {b}"), [1])
    assert got is not None and got.exports == (IDX,) and got.message == "bang"
    assert tr.replica_failed(1, b, [1]) is None  # reported once: it starts afresh


def test_failure_tracker_waits_for_every_replica() -> None:
    a = DataflowFailure([BAD], "a", "boom")
    tr = FailureTracker()
    for _ in range(5):  # replica 2 still serves it: replica 1 keeps being replayed
        assert tr.replica_failed(1, a, [1, 2]) is None
    assert tr.replica_failed(2, a, [1, 2]) is None
    assert tr.replica_failed(2, a, [1, 2]) is a


def test_failed_closure_includes_what_is_computed_from_the_failed_dataflow() -> None:
    f = DataflowFailure([BAD], "negated", "boom")
    u20, u30 = GlobalId.user(20), GlobalId.user(30)
    got = failed_closure(f, {BAD: [], u20: [BAD], u30: [u20], IDX: []})
    assert set(got) == {BAD, u20, u30}
    assert "negated" in got[u30] and "u11" in got[u30] and "boom" in got[BAD]


async def test_a_dataflow_failing_on_one_replica_is_answered_by_the_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Replica 1 runs on threads here, where Negate raises; replica 2's maintenance process is a
    # fresh interpreter where it does not.
    monkeypatch.setattr(NegateOp, "step", broken_negate)
    url = sqlite_url("fail2")
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[k, f"v{k}"] for k in range(50)])
    r1 = Replica(url, "two", placement="threads")
    r2 = Replica(url, "two", placement="processes")
    try:
        async with Controller({1: r1.connect, 2: r2.connect}, backoff=fast_backoff,
                              config=InstanceConfig(storage=url)) as c:
            await c.create_dataflow(table_index(SRC, IDX))
            desc = await c.create_dataflow(bad_index())
            assert desc.as_of is not None and desc.as_of.time is not None
            await c.wait_for_frontier(BAD, t.upper)
            rows = await c.peek(BAD, timeout=WAIT)
            assert sorted(rows) == sorted(([k, f"v{k}"], -1) for k in range(50))
            await until(lambda: c.connections[1].failures >= 2, "replica 1 to fail twice")
            assert len(await c.peek(BAD, timeout=WAIT)) == 50  # still served by replica 2
            assert len(await c.peek(IDX, timeout=WAIT)) == 50
            assert c.failed == {}
    finally:
        await r1.close()
        await r2.close()
        storage.close()


@pytest.mark.usefixtures("broken")
async def test_over_tcp_the_replica_exits_non_zero_and_reads_fail_as_unavailable(
        tmp_path: Path) -> None:
    """`twofold replica` shares its runtime's fate: it exits non-zero. The failure's name does
    not cross the wire, so the controller sees a replica that is gone: a pending read fails with
    `ReplicaUnavailable` after `unavailable_after`, not after its own (longer) timeout."""
    url = sqlite_url("failtcp")
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[k, f"v{k}"] for k in range(50)])
    rp = ReplicaProcess(url, "two", log=tmp_path / "replica.log")
    try:
        await rp.astart(0)
        async with Controller({1: rp.connect}, backoff=fast_backoff, unavailable_after=1.0,
                              config=InstanceConfig(storage=url)) as c:
            await c.create_dataflow(table_index(SRC, IDX))
            await c.wait_for_frontier(IDX, t.upper)
            desc = await c.create_dataflow(bad_index())
            assert desc.as_of is not None and desc.as_of.time is not None
            with pytest.raises(ReplicaUnavailable):
                await c.peek(BAD, timestamp=desc.as_of.time, timeout=WAIT)
        assert rp.proc is not None
        assert await asyncio.to_thread(rp.proc.wait, WAIT) == 1
        assert "boom in negate" in (tmp_path / "replica.log").read_text()
    finally:
        rp.kill()
        storage.close()


FAILURES = {"a": DataflowFailure([BAD], "a", "boom"), "b": DataflowFailure([IDX], "b", "bang"),
            "-": ConnectionResetError("reset")}


@settings(max_examples=examples(200), deadline=None)
@given(events=st.lists(st.tuples(st.sampled_from([1, 2, 3]), st.sampled_from(list(FAILURES))),
                       max_size=40),
       replicas=st.sampled_from([[1], [1, 2], [1, 2, 3]]))
def test_failure_tracker_reports_exactly_when_every_replica_failed_twice_in_a_row(
        events: list[tuple[int, str]], replicas: list[int]) -> None:
    """Model: since the dataflow was last reported, each replica's failures that name a
    dataflow contain this one twice in a row; it is reported at the failure completing that."""
    tr = FailureTracker()
    window: dict[str, int] = {"a": 0, "b": 0}  # index of the first event after the last report
    for i, (r, kind) in enumerate(events):
        if r not in replicas:
            continue
        got = tr.replica_failed(r, FAILURES[kind], replicas)
        expected = False
        if kind != "-":
            def sure(rep: int, kind: str = kind, i: int = i) -> bool:
                named = [k for (q, k) in events[window[kind]:i + 1] if q == rep and k != "-"]
                return any(x == y == kind for x, y in itertools.pairwise(named))
            expected = all(sure(rep) for rep in replicas)
        assert (got is not None) == expected, (i, events[:i + 1])
        if got is not None:
            assert got.exports == FAILURES[kind].exports  # type: ignore[union-attr]
            window[kind] = i + 1


async def test_an_embedded_replica_whose_maintenance_process_died_is_rebuilt() -> None:
    """Not only engine errors: any failure of the embedded replica's endpoint (here SIGKILL of
    its maintenance process) makes the next connection rebuild it, and reads answer again."""
    async with served("processes") as c:
        conn = c.connections[1]
        assert conn.epoch == 1
        rep = _replica_of(c)
        assert rep.maintenance_process is not None and rep.maintenance_process.pid is not None
        os.kill(rep.maintenance_process.pid, signal.SIGKILL)
        await conn.wait_for_epoch(2)
        assert len(await c.peek(IDX, timeout=WAIT)) == 50
        assert c.failed == {}


def _replica_of(c: Controller) -> Replica:
    factory = c._factories[1]
    rep = getattr(factory, "__self__", None)
    assert isinstance(rep, Replica)
    return rep
