"""`ReplicaConnection.recv` is cancel-safe and its buffering is bounded."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import PeekResponse, PeekRows, Status
from twofold.testing.profiles import examples
from twofold.transport import ReplicaServer, connect

from .support import EchoReplica, async_test, hello, peek, within

N = 120


async def _yield(times: int) -> None:
    # Hands the loop to the reader task and the server `times` times; no time passes.
    for _ in range(times):
        await asyncio.sleep(0)


@settings(max_examples=examples(25))
@given(
    delays=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=40),
    buffer_limit=st.sampled_from([64, 1024, 1 << 20]),
)
def test_cancelled_recvs_lose_nothing(delays: list[int], buffer_limit: int) -> None:
    @async_test
    async def scenario() -> None:
        async with ReplicaServer(EchoReplica()) as server:
            client = await connect(*server.address, buffer_limit=buffer_limit)
            await client.send(hello())
            for i in range(N):
                await client.send(peek(i))
            got: list[object] = []
            step = 0
            while len(got) < N:
                pending = asyncio.create_task(client.recv())
                await _yield(delays[step % len(delays)])
                step += 1
                pending.cancel()
                try:
                    got.append(await within(pending))
                except asyncio.CancelledError:
                    if step > 50 * N:
                        raise AssertionError("no progress: every recv was cancelled") from None
                    # A cancelled recv must leave its response for the next one.
                    if step % 7 == 0:
                        got.append(await within(client.recv()))
            await client.aclose()
        assert got == [PeekResponse(peek(i).uuid, PeekRows([([i], 1)])) for i in range(N)]

    scenario()


@async_test
async def test_the_reader_stops_reading_while_the_buffer_is_full() -> None:
    replica = EchoReplica()
    big = Status("x" * 10_000)
    limit = 50_000
    count = 200
    async with ReplicaServer(replica) as server:
        client = await connect(*server.address, buffer_limit=limit)
        await client.send(hello())
        await replica.wait_commands(1)
        for _ in range(count):
            replica.emit(big)
        received = 0
        high_water = 0
        while received < count:
            # Give the reader every chance to run ahead of this slow consumer.
            await _yield(20)
            high_water = max(high_water, client.buffered_bytes)
            assert await within(client.recv()) == big
            received += 1
        await client.aclose()
    # At most the limit plus the one frame that crossed it waits in memory.
    assert high_water <= limit + len(big.message) + 100
    assert high_water >= limit  # the reader did run ahead: the bound was exercised
