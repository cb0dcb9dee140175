"""RuntimeClient: commands reach the worker thread in order, responses come back in order,
recv is cancel-safe, and a worker error ends the runtime (shared fate)."""

from __future__ import annotations

import asyncio
import random
import threading
import uuid

import pytest

from twofold.protocol import (
    CancelPeek,
    ComputeCommand,
    ComputeResponse,
    Hello,
    PeekCanceled,
    PeekResponse,
    Status,
)
from twofold.runtime.sched import ThreadHints
from twofold.runtime.thread import RuntimeClient


class EchoWorker:
    """Answers each CancelPeek with a PeekCanceled; fails on a Status-triggering uuid."""

    def __init__(self, fail_on: uuid.UUID | None = None) -> None:
        self.out: list[ComputeResponse] = []
        self.thread_ids: set[int] = set()
        self.fail_on = fail_on
        self.shut = threading.Event()

    def handle(self, command: ComputeCommand) -> None:
        self.thread_ids.add(threading.get_ident())
        if isinstance(command, Hello):
            return
        assert isinstance(command, CancelPeek)
        if command.uuid == self.fail_on:
            raise RuntimeError("boom in worker")
        self.out.append(PeekResponse(command.uuid, PeekCanceled()))

    def step(self) -> None:
        pass

    def take_responses(self) -> list[ComputeResponse]:
        out, self.out = self.out, []
        return out

    def wait_timeout(self) -> float | None:
        return None

    def shutdown(self) -> None:
        self.shut.set()


async def test_round_trip_in_order_on_worker_thread() -> None:
    worker = EchoWorker()
    async with RuntimeClient(worker, name="t") as rt:
        ids = [uuid.uuid4() for _ in range(2000)]
        for u in ids:
            await rt.send(CancelPeek(u))
        got = []
        for _ in ids:
            r = await rt.recv()
            assert isinstance(r, PeekResponse)
            got.append(r.uuid)
        assert got == ids
    assert worker.thread_ids and threading.get_ident() not in worker.thread_ids
    assert worker.shut.is_set()


async def test_close_ends_recv_with_none() -> None:
    rt = await RuntimeClient(EchoWorker(), name="t").start()
    await rt.close()
    assert await rt.recv() is None
    with pytest.raises(ConnectionError):
        await rt.send(CancelPeek(uuid.uuid4()))


async def test_worker_error_is_raised_from_recv() -> None:
    bad = uuid.uuid4()
    worker = EchoWorker(fail_on=bad)
    rt = await RuntimeClient(worker, name="t").start()
    good = uuid.uuid4()
    await rt.send(CancelPeek(good))
    await rt.send(CancelPeek(bad))
    first = await rt.recv()
    assert isinstance(first, PeekResponse) and first.uuid == good
    with pytest.raises(RuntimeError, match="boom in worker"):
        await rt.recv()
    await rt.close()
    assert worker.shut.is_set()
    assert isinstance(rt.error, RuntimeError)


async def test_recv_is_cancel_safe() -> None:
    rng = random.Random(7)
    async with RuntimeClient(EchoWorker(), name="t") as rt:
        ids = [uuid.uuid4() for _ in range(500)]

        async def produce() -> None:
            for u in ids:
                await rt.send(CancelPeek(u))
                if rng.random() < 0.3:
                    await asyncio.sleep(0)

        producer = asyncio.create_task(produce())
        got: list[uuid.UUID] = []
        while len(got) < len(ids):
            task = asyncio.create_task(rt.recv())
            # Cancel some receives at arbitrary points; none may lose a response.
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)
            if rng.random() < 0.5 and not task.done():
                task.cancel()
                try:
                    r = await task
                except asyncio.CancelledError:
                    continue
            else:
                r = await task
            assert isinstance(r, PeekResponse)
            got.append(r.uuid)
        await producer
        assert got == ids


async def test_status_type_is_forwarded_untouched() -> None:
    class StatusWorker(EchoWorker):
        def handle(self, command: ComputeCommand) -> None:
            self.out.append(Status("hello"))

    async with RuntimeClient(StatusWorker(), name="t") as rt:
        await rt.send(CancelPeek(uuid.uuid4()))
        assert await rt.recv() == Status("hello")


async def test_hello_fences_off_the_previous_iterations_responses() -> None:
    """Responses flushed before a Hello is handled never come out after `send(Hello)`."""
    worker = EchoWorker()
    async with RuntimeClient(worker, name="t") as rt:
        old = [uuid.uuid4() for _ in range(50)]
        for u in old:
            await rt.send(CancelPeek(u))
        first = await rt.recv()  # the old iteration is flowing
        assert isinstance(first, PeekResponse) and first.uuid == old[0]
        await rt.send(Hello(uuid.uuid4()))
        new = uuid.uuid4()
        await rt.send(CancelPeek(new))
        r = await asyncio.wait_for(rt.recv(), 5)
        assert isinstance(r, PeekResponse) and r.uuid == new


async def test_nice_lowers_only_the_runtime_thread_priority() -> None:
    import os

    seen: list[int] = []

    class NiceWorker(EchoWorker):
        def handle(self, command: ComputeCommand) -> None:
            tid = threading.get_native_id()
            seen.append(os.getpriority(os.PRIO_PROCESS, tid))
            super().handle(command)

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    async with RuntimeClient(NiceWorker(), name="t", hints=ThreadHints(nice=5)) as rt:
        await rt.send(CancelPeek(uuid.uuid4()))
        await rt.recv()
    assert seen == [min(mine + 5, 19)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_a_put_on_the_loop_wakes_the_consumer_without_an_extra_loop_turn() -> None:
    """`Outbox.put_many_from_loop` (the maintenance process's client delivers responses with it
    on the loop's thread) resolves the waiting `get` directly: it returns after one loop turn,
    where `put_many`'s thread-safe wakeup needs a turn for the callback and one for the get."""
    from twofold.runtime.bridge import Outbox

    async def turns_until_got(from_loop: bool) -> int:
        box: Outbox[int] = Outbox(asyncio.get_running_loop())
        getter = asyncio.ensure_future(box.get())
        await asyncio.sleep(0)  # the getter now waits
        (box.put_many_from_loop if from_loop else box.put_many)([1, 2])
        turns = 0
        while not getter.done():
            await asyncio.sleep(0)
            turns += 1
        assert getter.result() == 1 and box.get_nowait() == 2
        return turns

    assert asyncio.run(turns_until_got(True)) < asyncio.run(turns_until_got(False))
