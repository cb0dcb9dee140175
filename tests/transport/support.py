"""Helpers for the transport tests: an in-process echo replica, an async test runner and raw
sockets that speak just enough of the handshake to send bad frames."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from twofold.client import Pipe
from twofold.protocol import (
    ComputeCommand,
    ComputeResponse,
    Hello,
    IndexTarget,
    Peek,
    PeekResponse,
    PeekRows,
)
from twofold.protocol.framing import frame, read_frame
from twofold.protocol.ids import GlobalId
from twofold.transport import ConnectionLost, ReplicaConnection, ReplicaServer
from twofold.transport.handshake import client_hello, parse_server_hello

T = TypeVar("T")

TEST_TIMEOUT = 20.0
"""A bound on each async test, so a hang fails instead of stalling the suite."""

WAIT = 5.0
"""A bound on one awaited step; reaching it fails the test."""


def async_test(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an `async def` test in a fresh event loop, bounded by `TEST_TIMEOUT`."""
    assert inspect.iscoroutinefunction(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), TEST_TIMEOUT))

    return wrapper


async def within(aw: Awaitable[T], seconds: float = WAIT) -> T:
    return await asyncio.wait_for(aw, seconds)


def hello() -> Hello:
    return Hello(nonce=uuid.uuid4())


def peek(n: int = 0) -> Peek:
    return Peek(uuid=uuid.UUID(int=n + 1), target=IndexTarget(GlobalId.user(1)), timestamp=n)


class EchoReplica:
    """A fake replica endpoint: records every command, answers each `Peek` with a `PeekResponse`
    whose single row is the peek's timestamp, and can emit, end or fail on demand."""

    def __init__(self) -> None:
        self.commands: list[ComputeCommand] = []
        self._out: Pipe[ComputeResponse] = Pipe()
        self._arrived = asyncio.Condition()
        self._idle = asyncio.Event()

    async def send(self, command: ComputeCommand) -> None:
        self.commands.append(command)
        if isinstance(command, Peek):
            self.emit(PeekResponse(command.uuid, PeekRows([([command.timestamp], 1)])))
        async with self._arrived:
            self._arrived.notify_all()

    async def recv(self) -> ComputeResponse | None:
        if not len(self._out):
            self._idle.set()
        return await self._out.get()

    def emit(self, response: ComputeResponse) -> None:
        self._idle.clear()
        self._out.put(response)

    def end(self) -> None:
        self._out.close()

    def fail(self, exc: BaseException) -> None:
        self._out.fail(exc)

    async def wait_commands(self, n: int) -> None:
        """Wait until at least `n` commands have arrived."""
        async with self._arrived:
            await within(self._arrived.wait_for(lambda: len(self.commands) >= n))

    async def wait_idle(self) -> None:
        """Wait until every emitted response was taken and the next `recv` is waiting."""
        await within(self._idle.wait())


async def raw_connection(
    server: ReplicaServer, token: str | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain socket that has completed the handshake (and nothing else)."""
    reader, writer = await asyncio.open_connection(*server.address)
    writer.write(frame(client_hello(token)))
    reply = await within(read_frame(reader))
    assert reply is not None and parse_server_hello(reply).ok
    return reader, writer


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """Read until the peer closes (EOF or reset); fails the test if it never does."""
    with contextlib.suppress(ConnectionResetError):
        await within(reader.read())
    return True


async def connection_ends(client: ReplicaConnection) -> bool:
    """The server ended `client`'s connection: `recv` returns `None` (a clean close) or raises
    `ConnectionLost` (a reset); fails the test if it does neither."""
    try:
        response = await within(client.recv())
    except ConnectionLost:
        return True
    assert response is None, f"expected the connection to end, got {response!r}"
    return True
