"""The async Controller against fake in-process replicas: peeks, reconnection and replay under
new epochs, several replicas, failure injection, subscribes and copy-tos, and shutdown."""

from __future__ import annotations

import asyncio
import itertools
from functools import partial

import pytest

from twofold.client import ComputeClient
from twofold.controller.backoff import Backoff
from twofold.controller.controller import Controller
from twofold.controller.dataflows import copy_to_dataflow, subscribe_dataflow
from twofold.controller.errors import (
    ControllerClosed,
    PeekFailed,
    PeekTimeout,
    SinceViolation,
    SubscribeFailed,
    UnknownCollection,
)
from twofold.protocol import (
    AllowCompaction,
    CancelPeek,
    Constant,
    CreateDataflow,
    DecodeError,
    Frontier,
    GlobalId,
    Hello,
    IndexDesc,
    IndexImport,
    InitializationComplete,
    Peek,
    PeekError,
    PeekResponse,
    PeekRows,
    SubscribeBatch,
    SubscribeResponse,
)

from .fakes import FakeReplica
from .helpers import DESC, index_dataflow

U1 = GlobalId.user(1)
ROWS = [([1, 10], 1), ([2, 20], 1)]


def created_any(fake: FakeReplica) -> bool:
    return any(isinstance(x, CreateDataflow) for x in fake.session.commands)


def fast() -> Backoff:
    return Backoff(initial=0.0, cap=0.0)


async def no_sleep(_delay: float) -> None:
    await asyncio.sleep(0)


def controller(*replicas: FakeReplica, **kw: object) -> Controller:
    kw.setdefault("backoff", fast)
    kw.setdefault("sleep", no_sleep)
    return Controller({i: r.connect for i, r in enumerate(replicas, 1)}, **kw)  # type: ignore[arg-type]


async def test_create_wait_and_peek() -> None:
    fake = FakeReplica({U1: ROWS}, write_frontier=10)
    async with controller(fake) as c:
        desc = await c.create_dataflow(index_dataflow(U1, as_of=0))
        assert desc.as_of == Frontier.at(0)
        await c.wait_for_frontier(U1, Frontier.at(10))
        assert c.frontier(U1) == Frontier.at(10)
        assert await c.peek(U1) == ROWS
        assert fake.session.peeks()[-1].timestamp == 9  # the latest readable time
        assert await c.peek(U1, timestamp=3) == ROWS
        await fake.until(lambda: any(isinstance(x, CancelPeek) for x in fake.session.commands))
    await fake.stop()


async def test_pending_peek_survives_reconnect_and_is_answered_once() -> None:
    fake = FakeReplica({U1: ROWS}, answer_peeks=False)
    async with controller(fake) as c:
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        peek = asyncio.create_task(c.peek(U1, timestamp=5))
        await fake.until(lambda: bool(fake.session.pending))
        first = fake.session
        conn = c.connections[1]
        assert conn.epoch == 1
        fake.kill(ConnectionResetError("reset by fake"))
        await fake.until(lambda: len(fake.sessions) == 2 and bool(fake.session.pending))
        second = fake.session
        assert conn.epoch == 2
        # Replay: a fresh Hello, the dataflow, the pending peek, then InitializationComplete.
        assert isinstance(second.commands[0], Hello) and second.nonce != first.nonce
        types = [type(x) for x in second.commands]
        assert types.index(CreateDataflow) < types.index(Peek) < types.index(InitializationComplete)
        # A late answer from the old epoch is discarded, not delivered.
        (uuid,) = second.pending
        c.handle_response(1, 1, PeekResponse(uuid=uuid, result=PeekError(message="stale")))
        assert c.stale_responses == 1 and not peek.done()
        fake.answer_pending()
        assert await peek == ROWS
        # A second answer (e.g. the same replica again) is ignored.
        c.handle_response(1, 2, PeekResponse(uuid=uuid, result=PeekRows(rows=[])))
        assert c.state.ignored_peek_responses == 1
        await fake.until(lambda: any(isinstance(x, CancelPeek) for x in second.commands))
    await fake.stop()


async def test_two_replicas_one_killed_mid_workload() -> None:
    a = FakeReplica({U1: ROWS})
    b = FakeReplica({U1: ROWS})
    async with controller(a, b) as c:
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        await c.wait_for_frontier(U1, Frontier.at(10))
        results = []
        for i in range(40):
            if i == 10:
                a.refuse = 3  # stays down for a few attempts while b serves
                a.kill(ConnectionResetError("killed"))
            results.append(await c.peek(U1, timeout=5))
        assert results == [ROWS] * 40
        # The killed replica is rebuilt by replay under a new epoch.
        await c.connections[1].wait_for_epoch(2)
        await a.until(
            lambda: len(a.sessions) == 2 and InitializationComplete() in a.session.commands
        )
        replay = a.session.commands
        assert isinstance(replay[0], Hello)
        assert any(isinstance(x, CreateDataflow) and U1 in x.dataflow.index_exports for x in replay)
        assert a.connects == 5  # first, three refused, then the rebuild
        assert c.connections[1].failures == 4
        assert await c.peek(U1) == ROWS
    await a.stop()
    await b.stop()


async def test_backoff_grows_and_is_capped() -> None:
    delays: list[float] = []

    async def record(d: float) -> None:
        delays.append(d)
        await asyncio.sleep(0)

    fake = FakeReplica()
    fake.refuse = 4
    async with controller(fake, backoff=lambda: Backoff(0.1, 2.0, 0.3), sleep=record) as c:
        await c.connections[1].wait_for_epoch(1)
        assert delays == [0.1, 0.2, 0.3, 0.3]
        assert isinstance(c.connections[1].last_error, ConnectionRefusedError)
    await fake.stop()


def test_backoff_policy() -> None:
    b = Backoff(1.0, 3.0, 5.0)
    assert [b.next_delay() for _ in range(4)] == [1.0, 3.0, 5.0, 5.0]
    b.reset()
    assert b.next_delay() == 1.0
    with pytest.raises(ValueError):
        Backoff(factor=0.5)


@pytest.mark.parametrize(
    "exc", [None, DecodeError("malformed frame"), ConnectionResetError("reset")],
    ids=["closed", "decode-error", "reset"],
)
async def test_any_failure_reconnects(exc: BaseException | None) -> None:
    fake = FakeReplica({U1: ROWS})
    async with controller(fake) as c:
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        await fake.until(lambda: any(isinstance(x, CreateDataflow) for x in fake.session.commands))
        fake.kill(exc)
        await c.connections[1].wait_for_epoch(2)
        assert c.connections[1].failures == 1
        assert await c.peek(U1) == ROWS
    await fake.stop()


async def test_connect_timeout_and_raising_factory() -> None:
    fake = FakeReplica({U1: ROWS})
    attempts = 0
    never = asyncio.Event()

    async def flaky() -> ComputeClient:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await never.wait()  # hangs: the connect timeout ends it
        if attempts == 2:
            raise RuntimeError("factory bug")
        return await fake.connect()

    async with Controller({1: flaky}, backoff=fast, sleep=no_sleep, connect_timeout=0.01) as c:
        await c.connections[1].wait_for_epoch(1)
        assert attempts == 3 and c.connections[1].failures == 2
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        assert await c.peek(U1) == ROWS
    await fake.stop()


async def test_peek_timeout_cancels_and_releases() -> None:
    fake = FakeReplica({U1: ROWS}, answer_peeks=False)
    async with controller(fake) as c:
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        with pytest.raises(PeekTimeout):
            await c.peek(U1, timestamp=2, timeout=0.01)
        assert c.state.peeks == {}
        await fake.until(lambda: any(isinstance(x, CancelPeek) for x in fake.session.commands))
        assert fake.session.pending == {}  # the fake answered PeekCanceled; it is ignored
    await fake.stop()


async def test_peek_error_and_since_violation() -> None:
    fake = FakeReplica(answer_peeks=False)
    async with controller(fake) as c:
        await c.create_dataflow(index_dataflow(U1, as_of=5))
        with pytest.raises(SinceViolation, match="u1 at time 4"):
            await c.peek(U1, timestamp=4)
        peek = asyncio.create_task(c.peek(U1, timestamp=5))
        await fake.until(lambda: bool(fake.session.pending))
        (uuid,) = fake.session.pending
        fake.session.send(PeekResponse(uuid=uuid, result=PeekError(message="division by zero")))
        with pytest.raises(PeekFailed, match="division by zero"):
            await peek
    await fake.stop()


async def test_peek_query_builds_peeks_and_drops_a_peek_dataflow() -> None:
    fake = FakeReplica()
    async with controller(fake) as c:
        rows = await c.peek_query(Constant(rows=ROWS), DESC, timestamp=4)
        assert rows == ROWS
        created = [x for x in fake.session.commands if isinstance(x, CreateDataflow)]
        assert len(created) == 1 and created[0].dataflow.is_peek_dataflow()
        (index,) = created[0].dataflow.index_exports
        await fake.until(lambda: AllowCompaction(id=index, frontier=Frontier.empty())
                         in fake.session.commands)
        # Cleanup follows the replica's empty frontiers: nothing is left behind.
        await fake.until(lambda: index not in c.state.collections)
    await fake.stop()


async def test_subscribe_is_contiguous_across_reconnect() -> None:
    fake = FakeReplica()
    async with controller(fake) as c:
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        t = c.new_transient_id()
        imp = {U1: IndexImport(desc=IndexDesc(on_id=U1, key=[0]), relation=DESC)}
        sub = await c.subscribe(subscribe_dataflow(sink_id=t, from_id=U1, desc=DESC,
                                                   index_imports=imp))
        await fake.until(lambda: any(isinstance(x, CreateDataflow) and t in x.dataflow.sink_exports
                                     for x in fake.session.commands))
        at = Frontier.at
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(0), upper=at(3), updates=[(0, [1, 1], 1), (2, [2, 2], 1)])))
        b1 = await anext(sub)
        assert (b1.lower, b1.upper, b1.updates) == (at(0), at(3), [(0, [1, 1], 1), (2, [2, 2], 1)])
        await fake.until(lambda: AllowCompaction(id=t, frontier=at(2)) in fake.session.commands)
        fake.kill(ConnectionResetError("reset"))
        await fake.until(lambda: len(fake.sessions) == 2 and InitializationComplete()
                         in fake.session.commands)
        (replayed,) = [x for x in fake.session.commands
                       if isinstance(x, CreateDataflow) and t in x.dataflow.sink_exports]
        assert replayed.dataflow.as_of == at(2)  # one step behind what was delivered
        # The replayed subscribe restarts with its snapshot at 2, then new updates.
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(0), upper=at(5),
            updates=[(2, [1, 1], 1), (2, [2, 2], 1), (4, [3, 3], 1)])))
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(5), upper=Frontier.empty(), updates=[])))
        rest = [b async for b in sub]
        assert [(b.lower, b.upper, b.updates) for b in rest] == [
            (at(3), at(5), [(4, [3, 3], 1)]), (at(5), Frontier.empty(), []),
        ]
    await fake.stop()


async def test_subscribe_error_raises() -> None:
    fake = FakeReplica()
    async with controller(fake) as c:
        t = c.new_transient_id()
        d = subscribe_dataflow(sink_id=t, from_id=t, desc=DESC, as_of=Frontier.at(0))
        sub = await c.subscribe(d)
        await fake.until(lambda: len(fake.session.commands) >= 4)
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=Frontier.at(0), upper=Frontier.at(1), error="result too large")))
        with pytest.raises(SubscribeFailed, match="result too large"):
            await anext(sub)
    await fake.stop()


async def test_copy_to_delivers_first_result() -> None:
    fake = FakeReplica({U1: ROWS})
    async with controller(fake) as c:
        t = c.new_transient_id()
        n = await c.copy_to(copy_to_dataflow(sink_id=t, from_id=t, desc=DESC, path="/tmp/x.csv",
                                             format="csv", timestamp=0))
        assert n == 1
        assert t not in c.state.collections
    await fake.stop()


async def test_close_cancels_tasks_and_fails_waiters() -> None:
    fake = FakeReplica(answer_peeks=False)
    c = controller(fake)
    await c.start()
    await c.create_dataflow(index_dataflow(U1, as_of=0))
    peek = asyncio.create_task(c.peek(U1, timestamp=1))
    frontier = c.wait_for_frontier(U1, Frontier.at(100))
    await fake.until(lambda: bool(fake.session.pending))
    tasks = list(c._tasks.values())
    await c.close()
    assert all(t.done() for t in tasks)
    with pytest.raises(ControllerClosed):
        await peek
    with pytest.raises(ControllerClosed):
        await frontier
    with pytest.raises(ControllerClosed):
        await c.peek(U1)
    await c.close()  # idempotent
    await fake.stop()


async def test_frontier_waiters_fail_when_the_collection_is_forgotten() -> None:
    # With no replica to report, a drop forgets the collection at once: the frontier will never
    # be reported, so the waiter must not hang.
    async with Controller({}) as c:
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        waiter = c.wait_for_frontier(U1, Frontier.at(50))
        await c.drop(U1)
        with pytest.raises(UnknownCollection):
            await waiter


async def test_subscribe_deduplicates_across_replicas() -> None:
    a, b = FakeReplica(), FakeReplica()
    async with controller(a, b) as c:
        t = c.new_transient_id()
        sub = await c.subscribe(subscribe_dataflow(sink_id=t, from_id=t, desc=DESC,
                                                   as_of=Frontier.at(0)))
        for r in (a, b):
            await r.until(partial(created_any, r))
        at = Frontier.at
        # Both replicas produce the same stream with different batch boundaries.
        a.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(0), upper=at(2), updates=[(0, [0], 1), (1, [1], 1)])))
        b.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(0), upper=at(3), updates=[(0, [0], 1), (1, [1], 1), (2, [2], 1)])))
        a.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(2), upper=Frontier.empty(), updates=[(2, [2], 1), (3, [3], 1)])))
        b.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(3), upper=Frontier.empty(), updates=[(3, [3], 1)])))
        got = [b async for b in sub]
        # Batch boundaries depend on which replica's batch arrives first; the stream is always
        # contiguous from 0 to the end, and every update is delivered once.
        assert got[0].lower == at(0) and got[-1].upper == Frontier.empty()
        assert all(x.upper == y.lower for x, y in itertools.pairwise(got))
        assert [u for x in got for u in x.updates or []] == [
            (0, [0], 1), (1, [1], 1), (2, [2], 1), (3, [3], 1),
        ]
    await a.stop()
    await b.stop()


async def test_commands_during_an_outage_arrive_by_replay_not_by_queue() -> None:
    sleeping, gate = asyncio.Event(), asyncio.Event()

    async def gated(_delay: float) -> None:
        sleeping.set()
        await gate.wait()

    fake = FakeReplica()
    async with controller(fake, sleep=gated) as c:
        conn = c.connections[1]
        await conn.wait_for_epoch(1)
        fake.kill(ConnectionResetError("outage"))
        await sleeping.wait()  # the connection task is in its backoff
        assert not conn.connected
        ids = [GlobalId.user(n) for n in range(1, 31)]
        for i in ids:
            await c.create_dataflow(index_dataflow(i, as_of=0))
        assert len(conn._queue) == 0  # nothing accumulates while disconnected
        gate.set()
        await conn.wait_for_epoch(2)
        await fake.until(lambda: InitializationComplete() in fake.session.commands)
        created = [e for x in fake.session.commands if isinstance(x, CreateDataflow)
                   for e in x.dataflow.index_exports]
        assert created == ids
    await fake.stop()


async def test_close_right_after_start_never_loses_the_cancellation() -> None:
    # asyncio.wait_for (3.11) can swallow a cancellation that races with its inner future's
    # completion; a connection task that missed its cancel would make close() hang forever.
    for attempt in range(50):
        fake = FakeReplica()
        c = controller(fake)
        await c.start()
        for _ in range(attempt % 4):
            await asyncio.sleep(0)  # vary the point where close() lands (not synchronisation)
        await c.close()
        await fake.stop()
