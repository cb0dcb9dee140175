"""The process placement keeps the two-runtime invariants (`spec/placement.md`).

- Placement choice: processes by default for two runtimes over shareable storage, threads for
  `memory://`; processes over `memory://` is refused by name.
- **I1/I1c across the boundary** (property): readers (peek dataflows and index peeks at random
  `as_of`s, some dropped at once) race a compaction while the interactive runtime is stalled or
  not. Maintenance, in its own process, learns of interactive's standing hold only through
  messages; the published `since` must never pass the `as_of` of a reader whose create
  interactive has not applied, every answer is the table at its time, and once both runtimes
  catch up the index compacts exactly to the controller's frontier.
- Introspection: both runtimes' peek and step durations and the maintained arrangements' sizes
  reach the logs that the maintenance process maintains.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.runtime.helpers import (
    KV,
    WAIT,
    Driver,
    as_multiset,
    complete_time,
    rows_of,
    sqlite_url,
    table,
)

from twofold.protocol import (
    AllowCompaction,
    BuildDesc,
    CancelPeek,
    CreateDataflow,
    DataflowDescription,
    Frontier,
    Frontiers,
    Get,
    GlobalId,
    IndexDesc,
    IndexImport,
    IndexTarget,
    InstanceConfig,
    LoggingConfig,
    Mfp,
    Peek,
    PeekCanceled,
    PeekRows,
    Schedule,
)
from twofold.replica import Replica
from twofold.replica.assembly import resolve_placement
from twofold.storage import open_storage
from twofold.testing.profiles import examples

pytestmark = pytest.mark.timeout(180)


def test_placement_defaults_follow_the_storage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWOFOLD_PLACEMENT", raising=False)
    assert resolve_placement("auto", "two", "sqlite:///x.db") == "processes"
    assert resolve_placement("auto", "two", "memory://m") == "threads"
    assert resolve_placement("auto", "two", None) == "threads"
    assert resolve_placement("processes", "one", "sqlite:///x.db") == "threads"
    assert resolve_placement("threads", "two", "sqlite:///x.db") == "threads"
    with pytest.raises(ValueError, match=r"'memory://m' lives in this process only"):
        resolve_placement("processes", "two", "memory://m")
    with pytest.raises(ValueError, match="placement must be one of"):
        resolve_placement("fibres", "two", "sqlite:///x.db")  # type: ignore[arg-type]
    monkeypatch.setenv("TWOFOLD_PLACEMENT", "threads")
    assert resolve_placement("auto", "two", "sqlite:///x.db") == "threads"
    monkeypatch.setenv("TWOFOLD_PLACEMENT", "processes")
    assert resolve_placement("auto", "two", "memory://m") == "threads"


@dataclass(frozen=True)
class Reader:
    as_of_index: int
    via_dataflow: bool
    drop_early: bool


readers_st = st.lists(st.builds(Reader, st.integers(0, 3), st.booleans(), st.booleans()),
                      min_size=1, max_size=3)


def _peek_dataflow(idx: GlobalId, src: GlobalId, n: int, as_of: int
                   ) -> tuple[GlobalId, CreateDataflow]:
    mid, export = GlobalId.transient(1000 + 2 * n), GlobalId.transient(1001 + 2 * n)
    return export, CreateDataflow(DataflowDescription(
        f"peek-{export}", index_imports={idx: IndexImport(IndexDesc(src, [0]), KV)},
        objects_to_build=[BuildDesc(mid, Mfp(input=Get(idx)))],
        index_exports={export: (IndexDesc(mid, [0]), KV)},
        as_of=Frontier.at(as_of), until=Frontier.at(as_of + 1)))


async def _i1_race(readers: list[Reader], stall: bool, k: int) -> None:
    url = sqlite_url("i1c")
    storage = open_storage(url)
    t = table(storage, [])
    log: list[tuple[list[Any], int, int]] = []
    times = []
    for rows, diff in [([[1, "a"], [2, "b"]], 1), ([[3, "c"]], 1), ([[1, "a"]], -1),
                       ([[4, "d"], [2, "x"]], 1), ([[3, "c"]], -1)]:
        ts = t.write(rows, diff)
        times.append(ts)
        log.extend((r, ts, diff) for r in rows)
    replica = Replica(url, "two", placement="processes")
    try:
        d = Driver(await replica.start())
        registry = replica.registry
        assert registry is not None
        gate = threading.Event()
        gate.set()
        worker = replica.runtimes["interactive"].worker
        handle = worker.handle

        def stalled(command: Any) -> None:
            gate.wait()
            handle(command)

        worker.handle = stalled  # type: ignore[method-assign]
        await d.start()
        src, idx = await d.index_on_table(t, as_of=times[0])
        await d.frontier_reaches(idx, Frontier.at(times[-1] + 1))
        if stall:
            gate.clear()
        peeks: list[tuple[uuid.UUID, Reader, int]] = []
        for n, r in enumerate(readers):
            x = times[r.as_of_index]
            u = uuid.uuid4()
            if r.via_dataflow:
                made, create = _peek_dataflow(idx, src, n, x)
                await d.send(create, Schedule(made), Peek(u, IndexTarget(made), x))
                if r.drop_early:
                    await d.send(CancelPeek(u), AllowCompaction(made, Frontier.empty()))
            else:
                await d.send(Peek(u, IndexTarget(idx), x))
                if r.drop_early:
                    await d.send(CancelPeek(u))
            peeks.append((u, r, x))
        live = [x for _, r, x in peeks if not r.drop_early]
        target = Frontier.at(min([times[-1] + k, *live]))
        await d.send(AllowCompaction(idx, target))
        floor = Frontier.at(min(x for _, _, x in peeks))

        def published_since() -> Frontier:
            snap = registry.lookup(idx)
            assert snap is not None
            return snap.since

        if stall:
            # Let maintenance apply the compaction and step past a new write while every
            # reader's create is still queued on the stalled interactive runtime: its frontier
            # report follows the step (and the publication precedes the report).
            t.advance_to(Frontier.at((t.upper.time or 0) + 1))
            await d.frontier_reaches(idx, t.upper)
            assert published_since().less_equal(floor), (
                f"compacted to {published_since()} under readers queued at {floor}")
            gate.set()
        await d.until(lambda: all(u in d.check.peek_results for u, _, _ in peeks),
                      "every reader's answer")
        for u, r, x in peeks:
            result = d.check.peek_results[u]
            if isinstance(result, PeekCanceled):
                assert r.drop_early
                continue
            assert isinstance(result, PeekRows), (r, result)
            state = as_multiset((row, diff) for row, time, diff in log if time <= x)
            assert as_multiset(result.rows) == state, (r, x)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while published_since() != target:
            assert loop.time() < deadline, f"since {published_since()} never reached {target}"
            t.advance_to(Frontier.at((t.upper.time or 0) + 1))  # a new publication to observe
            await d.frontier_reaches(idx, t.upper)
        assert published_since() == target
    finally:
        await replica.close()
        storage.close()


@settings(max_examples=examples(8), deadline=None)
@given(readers=readers_st, stall=st.booleans(), k=st.integers(1, 3))
def test_i1c_holds_across_the_process_boundary(readers: list[Reader], stall: bool,
                                               k: int) -> None:
    asyncio.run(asyncio.wait_for(_i1_race(readers, stall, k), 120))


@pytest.mark.parametrize("placement", ["threads", "processes"])
async def test_introspection_logs_both_runtimes_durations_and_sizes(placement: str) -> None:
    url = sqlite_url("intro")
    storage = open_storage(url)
    t = table(storage, [[k, f"v{k}"] for k in range(100)])
    replica = Replica(url, "two", placement=placement)  # type: ignore[arg-type]
    peeks, steps, sizes = (GlobalId.introspection(n) for n in (1, 2, 3))
    try:
        d = Driver(await replica.start())
        await d.start(InstanceConfig(logging=LoggingConfig(
            interval_ms=20, enable_logging=True,
            index_logs={"peek_durations": peeks, "step_durations": steps,
                        "arrangement_sizes": sizes})))
        src, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)
        at = complete_time(t)
        for n in range(3):  # index peeks and peek dataflows: interactive peeks and steps
            await d.peek(idx, at)
            made, create = _peek_dataflow(idx, src, n, at)
            await d.send(create, Schedule(made))
            await d.peek(made, at)
            await d.send(AllowCompaction(made, Frontier.empty()))

        async def log_rows(gid: GlobalId) -> dict[tuple[Any, ...], int]:
            last = d.check.last(gid)
            assert last is not None and last.time is not None
            return as_multiset(rows_of(await d.peek(gid, last.time - 1)))

        async def runtimes_in(gid: GlobalId) -> set[str]:
            return {row[0] for row in await log_rows(gid)}

        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            await d.frontier_reaches(peeks, Frontier.at(0))
            got = (await runtimes_in(peeks), await runtimes_in(steps))
            found = await log_rows(sizes)
            if "interactive" in got[0] and {"maintenance", "interactive"} <= got[1] and any(
                    row[0] == str(idx) and row[1] == 100 for row in found):
                break
            assert loop.time() < deadline, (got, found)
            t.advance_to(Frontier.at((t.upper.time or 0) + 1))
            await d.frontier_reaches(idx, t.upper)
    finally:
        await replica.close()
        storage.close()


async def test_the_iteration_fence_holds_across_the_process_boundary() -> None:
    """After a `Hello`, nothing the maintenance process produced for the previous iteration
    reaches the new one, though it was reporting an index's frontiers all along."""
    url = sqlite_url("fence")
    storage = open_storage(url)
    t = table(storage, [[1, "a"]])
    replica = Replica(url, "two", placement="processes")
    try:
        endpoint = await replica.start()
        d = Driver(endpoint)
        await d.start()
        _, old = await d.index_on_table(t)
        for n in range(5):  # the old index keeps advancing: reports are in flight
            t.insert([[n + 2, "b"]])
            await d.frontier_reaches(old, t.upper)
        t.insert([[99, "c"]])
        # A new iteration on the same endpoint (as a superseding connection's), with a new
        # index under ids the old iteration never used.
        fresh = Driver(endpoint)
        fresh._ids = d._ids
        await fresh.start()
        _, new = await fresh.index_on_table(t)
        seen: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            r = await asyncio.wait_for(endpoint.recv(), max(0.1, deadline - loop.time()))
            seen.append(r)
            if isinstance(r, Frontiers) and r.id == new and t.upper.less_equal(
                    r.write_frontier or Frontier.minimum()):
                break
        stale = [r for r in seen if isinstance(r, Frontiers) and r.id == old]
        assert not stale, f"the previous iteration's reports leaked: {stale[:3]}"
    finally:
        await replica.close()
        storage.close()
