"""Commands and responses over TCP: order, free ports, superseding connections, local close."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import pytest

from twofold.client import ComputeClient, channel_pair
from twofold.protocol import ComputeCommand, Peek, PeekResponse, PeekRows, Status
from twofold.protocol.codec import encode
from twofold.protocol.framing import frame, read_frame
from twofold.transport import (
    ConnectFailed,
    ConnectionClosed,
    ConnectionLost,
    ConnectTimeout,
    MessageTooLarge,
    ReplicaConnection,
    ReplicaServer,
    connect,
)
from twofold.transport.handshake import client_hello

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


@async_test
async def test_many_commands_and_responses_round_trip_in_order() -> None:
    replica = EchoReplica()
    n = 500
    async with ReplicaServer(replica) as server:
        client = await connect(*server.address)
        first = hello()
        await client.send(first)
        for i in range(n):
            await client.send(peek(i))
        got = [await within(client.recv()) for _ in range(n)]
        await client.aclose()
    assert replica.commands == [first, *(peek(i) for i in range(n))]
    assert got == [PeekResponse(peek(i).uuid, PeekRows([([i], 1)])) for i in range(n)]


@async_test
async def test_responses_the_target_emits_on_its_own_reach_the_client() -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica) as server, await connect(*server.address) as client:
        await client.send(hello())
        await replica.wait_commands(1)
        replica.emit(Status("unprompted"))
        assert await within(client.recv()) == Status("unprompted")


@async_test
async def test_port_zero_picks_a_free_port_reported_by_address() -> None:
    async with ReplicaServer(EchoReplica()) as a, ReplicaServer(EchoReplica()) as b:
        (host_a, port_a), (_, port_b) = a.address, b.address
        assert host_a == "127.0.0.1"
        assert port_a > 0 and port_b > 0 and port_a != port_b
        async with await connect(host_a, port_a) as client:
            await client.send(hello())
            await client.send(peek(7))
            response = await within(client.recv())
            assert isinstance(response, PeekResponse)


@async_test
async def test_address_before_start_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="start"):
        _ = ReplicaServer(EchoReplica()).address


@async_test
async def test_a_new_connection_supersedes_the_old_one() -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        old = await connect(*server.address)
        await old.send(hello())
        await old.send(peek(1))
        assert isinstance(await within(old.recv()), PeekResponse)

        new = await connect(*server.address)
        assert await connection_ends(old)
        commands_before = len(replica.commands)

        # Whatever the old client still sends never reaches the target.
        with contextlib.suppress(ConnectionLost):
            await old.send(peek(99))
        second = hello()
        await new.send(second)
        await new.send(peek(2))
        assert await within(new.recv()) == PeekResponse(peek(2).uuid, PeekRows([([2], 1)]))
        assert replica.commands[commands_before:] == [second, peek(2)]
        await old.aclose()
        await new.aclose()


@async_test
async def test_responses_without_a_current_connection_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="twofold.transport")
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        await replica.wait_idle()
        replica.emit(Status("nobody listens"))
        await replica.wait_idle()
        async with await connect(*server.address) as client:
            await client.send(hello())
            await client.send(peek(3))
            assert isinstance(await within(client.recv()), PeekResponse)
    assert "dropping Status" in caplog.text


@async_test
async def test_a_connection_closed_by_the_controller_frees_the_slot() -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        for i in range(3):
            async with await connect(*server.address) as client:
                await client.send(hello())
                await client.send(peek(i))
                assert isinstance(await within(client.recv()), PeekResponse)


@async_test
async def test_using_a_closed_client_raises_connection_closed() -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        client = await connect(*server.address)
        pending = asyncio.create_task(client.recv())
        await replica.wait_idle()
        await client.aclose()
        with pytest.raises(ConnectionClosed):
            await within(pending)
        with pytest.raises(ConnectionClosed):
            await client.send(hello())
        with pytest.raises(ConnectionClosed):
            await client.recv()


@async_test
async def test_an_oversized_command_is_refused_locally_and_the_connection_stays_usable() -> None:
    replica = EchoReplica()
    async with (
        ReplicaServer(replica) as server,
        await connect(*server.address, max_frame=200) as client,
    ):
        await client.send(hello())
        big = Peek(uuid=peek(0).uuid, target=peek(0).target, timestamp=0,
                   literal_constraints=[["x" * 300]])  # fmt: skip
        with pytest.raises(MessageTooLarge, match="Peek command of"):
            await client.send(big)
        await client.send(peek(5))
        assert isinstance(await within(client.recv()), PeekResponse)
    assert replica.commands[1:] == [peek(5)]


@async_test
async def test_connecting_to_a_closed_port_raises_connect_failed() -> None:
    server = ReplicaServer(EchoReplica())
    await server.start()
    address = server.address
    await server.aclose()
    with pytest.raises(ConnectFailed, match=str(address[1])):
        await connect(*address)


@async_test
async def test_sending_after_the_replica_closed_the_connection_raises_connection_lost() -> None:
    replica = EchoReplica()
    async with ReplicaServer(replica) as server:
        client = await connect(*server.address)
        await client.send(hello())
        await replica.wait_commands(1)
    # The server is gone: the client sees a clean end, and then cannot send.
    assert await within(client.recv()) is None
    with pytest.raises(ConnectionLost, match="Peek"):
        await client.send(peek(1))
    await client.aclose()


@async_test
async def test_a_replica_that_never_answers_the_handshake_times_out() -> None:
    accepted = asyncio.Event()

    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set()
        await reader.read()
        writer.close()

    silent = await asyncio.start_server(mute, "127.0.0.1", 0)
    async with silent:
        port = silent.sockets[0].getsockname()[1]
        with pytest.raises(ConnectTimeout, match=r"longer than 0\.2 s") as info:
            await connect("127.0.0.1", port, timeout=0.2)
        assert isinstance(info.value, TimeoutError)
        assert accepted.is_set()


@async_test
async def test_a_stalled_connection_is_superseded_even_while_a_write_to_it_blocks() -> None:
    replica = EchoReplica()
    burst = Status("y" * 100_000)
    async with ReplicaServer(replica) as server:
        # A controller that authenticates, says Hello and then never reads again, with a small
        # receive window: the burst below fills every buffer and the server's write blocks.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, server.address)
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(frame(client_hello(None)))
        assert await within(read_frame(reader)) is not None
        writer.write(frame(encode(hello())))
        await replica.wait_commands(1)
        for _ in range(100):  # 10 MB: more than the kernel buffers on both ends
            replica.emit(burst)

        async with await connect(*server.address) as client:
            await client.send(hello())
            await client.send(peek(8))
            response = await within(client.recv())
            while response == burst:  # what the stalled connection did not take comes here
                response = await within(client.recv())
            assert response == PeekResponse(peek(8).uuid, PeekRows([([8], 1)]))
        writer.close()


@pytest.mark.parametrize("max_frame", [0, -1, 2**32])
@async_test
async def test_an_impossible_frame_limit_is_refused_up_front(max_frame: int) -> None:
    with pytest.raises(ValueError, match="max_frame"):
        ReplicaServer(EchoReplica(), max_frame=max_frame)
    with pytest.raises(ValueError, match="max_frame"):
        await connect("127.0.0.1", 1, max_frame=max_frame)


@async_test
async def test_address_survives_close_and_a_closed_server_cannot_restart() -> None:
    server = ReplicaServer(EchoReplica())
    await server.start()
    address = server.address
    await server.aclose()
    assert server.address == address
    with pytest.raises(RuntimeError):
        await server.start()


@async_test
async def test_frames_already_buffered_from_a_superseded_connection_never_apply() -> None:
    class Yielding(EchoReplica):
        async def send(self, command: ComputeCommand) -> None:
            await asyncio.sleep(0)  # one command per loop turn: the old stream is mid-way
            await super().send(command)

    replica = Yielding()
    async with ReplicaServer(replica) as server:
        reader, writer = await raw_connection(server)
        old_hello = hello()
        # One burst, so most of it sits in the server's buffers when the new client takes over.
        writer.write(b"".join(frame(encode(c)) for c in [old_hello, *map(peek, range(1, 3001))]))
        await writer.drain()
        await replica.wait_commands(1)
        async with await connect(*server.address) as client:
            new_hello = hello()
            await client.send(new_hello)
            await client.send(peek(0))
            response = await within(client.recv())
            while response != PeekResponse(peek(0).uuid, PeekRows([([0], 1)])):
                response = await within(client.recv())  # answers to the old peeks, if any
        assert await closed_by_peer(reader)
        writer.close()
    after = replica.commands[replica.commands.index(new_hello) :]
    assert after == [new_hello, peek(0)]


@async_test
async def test_a_channel_pair_end_serves_as_the_target() -> None:
    controller_side, replica_side = channel_pair()

    async def echo() -> None:
        while (command := await replica_side.recv()) is not None:
            if isinstance(command, Peek):
                await replica_side.send(PeekResponse(command.uuid, PeekRows([])))

    echoing = asyncio.create_task(echo())
    async with ReplicaServer(controller_side) as server:
        client: ComputeClient = await connect(*server.address)
        assert isinstance(client, ComputeClient)
        await client.send(hello())
        await client.send(peek(1))
        assert await within(client.recv()) == PeekResponse(peek(1).uuid, PeekRows([]))
        assert isinstance(client, ReplicaConnection)
        await client.aclose()
    controller_side.close()
    await within(echoing)
