"""Shared fate: when the replica endpoint ends, the server ends, observably."""

from __future__ import annotations

import asyncio
import logging

import pytest

from twofold.protocol import Status
from twofold.transport import ConnectFailed, EndpointEnded, ReplicaServer, connect

from .support import EchoReplica, async_test, hello, within


@async_test
async def test_target_recv_returning_none_closes_the_server() -> None:
    replica = EchoReplica()
    server = ReplicaServer(replica)
    await server.start()
    address = server.address
    client = await connect(*address)
    await client.send(hello())
    await replica.wait_commands(1)
    replica.emit(Status("last words"))
    replica.end()
    await within(server.wait_closed())
    assert server.closed
    assert isinstance(server.exception, EndpointEnded)
    # What was written before the end still arrives, then a clean close.
    assert await within(client.recv()) == Status("last words")
    assert await within(client.recv()) is None
    await client.aclose()
    with pytest.raises(ConnectFailed):
        await connect(*address)
    await server.aclose()  # idempotent after the server closed itself
    assert isinstance(server.exception, EndpointEnded)


@async_test
async def test_target_recv_raising_closes_the_server_with_that_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="twofold.transport")
    replica = EchoReplica()
    boom = RuntimeError("maintenance runtime crashed")
    async with ReplicaServer(replica) as server:
        await replica.wait_idle()
        replica.fail(boom)
        await within(server.wait_closed())
        assert server.exception is boom
    assert "maintenance runtime crashed" in caplog.text


@async_test
async def test_shared_fate_closes_a_connection_that_is_still_handshaking() -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        reader, writer = await asyncio.open_connection(*server.address)
        await replica.wait_idle()
        replica.end()
        await within(server.wait_closed())
        await within(reader.read())  # EOF: the half-open connection was not left dangling
        writer.close()


@async_test
async def test_an_orderly_close_is_not_an_error_and_leaves_the_target_alone() -> None:
    replica = EchoReplica()
    server = ReplicaServer(replica)
    await server.start()
    client = await connect(*server.address)
    await client.send(hello())
    await replica.wait_commands(1)
    await within(server.aclose())
    await within(server.wait_closed())
    assert server.exception is None
    assert await within(client.recv()) is None
    await client.aclose()
    # The target outlives the server: it still accepts and answers.
    replica.emit(Status("still alive"))
    assert await within(replica.recv()) == Status("still alive")


@async_test
async def test_start_twice_is_an_error() -> None:
    async with ReplicaServer(EchoReplica()) as server:
        with pytest.raises(RuntimeError, match="twice"):
            await server.start()
