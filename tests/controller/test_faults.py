"""Reconnection under injected faults, against real replicas over TCP.

Faults come from `FaultProxy` (connection resets, mid-stream; delays; stalls; refused
connections) and from SIGKILLing a `twofold replica` process and restarting it on its port.
Through all of it the controller must keep its promises (`spec/controller.md`):
- no pending peek is lost or answered twice: every `peek()` call returns exactly once, with
  exactly what storage holds at its timestamp (`table_at`, the fault-free answer), and nothing
  is left pending afterwards;
- subscribes continue without gaps or duplicates: batches are contiguous, and their updates
  accumulate to exactly the table's contents at the final upper;
- the controller never observes a frontier regression (`regression_count == 0`), and never
  fails to apply a response.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from uuid import uuid4

import msgspec

from twofold.controller import Controller, LagWindow, subscribe_dataflow
from twofold.protocol import (
    ComputeCommand,
    ComputeResponse,
    CreateDataflow,
    CreateInstance,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    InitializationComplete,
    InstanceConfig,
    Peek,
    Schedule,
    SourceImport,
    SubscribeBatch,
    SubscribeResponse,
)
from twofold.replica import Replica
from twofold.storage import Table, open_storage
from twofold.transport import ReplicaServer, connect

from .proxy import (
    KV,
    WAIT,
    Audit,
    FaultProxy,
    ReplicaProcess,
    fast_backoff,
    multiset,
    table_at,
    table_index,
    until,
)

SRC, IDX = GlobalId.user(1), GlobalId.user(2)
SUB = GlobalId.transient(1)
_names = itertools.count()


@asynccontextmanager
async def served_replica(
    audit: Audit | None = None,
) -> AsyncIterator[tuple[Table, FaultProxy, Controller]]:
    """An in-process two-runtime replica behind a `ReplicaServer`, a `FaultProxy` in front of
    it, a table `t` with a ticker keeping its upper moving, and a controller connecting through
    the proxy (audited by `audit`, if given)."""
    url = f"memory://ctl-faults-{next(_names)}-{id(object())}"
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[0, "init"]])
    replica = Replica(url, "two")
    server = ReplicaServer(await replica.start())
    await server.start()
    try:
        async with FaultProxy(server.address) as proxy:
            connect = proxy.connect if audit is None else audit.wrap(proxy.connect)
            with storage.ticker(0.02):
                async with Controller({1: connect}, backoff=fast_backoff,
                                      config=InstanceConfig(storage=url)) as c:  # fmt: skip
                    yield t, proxy, c
    finally:
        await server.aclose()
        await replica.close()
        storage.close()


async def write(t: Table, n: int) -> None:
    await asyncio.to_thread(t.insert, [[n % 11, f"v{n}"]])
    if n % 4 == 0:
        await asyncio.to_thread(t.delete, [[(n - 1) % 11, f"v{n - 1}"]])


class Peekers:
    """`callers` concurrent callers, each peeking IDX `per_caller` times at a recent time and
    checking the answer against storage; every call is counted once when it returns."""

    def __init__(self, c: Controller, t: Table) -> None:
        self.c = c
        self.t = t
        self.answered = 0
        self.progress = asyncio.Event()

    async def caller(self, per_caller: int) -> int:
        returned = 0
        for _ in range(per_caller):
            ts = self.c.frontier(IDX).step_back()
            assert ts is not None
            rows = await self.c.peek(IDX, timestamp=ts, timeout=WAIT)
            returned += 1
            self.answered += 1
            self.progress.set()
            assert multiset(rows) == table_at(self.t, ts), ts
        return returned

    async def run(self, callers: int, per_caller: int) -> None:
        done = await asyncio.gather(*(self.caller(per_caller) for _ in range(callers)))
        assert done == [per_caller] * callers

    async def wait_for(self, answered: int) -> None:
        while self.answered < answered:
            self.progress.clear()
            await asyncio.wait_for(self.progress.wait(), WAIT)


def replayed_peeks(audit: Audit) -> int:
    """Peeks sent on more than one connection."""
    seen: dict[object, int] = defaultdict(int)
    for log in audit.logs:
        for uuid in {cmd.uuid for d, cmd in log if d == "sent" and isinstance(cmd, Peek)}:
            seen[uuid] += 1
    return sum(1 for n in seen.values() if n > 1)


def assert_clean(c: Controller) -> None:
    """Nothing pending, nothing regressed, nothing the controller could not apply."""
    assert c.state.regression_count == 0
    assert c.response_errors == 0
    assert not c.state.peeks and not c.deliveries.peeks


async def test_resets_lose_no_peek_and_answer_none_twice() -> None:
    audit = Audit()
    async with served_replica(audit) as (t, proxy, c):
        await c.create_dataflow(table_index(SRC, IDX))
        await c.wait_for_frontier(IDX, t.upper)
        peekers = Peekers(c, t)
        work = asyncio.create_task(peekers.run(callers=8, per_caller=15))
        for n in range(1, 6):
            await write(t, n)
            await peekers.wait_for(20 * n)
            # Mid-workload: some of the eight callers' peeks are in flight right now.
            assert proxy.reset() == 1
            await c.connections[1].wait_for_epoch(n + 1)
        await work
        assert peekers.answered == 8 * 15
        assert c.connections[1].epoch == 6
        assert_clean(c)
    # Not vacuous: some peeks were in flight at a reset and were replayed on the next
    # connection (and maybe answered on both; the controller delivered each once).
    assert replayed_peeks(audit) > 0
    assert audit.violations == []


async def test_delays_stalls_and_refusals_lose_nothing() -> None:
    async with served_replica() as (t, proxy, c):
        await c.create_dataflow(table_index(SRC, IDX))
        await c.wait_for_frontier(IDX, t.upper)
        peekers = Peekers(c, t)
        proxy.delay(0.005)
        await write(t, 1)
        await peekers.run(callers=4, per_caller=5)
        proxy.delay(0.0)
        # A stall: peeks go out and hang; then the connection dies under them and the
        # replica is unreachable for a while; then it comes back.
        proxy.stall(True)
        ts = c.frontier(IDX).step_back()
        assert ts is not None
        stalled = [asyncio.create_task(c.peek(IDX, timestamp=ts)) for _ in range(5)]
        await until(lambda: len(c.state.peeks) == 5, "five peeks pending")
        proxy.refuse(True)
        proxy.reset()
        proxy.stall(False)
        await until(lambda: proxy.accepted >= 3, "reconnection attempts to be refused")
        assert not any(s.done() for s in stalled)
        proxy.refuse(False)
        for s in stalled:
            assert multiset(await s) == table_at(t, ts)
        await write(t, 2)
        await peekers.run(callers=2, per_caller=5)
        assert_clean(c)


async def collect_until(sub: Any, t: Table, batches: list[SubscribeBatch], upper: Frontier,
                        ) -> None:  # fmt: skip
    async for b in sub:
        batches.append(b)
        if upper <= b.upper:
            return


def check_subscribe(batches: list[SubscribeBatch], t: Table) -> None:
    """Contiguous, and the updates accumulate to exactly the table at the last upper."""
    assert batches
    for prev, nxt in itertools.pairwise(batches):
        assert nxt.lower == prev.upper, (prev.lower, prev.upper, nxt.lower, nxt.upper)
    acc: dict[tuple[Any, ...], int] = defaultdict(int)
    for b in batches:
        for time, row, diff in b.updates or []:
            assert b.lower.contains(time) and not b.upper.contains(time)
            acc[tuple(row)] += diff
    last = batches[-1].upper.step_back()
    assert last is not None
    assert {k: v for k, v in acc.items() if v} == table_at(t, last)


def overlaps(audit: Audit) -> int:
    """Received subscribe batches starting below an upper already reached (on this connection
    or an earlier one): the overlaps the controller had to trim."""
    reached: Frontier | None = None
    count = 0
    for log in audit.logs:
        for d, r in log:
            if d != "recv" or not isinstance(r, SubscribeResponse):
                continue
            e = r.event
            if not isinstance(e, SubscribeBatch):
                continue
            if reached is not None and e.lower < reached:
                count += 1
            reached = e.upper if reached is None else reached.join(e.upper)
    return count


async def test_subscribe_continues_across_resets_without_gaps_or_duplicates() -> None:
    audit = Audit()
    async with served_replica(audit) as (t, proxy, c):
        desc = subscribe_dataflow(sink_id=SUB, from_id=SRC, desc=KV,
                                  source_imports={SRC: SourceImport("table/t", KV)})
        batches: list[SubscribeBatch] = []
        sub = await c.subscribe(desc)
        for n in range(1, 7):
            await write(t, n)
            await collect_until(sub, t, batches, t.upper)
            if n % 2 == 0:
                proxy.reset()
                await c.connections[1].wait_for_epoch(n // 2 + 1)
        await write(t, 99)
        await collect_until(sub, t, batches, t.upper)
        check_subscribe(batches, t)
        merger = c.state.collections[SUB].subscribe
        assert merger is not None and merger.gaps == 0
        # Not vacuous: a replayed subscribe restarted behind what an earlier connection had
        # delivered, so there was an overlap to cut.
        assert overlaps(audit) > 0
        assert c.connections[1].epoch == 4
        await sub.aclose()
        assert_clean(c)


async def test_replica_process_sigkilled_and_restarted(tmp_path: Path) -> None:
    """SIGKILL the replica process with peeks in flight and a subscribe running; restart it on
    the same port; everything continues as if nothing happened."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[0, "init"]])
    proc = ReplicaProcess(url, "two", log=tmp_path / "replica.log")
    try:
        await proc.astart(0)
        port = proc.address[1]
        with storage.ticker(0.05):
            async with Controller({1: proc.connect}, backoff=fast_backoff,
                                  read_policy=LagWindow(60_000),
                                  config=InstanceConfig(storage=url)) as c:  # fmt: skip
                await c.create_dataflow(table_index(SRC, IDX))
                await c.wait_for_frontier(IDX, t.upper)
                sub = await c.subscribe(subscribe_dataflow(
                    sink_id=SUB, from_id=SRC, desc=KV,
                    source_imports={SRC: SourceImport("table/t", KV)}))  # fmt: skip
                batches: list[SubscribeBatch] = []
                for n in range(1, 4):
                    await write(t, n)
                await collect_until(sub, t, batches, t.upper)
                await c.wait_for_frontier(IDX, t.upper)
                ts = c.frontier(IDX).step_back()
                assert ts is not None
                # In flight at the kill: peeks at a time the index has not reached yet, which
                # the replica holds pending (the table's ticker passes it within ~0.3 s).
                later = ts + 300
                in_flight = [asyncio.create_task(c.peek(IDX, timestamp=later)) for _ in range(4)]
                await until(lambda: len(c.state.peeks) == 4, "four peeks pending")
                proc.kill()
                # Peeks issued while the replica is dead wait for it.
                dead = [asyncio.create_task(c.peek(IDX, timestamp=ts)) for _ in range(4)]
                for n in range(4, 7):
                    await write(t, n)
                await proc.astart(port)
                assert proc.address[1] == port
                for p in dead:
                    assert multiset(await p) == table_at(t, ts)
                for p in in_flight:
                    assert multiset(await p) == table_at(t, later)
                await write(t, 7)
                await collect_until(sub, t, batches, t.upper)
                check_subscribe(batches, t)
                assert c.connections[1].epoch >= 2
                await sub.aclose()
                assert_clean(c)
    finally:
        proc.kill()
        storage.close()


async def test_a_new_connection_gets_nothing_of_the_previous_iteration() -> None:
    """The controller's epochs are its connections: everything received on a connection must
    belong to the iteration that connection's `Hello` started. Connection A runs an index over
    a ticking table; B supersedes it. B must never see a response naming A's index."""
    url = f"memory://ctl-faults-{next(_names)}-{id(object())}"
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[1, "a"]])
    replica = Replica(url, "two")
    server = ReplicaServer(await replica.start())
    await server.start()
    idx_a, idx_b = GlobalId.user(2), GlobalId.user(3)

    def create(idx: GlobalId) -> list[ComputeCommand]:
        desc = table_index(SRC, idx)
        desc = msgspec.structs.replace(desc, as_of=Frontier.at(0))
        return [CreateDataflow(desc), Schedule(idx)]

    start: list[ComputeCommand] = [CreateInstance(InstanceConfig()), InitializationComplete()]
    try:
        with storage.ticker(0.02):
            a = await connect(*server.address)
            hello: list[ComputeCommand] = [Hello(uuid4())]
            for cmd in [*hello, *start, *create(idx_a)]:
                await a.send(cmd)
            first = await asyncio.wait_for(a.recv(), WAIT)
            assert isinstance(first, Frontiers) and first.id == idx_a
            b = await connect(*server.address)
            seen: list[ComputeResponse] = []
            # Before B's Hello: anything that arrives within a second belongs to A's iteration.
            with contextlib.suppress(TimeoutError):
                r = await asyncio.wait_for(b.recv(), 1.0)
                if r is not None:
                    seen.append(r)
            for cmd in [Hello(uuid4()), *start, *create(idx_b)]:
                await b.send(cmd)
            while not any(isinstance(r, Frontiers) and r.id == idx_b for r in seen):
                r = await asyncio.wait_for(b.recv(), WAIT)
                assert r is not None
                seen.append(r)
            stale = [r for r in seen if getattr(r, "id", None) == idx_a]
            await b.aclose()
            await a.aclose()
            assert stale == [], stale[:3]
    finally:
        await server.aclose()
        await replica.close()
        storage.close()
