"""Token authentication and version checks over a real socket."""

from __future__ import annotations

import asyncio
import logging

import pytest

from twofold.protocol import PeekResponse
from twofold.protocol.framing import frame, read_frame
from twofold.transport import (
    AuthenticationFailed,
    ReplicaServer,
    StorageMismatch,
    VersionMismatch,
    connect,
)
from twofold.transport.handshake import client_hello, parse_server_hello, raise_for

from .support import EchoReplica, async_test, closed_by_peer, hello, peek, within

TOKEN = "s3cret-tøken"


async def _serves_a_good_client(server: ReplicaServer, replica: EchoReplica) -> None:
    async with await connect(*server.address, token=TOKEN) as client:
        await client.send(hello())
        await client.send(peek(1))
        assert isinstance(await within(client.recv()), PeekResponse)


@async_test
async def test_the_right_token_is_accepted() -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica, token=TOKEN) as server:
        await _serves_a_good_client(server, replica)


@pytest.mark.parametrize(
    "token", [None, "wrong", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), TOKEN.encode()[:-1] + b"!"]
)
@async_test
async def test_a_wrong_or_missing_token_is_refused_and_the_server_keeps_serving(
    token: str | bytes | None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    replica = EchoReplica()
    async with ReplicaServer(replica, token=TOKEN) as server:
        with pytest.raises(AuthenticationFailed, match="refused"):
            await connect(*server.address, token=token)
        await _serves_a_good_client(server, replica)
    assert "refusing connection" in caplog.text
    assert ("token is required, none was sent" if token is None else "wrong token") in caplog.text
    assert TOKEN not in caplog.text  # the secret is never logged


@async_test
async def test_a_refused_client_does_not_supersede_the_current_connection() -> None:
    replica = EchoReplica()
    async with (
        ReplicaServer(replica, token=TOKEN) as server,
        await connect(*server.address, token=TOKEN) as current,
    ):
        await current.send(hello())
        with pytest.raises(AuthenticationFailed):
            await connect(*server.address, token="intruder")
        await current.send(peek(4))
        assert isinstance(await within(current.recv()), PeekResponse)


@async_test
async def test_a_client_of_another_wire_version_is_refused_by_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        reader, writer = await asyncio.open_connection(*server.address)
        writer.write(frame(client_hello(None, version=999)))
        reply = await within(read_frame(reader))
        assert reply is not None
        with pytest.raises(VersionMismatch, match="999"):
            raise_for(parse_server_hello(reply))
        assert await closed_by_peer(reader)
        writer.close()
        async with await connect(*server.address) as client:
            await client.send(hello())
    assert "wire version 999" in caplog.text
    assert len(replica.commands) == 1


@async_test
async def test_a_silent_client_is_dropped_after_the_handshake_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    async with ReplicaServer(EchoReplica(), handshake_timeout=0.2) as server:
        reader, writer = await asyncio.open_connection(*server.address)
        assert await closed_by_peer(reader)
        writer.close()
    assert "no handshake within" in caplog.text


@async_test
async def test_a_non_twofold_peer_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    async with ReplicaServer(EchoReplica()) as server:
        reader, writer = await asyncio.open_connection(*server.address)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert await closed_by_peer(reader)
        writer.close()
        async with await connect(*server.address) as client:
            await client.send(hello())
    assert "refusing connection" in caplog.text


@async_test
async def test_a_token_sent_to_a_server_without_one_is_accepted() -> None:
    replica = EchoReplica()
    async with (
        ReplicaServer(replica) as server,
        await connect(*server.address, token="unneeded") as client,
    ):
        await client.send(hello())
        await client.send(peek(2))
        assert isinstance(await within(client.recv()), PeekResponse)


@async_test
async def test_a_replica_on_another_storage_refuses_the_controller_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    replica = EchoReplica()
    async with ReplicaServer(replica, storage_id="aaaa", storage="sqlite:///r.db") as server:
        host, port = server.address
        with pytest.raises(StorageMismatch, match=rf"{host}:{port}.*sqlite:///r.db.*aaaa.*bbbb"):
            await connect(host, port, storage_id="bbbb")
        async with await connect(host, port, storage_id="aaaa") as client:
            await client.send(hello())
            await client.send(peek(1))
            assert isinstance(await within(client.recv()), PeekResponse)
    assert "refusing connection" in caplog.text and "bbbb" in caplog.text
    assert len(replica.commands) == 2  # the refused controller sent nothing
