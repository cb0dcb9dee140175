"""The controller against real replicas (in-process `Replica`s and `twofold replica` processes).

What is checked, against storage as the oracle (`table_at`, the table's contents at a time):
- peeks at any readable time answer exactly the table's contents there, with one and two
  runtimes, and no replica report ever looks like a frontier regression;
- read holds: an outstanding peek keeps its target from being compacted past its timestamp
  (checked on the wire by `Audit` at every `AllowCompaction` sent) while writes continue and the
  index's policy compacts as eagerly as it can; a dataflow holds its input at its `as_of`, so
  peeks there keep succeeding; after the dataflow is dropped, the hold is released only once the
  replica has reported its frontiers empty;
- two replicas both answer every peek; each caller gets exactly one answer, the later one is
  counted as ignored;
- two replica processes: one is SIGKILLed mid-workload, every peek is still answered (by the
  other), and the restarted one is rebuilt by replay and its frontiers advance again.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from twofold.controller import Controller, LagWindow, NoCompaction
from twofold.protocol import (
    AllowCompaction,
    Frontier,
    Frontiers,
    GlobalId,
    InstanceConfig,
    PeekResponse,
)
from twofold.replica import Replica
from twofold.storage import Table, open_storage

from .proxy import (
    KV,
    WAIT,
    Audit,
    ReplicaProcess,
    fast_backoff,
    index_on_index,
    multiset,
    table_at,
    table_index,
    until,
)

SRC, IDX, IDX2 = GlobalId.user(1), GlobalId.user(2), GlobalId.user(3)
_names = itertools.count()


def memory_url() -> str:
    return f"memory://ctl-real-{next(_names)}-{id(object())}"


async def writer(table: Table, stop: asyncio.Event, pause: float = 0.01) -> int:
    """Insert and delete rows until `stop`; returns how many writes it made."""
    n = 0
    while not stop.is_set():
        n += 1
        await asyncio.to_thread(table.insert, [[n % 7, f"v{n}"]])
        if n % 3 == 0:
            await asyncio.to_thread(table.delete, [[(n - 1) % 7, f"v{n - 1}"]])
        await asyncio.sleep(pause)  # pacing the workload, not synchronisation
    return n


@pytest.mark.parametrize("runtimes", ["one", "two"])
async def test_peeks_answer_what_storage_holds(runtimes: str) -> None:
    url = memory_url()
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[1, "a"], [2, "b"]])
    replica = Replica(url, runtimes)  # type: ignore[arg-type]
    try:
        with storage.ticker(0.02):
            async with Controller({1: replica.connect}, config=InstanceConfig(storage=url),
                                  read_policy=LagWindow(60_000)) as c:  # fmt: skip
                await c.create_dataflow(table_index(SRC, IDX))
                times = []
                for n in range(3, 8):
                    t.insert([[n, f"x{n}"]])
                    if n % 2:
                        t.delete([[n - 1, f"x{n - 1}"]])
                    upper = t.upper
                    await c.wait_for_frontier(IDX, upper)
                    times.append(upper.time - 1)  # type: ignore[operator]
                for ts in times:
                    assert multiset(await c.peek(IDX, timestamp=ts)) == table_at(t, ts)
                    key = next(iter(table_at(t, ts)))[0]
                    got = await c.peek(IDX, timestamp=ts, literal_constraints=[[key]])
                    assert multiset(got) == {r: d for r, d in table_at(t, ts).items()
                                             if r[0] == key}  # fmt: skip
                assert c.state.regression_count == 0
                assert not c.state.peeks and not c.deliveries.peeks
    finally:
        await replica.close()
        storage.close()


async def test_outstanding_peeks_hold_back_compaction() -> None:
    """Peeks at future times are outstanding until the index catches up; the index compacts as
    eagerly as possible (`LagWindow(0)`), yet no `AllowCompaction` passes an outstanding peek
    and every peek answers what storage holds at its time."""
    url = memory_url()
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[0, "init"]])
    replica = Replica(url, "two")
    audit = Audit()
    stop = asyncio.Event()
    try:
        with storage.ticker(0.02):
            async with Controller({1: audit.wrap(replica.connect)},
                                  config=InstanceConfig(storage=url)) as c:  # fmt: skip
                await c.create_dataflow(table_index(SRC, IDX), read_policy=LagWindow(0))
                await c.wait_for_frontier(IDX, t.upper)
                writes = asyncio.create_task(writer(t, stop))
                base = t.upper.time
                assert base is not None
                stamps = [base + 15 * n for n in range(1, 21)]
                results = await asyncio.gather(*(c.peek(IDX, timestamp=s) for s in stamps))
                stop.set()
                assert await writes > 0
                for ts, rows in zip(stamps, results, strict=True):
                    assert multiset(rows) == table_at(t, ts), ts
                assert audit.violations == []
                # Not vacuous: the index did compact past peeks that had been answered.
                compacted = [cmd.frontier.time for d, cmd in audit.logs[0]
                             if d == "sent" and isinstance(cmd, AllowCompaction)
                             and cmd.id == IDX and cmd.frontier.time is not None]  # fmt: skip
                assert compacted and max(compacted) > stamps[0]
                assert c.state.regression_count == 0
    finally:
        stop.set()
        await replica.close()
        storage.close()


async def test_dataflow_holds_its_input_until_dropped_and_reported_gone() -> None:
    url = memory_url()
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[1, "a"]])
    replica = Replica(url, "two")
    audit = Audit()
    stop = asyncio.Event()
    try:
        with storage.ticker(0.02):
            async with Controller({1: audit.wrap(replica.connect)},
                                  config=InstanceConfig(storage=url)) as c:  # fmt: skip
                await c.create_dataflow(table_index(SRC, IDX), read_policy=LagWindow(0))
                await c.wait_for_frontier(IDX, t.upper)
                dep = await c.create_dataflow(index_on_index(SRC, IDX, IDX2),
                                              read_policy=NoCompaction())  # fmt: skip
                assert dep.as_of is not None and dep.as_of.time is not None
                held = dep.as_of.time
                writes = asyncio.create_task(writer(t, stop, pause=0.02))
                # Writes continue and IDX's own policy would compact right up to its frontier;
                # the dependent dataflow's hold keeps `held` readable.
                for _ in range(3):
                    target = t.upper
                    await c.wait_for_frontier(IDX, target)
                    assert c.since(IDX) == Frontier.at(held)
                    assert multiset(await c.peek(IDX, timestamp=held)) == table_at(t, held)
                    assert multiset(await c.peek(IDX2, timestamp=held)) == table_at(t, held)
                await c.drop(IDX2)
                await until(lambda: IDX2 not in c.state.collections, "IDX2 to be forgotten")
                await until(lambda: Frontier.at(held) < c.since(IDX), "IDX's since to advance")
                stop.set()
                await writes
                assert c.state.regression_count == 0
    finally:
        stop.set()
        await replica.close()
        storage.close()
    # On the wire: the first compaction of IDX past the hold comes after the replica reported
    # every frontier of IDX2 empty.
    log = audit.logs[-1]
    first_past = next(n for n, (d, cmd) in enumerate(log)
                      if d == "sent" and isinstance(cmd, AllowCompaction) and cmd.id == IDX
                      and Frontier.at(held) < cmd.frontier)  # fmt: skip
    reported = [r for d, r in log[:first_past] if d == "recv" and isinstance(r, Frontiers)
                and r.id == IDX2]  # fmt: skip
    for kind in ("write_frontier", "input_frontier", "output_frontier"):
        assert any((f := getattr(r, kind)) is not None and f.is_empty for r in reported), kind
    assert audit.violations == []


async def test_two_replica_processes_one_killed_and_rebuilt(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[1, "a"], [2, "b"]])
    one = ReplicaProcess(url, "two", log=tmp_path / "r1.log")
    two = ReplicaProcess(url, "two", log=tmp_path / "r2.log")
    stop = asyncio.Event()
    try:
        await asyncio.gather(one.astart(0), two.astart(0))
        with storage.ticker(0.05):
            async with Controller({1: one.connect, 2: two.connect}, backoff=fast_backoff,
                                  config=InstanceConfig(storage=url)) as c:  # fmt: skip
                await c.create_dataflow(table_index(SRC, IDX))
                await c.wait_for_frontier(IDX, t.upper)
                writes = asyncio.create_task(writer(t, stop, pause=0.03))

                async def peeks(n: int) -> None:
                    for _ in range(n):
                        ts = c.frontier(IDX).step_back()
                        assert ts is not None
                        assert multiset(await c.peek(IDX, timestamp=ts, timeout=WAIT)) \
                            == table_at(t, ts)

                await peeks(10)
                two.kill()
                await peeks(30)  # all answered by replica 1
                assert c.connections[1].epoch == 1
                restarted_at = t.upper
                await two.astart()
                await c.connections[2].wait_for_epoch(2)

                def caught_up() -> bool:
                    f = c.state.collections[IDX].frontiers.replica(2)
                    return f is not None and restarted_at < f.write

                await until(caught_up, "the rebuilt replica's frontier to advance")
                await peeks(10)
                stop.set()
                await writes
                assert c.state.regression_count == 0
                assert c.response_errors == 0
    finally:
        stop.set()
        one.kill()
        two.kill()
        storage.close()


async def test_two_replicas_answer_every_peek_and_each_is_delivered_once() -> None:
    """Every peek goes to both replicas and both answer it; the caller gets the first answer
    once, and the controller counts every later one as ignored."""
    url = memory_url()
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[k, f"v{k}"] for k in range(20)])
    replicas = [Replica(url, "two"), Replica(url, "one")]
    audit = Audit()
    try:
        with storage.ticker(0.02):
            async with Controller({n: audit.wrap(r.connect) for n, r in enumerate(replicas, 1)},
                                  config=InstanceConfig(storage=url)) as c:  # fmt: skip
                await c.create_dataflow(table_index(SRC, IDX))
                await c.wait_for_frontier(IDX, t.upper)
                ts = c.frontier(IDX).step_back()
                assert ts is not None
                got = await asyncio.gather(*(c.peek(IDX, timestamp=ts, literal_constraints=[[k]])
                                             for k in range(20)))  # fmt: skip
                for k, rows in enumerate(got):
                    assert multiset(rows) == {(k, f"v{k}"): 1}

                def answers() -> int:
                    return sum(1 for log in audit.logs for d, r in log
                               if d == "recv" and isinstance(r, PeekResponse))  # fmt: skip

                # Both replicas answer each peek (unless the CancelPeek overtook the slower one's
                # work, which it may: then that one answers `PeekCanceled`, still an answer).
                await until(lambda: answers() == 40, "both replicas to answer all 20 peeks")
                assert c.state.ignored_peek_responses == 20
                assert c.state.regression_count == 0
                assert not c.state.peeks and not c.deliveries.peeks
    finally:
        for r in replicas:
            await r.close()
        storage.close()
