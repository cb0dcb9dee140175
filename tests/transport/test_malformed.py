"""Bad bytes on either side: a closed connection with a logged reason (server) or a typed error
(client); never a crash, never a half-applied command."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from twofold.protocol import (
    DecodeError,
    FrameTooLarge,
    PeekResponse,
    PeekRows,
    Status,
)
from twofold.protocol.codec import encode
from twofold.protocol.framing import frame, read_frame
from twofold.transport import ConnectionLost, ReplicaServer, connect
from twofold.transport.handshake import Authenticator, server_hello

from .support import (
    EchoReplica,
    async_test,
    closed_by_peer,
    connection_ends,
    hello,
    peek,
    raw_connection,
    within,
)

LIMIT = 4096


async def _still_serves(server: ReplicaServer) -> None:
    async with await connect(*server.address) as client:
        await client.send(hello())
        await client.send(peek(42))
        assert await within(client.recv()) == PeekResponse(peek(42).uuid, PeekRows([([42], 1)]))


@pytest.mark.parametrize("announced", [LIMIT + 1, 2**32 - 1])
@async_test
async def test_an_oversized_frame_header_closes_the_connection(
    announced: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    replica = EchoReplica()
    async with ReplicaServer(replica, max_frame=LIMIT) as server:
        reader, writer = await raw_connection(server)
        writer.write(frame(encode(hello())))
        # Only the header: the server must refuse without waiting for the payload.
        writer.write(struct.pack(">I", announced))
        assert await closed_by_peer(reader)
        writer.close()
        await _still_serves(server)
    assert f"frame of {announced} bytes exceeds the limit of {LIMIT} bytes" in caplog.text
    # The raw connection's Hello, then the good client's Hello and Peek: nothing from the bad frame.
    assert len(replica.commands) == 3
    assert replica.commands[2] == peek(42)


def _truncated_msgpack() -> bytes:
    return encode(peek(1))[:-3]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xc1\xff garbage \x00", "undecodable command"),
        (encode(PeekResponse(peek(1).uuid, PeekRows([]))), "undecodable command"),
        (_truncated_msgpack(), "undecodable command"),
        (encode(Status("not a command")), "undecodable command"),
    ],
    ids=["garbage", "a-response", "truncated-msgpack", "status-response"],
)
@async_test
async def test_a_malformed_command_closes_the_connection_and_applies_nothing(
    payload: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        reader, writer = await raw_connection(server)
        first = hello()
        writer.write(frame(encode(first)))
        writer.write(frame(payload))
        writer.write(frame(encode(peek(9))))  # after the bad frame: must never apply
        assert await closed_by_peer(reader)
        writer.close()
        assert replica.commands == [first]
        await _still_serves(server)
    assert reason in caplog.text
    assert all(c != peek(9) for c in replica.commands)


@async_test
async def test_a_frame_cut_short_by_the_peer_applies_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        reader, writer = await raw_connection(server)
        first = hello()
        writer.write(frame(encode(first)))
        writer.write(frame(encode(peek(1)))[:-2])
        writer.write_eof()
        assert await closed_by_peer(reader)
        writer.close()
        await _still_serves(server)
    assert "ended in the middle of a frame" in caplog.text
    assert replica.commands[0] == first and replica.commands[1] != peek(1)


@async_test
async def test_the_first_command_must_be_hello(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="twofold.transport")
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        reader, writer = await raw_connection(server)
        writer.write(frame(encode(peek(1))))
        assert await closed_by_peer(reader)
        writer.close()
        assert replica.commands == []
        await _still_serves(server)
    assert "the first command must be Hello, got Peek" in caplog.text


@async_test
async def test_a_command_the_target_refuses_closes_only_that_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Picky(EchoReplica):
        async def send(self, command: object) -> None:
            if command == peek(13):
                raise ValueError("unlucky peek")
            await super().send(command)  # type: ignore[arg-type]

    caplog.set_level(logging.INFO, logger="twofold.transport")
    replica = Picky()
    async with ReplicaServer(replica) as server:
        client = await connect(*server.address)
        await client.send(hello())
        await client.send(peek(13))
        assert await connection_ends(client)
        await client.aclose()
        await _still_serves(server)
    assert "refused Peek" in caplog.text and "unlucky peek" in caplog.text


# -- the client side ---------------------------------------------------------------------------


async def _fake_replica(
    answer: bytes,
) -> tuple[asyncio.Server, asyncio.Event]:
    """A server that completes the handshake and then writes `answer` verbatim."""
    done = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        payload = await read_frame(reader)
        assert payload is not None
        writer.write(frame(server_hello(Authenticator(None).judge(payload))))
        writer.write(answer)
        writer.write_eof()
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()
        done.set()

    return await asyncio.start_server(handle, "127.0.0.1", 0), done


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (frame(b"\xc1 not msgpack"), DecodeError, "malformed response"),
        (frame(encode(hello())), DecodeError, "malformed response"),
        (struct.pack(">I", 10_000), FrameTooLarge, "exceeds the limit of 1024"),
        (frame(encode(Status("x")))[:-1], ConnectionLost, "middle of a frame"),
    ],
    ids=["garbage", "a-command", "oversized", "truncated"],
)
@async_test
async def test_a_bad_response_raises_from_recv_after_the_good_ones_and_closes(
    answer: bytes, error: type[Exception], match: str
) -> None:
    good = encode(Status("before"))
    server, done = await _fake_replica(frame(good) + answer)
    async with server:
        port = server.sockets[0].getsockname()[1]
        client = await connect("127.0.0.1", port, max_frame=1024)
        assert await within(client.recv()) == Status("before")
        with pytest.raises(error, match=match):
            await within(client.recv())
        with pytest.raises(ConnectionLost, match=match):
            await client.send(hello())
        await within(done.wait())  # the client closed its socket
        await client.aclose()
