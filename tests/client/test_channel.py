"""In-process channels: ordering, clean and failed ends, sends after close, and cancel-safety of
`recv` under random schedules of sends, receives and cancellations.

Concurrency here is driven by explicit scheduler yields (`asyncio.sleep(0)` hands control to
every ready task once) and futures, never by wall-clock sleeps.
"""

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from twofold.client import ChannelClosed, ComputeClient, Pipe, channel_pair
from twofold.protocol import GlobalId, Schedule, Status
from twofold.testing.profiles import examples


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout=10))


async def yield_to_others(times: int = 1) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


def status(i: int) -> Status:
    return Status(f"m{i}")


def test_controller_end_is_a_compute_client() -> None:
    controller, _ = channel_pair()
    assert isinstance(controller, ComputeClient)


def test_order_is_preserved_in_both_directions() -> None:
    async def main() -> None:
        controller, replica = channel_pair()
        for i in range(50):
            await controller.send(Schedule(GlobalId.user(i)))
            await replica.send(status(i))
        assert [await replica.recv() for _ in range(50)] == [
            Schedule(GlobalId.user(i)) for i in range(50)
        ]
        assert [await controller.recv() for _ in range(50)] == [status(i) for i in range(50)]

    run(main())


def test_close_yields_none_after_draining() -> None:
    async def main() -> None:
        controller, replica = channel_pair()
        replica.send_nowait(status(1))
        await replica.send(status(2))
        replica.close()
        assert await controller.recv() == status(1)
        assert await controller.recv() == status(2)
        assert await controller.recv() is None

    run(main())


def test_close_wakes_a_pending_recv() -> None:
    async def main() -> None:
        controller, replica = channel_pair()
        pending = asyncio.create_task(controller.recv())
        await yield_to_others()
        assert not pending.done()
        replica.close()
        assert await pending is None

    run(main())


def test_fail_raises_after_draining() -> None:
    async def main() -> None:
        controller, replica = channel_pair()
        replica.send_nowait(status(1))
        replica.fail(RuntimeError("replica crashed"))
        assert await controller.recv() == status(1)
        with pytest.raises(RuntimeError, match="replica crashed"):
            await controller.recv()

    run(main())


def test_fail_wakes_a_pending_recv() -> None:
    async def main() -> None:
        controller, replica = channel_pair()
        pending = asyncio.create_task(replica.recv())
        await yield_to_others()
        controller.fail(ConnectionResetError("gone"))
        with pytest.raises(ConnectionResetError, match="gone"):
            await pending

    run(main())


def test_send_after_close_raises_channel_closed() -> None:
    async def main() -> None:
        controller, replica = channel_pair()
        replica.close()
        with pytest.raises(ChannelClosed):
            await replica.send(status(1))
        with pytest.raises(ChannelClosed):
            replica.send_nowait(status(1))
        controller.fail(RuntimeError("x"))
        with pytest.raises(ChannelClosed):
            await controller.send(Schedule(GlobalId.user(1)))
        # Closing one direction leaves the other open.
        controller2, replica2 = channel_pair()
        replica2.close()
        await controller2.send(Schedule(GlobalId.user(1)))
        assert await replica2.recv() == Schedule(GlobalId.user(1))
        assert await controller2.recv() is None

    run(main())


def test_channel_closed_is_a_connection_error() -> None:
    assert issubclass(ChannelClosed, ConnectionError)


def test_pipe_accessors() -> None:
    pipe: Pipe[int] = Pipe()
    assert len(pipe) == 0 and not pipe.closed and pipe.get_nowait() is None
    pipe.put(1)
    pipe.put(2)
    assert len(pipe) == 2 and pipe.get_nowait() == 1 and len(pipe) == 1
    pipe.close()
    assert pipe.closed and pipe.get_nowait() == 2 and pipe.get_nowait() is None


def test_cancelled_recv_loses_nothing() -> None:
    async def main() -> None:
        controller, replica = channel_pair()
        pending = asyncio.create_task(controller.recv())
        await yield_to_others()
        # Deliver, then cancel before the receiver runs again: the item must stay queued.
        replica.send_nowait(status(1))
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert await controller.recv() == status(1)

    run(main())


def test_cancelling_one_receiver_does_not_cancel_another() -> None:
    async def main() -> None:
        pipe: Pipe[int] = Pipe()
        a = asyncio.create_task(pipe.get())
        b = asyncio.create_task(pipe.get())
        await yield_to_others()
        a.cancel()
        await yield_to_others()
        assert a.cancelled() and not b.done()
        pipe.put(7)
        assert await b == 7

    run(main())


def test_many_cancelled_receivers_then_a_real_one() -> None:
    async def main() -> None:
        pipe: Pipe[int] = Pipe()
        for _ in range(100):
            t = asyncio.create_task(pipe.get())
            await yield_to_others()
            t.cancel()
            await yield_to_others()
            assert t.cancelled()
        pipe.put(1)
        assert await pipe.get() == 1

    run(main())


# --- cancel-safety under random schedules ------------------------------------------------------

Op = tuple[str, int]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 3)),  # send this many messages
        st.tuples(st.just("recv"), st.just(0)),  # start a receiver
        st.tuples(st.just("cancel"), st.integers(0, 7)),  # cancel a pending receiver
        st.tuples(st.just("yield"), st.integers(1, 3)),  # let ready tasks run
    ),
    max_size=40,
)


@settings(max_examples=examples(150))
@given(ops, st.booleans())
@example([("recv", 0), ("recv", 0), ("yield", 1), ("cancel", 0), ("send", 1), ("yield", 2)], False)
def test_recv_is_cancel_safe_under_random_schedules(schedule: list[Op], fail: bool) -> None:
    async def main() -> None:
        controller, replica = channel_pair()
        sent: list[Any] = []
        received: list[Any] = []
        pending: list[asyncio.Task[Any]] = []
        everything: list[asyncio.Task[Any]] = []
        cancelled: set[asyncio.Task[Any]] = set()

        def collect(task: asyncio.Task[Any]) -> None:
            # Done callbacks run in completion order, and a receiver completes in the same step
            # as it takes its item, so `received` is in dequeue order.
            if not task.cancelled() and task.exception() is None:
                item = task.result()
                if item is not None:
                    received.append(item)

        def start() -> None:
            task = asyncio.create_task(controller.recv())
            task.add_done_callback(collect)
            pending.append(task)
            everything.append(task)

        for op, n in schedule:
            pending[:] = [t for t in pending if not t.done()]
            if op == "send":
                for _ in range(n):
                    sent.append(status(len(sent)))
                    await replica.send(sent[-1])
            elif op == "recv":
                start()
            elif op == "cancel" and pending:
                victim = pending[n % len(pending)]
                victim.cancel()
                cancelled.add(victim)
            elif op == "yield":
                await yield_to_others(n)

        if fail:
            replica.fail(RuntimeError("end"))
        else:
            replica.close()
        results = await asyncio.gather(*pending, return_exceptions=True)
        await yield_to_others()  # let the last done callbacks run
        for r in results:
            assert r is None or isinstance(r, Status | asyncio.CancelledError | RuntimeError)
        # Only the receivers we cancelled may end cancelled.
        assert {t for t in everything if t.cancelled()} <= cancelled
        # Drain what nobody took.
        while True:
            try:
                item = await controller.recv()
            except RuntimeError:
                assert fail
                break
            if item is None:
                assert not fail
                break
            received.append(item)
        assert received == sent

    run(main())


async def _recv_nowait_case() -> None:
    from twofold.client import channel_pair
    from twofold.protocol import Status

    controller, replica = channel_pair()
    assert controller.recv_nowait() is None
    await replica.send(Status("a"))
    await replica.send(Status("b"))
    assert controller.recv_nowait() == Status("a")
    assert await controller.recv() == Status("b")
    assert controller.recv_nowait() is None


def test_recv_nowait_takes_only_what_is_queued() -> None:
    import asyncio

    asyncio.run(_recv_nowait_case())
