"""The controller's end of a network connection to a replica: `connect()` -> `ReplicaConnection`.

A `ReplicaConnection` is a `twofold.client.ComputeClient` over TCP (optionally TLS), speaking the
framing of `spec/protocol.md` §6 after the handshake of `handshake.py`.

Contract:
- `recv()` is cancel-safe. One reader task per connection (owned by the connection, cancelled
  and awaited by `aclose()`) moves decoded responses into a `twofold.client.Pipe`; a `recv` only
  ever takes from that pipe, so cancelling it loses nothing. `recv` returns `None` once the
  replica closed the connection cleanly at a frame boundary, after every earlier response.
- A malformed or oversized response raises `DecodeError` (or `FrameTooLarge`) from `recv`, after
  the responses before it; the connection is closed at once. A connection that breaks raises
  `ConnectionLost`; using it after `close()` raises `ConnectionClosed`.
- `send(command)` queues the whole frame in one step and then waits for the transport to drain
  (backpressure): a cancelled `send` has either queued its whole frame or nothing. Frames sent
  in one event-loop turn reach the socket together, in one write, at the end of that turn
  (`coalesce.py`). A command over the frame limit raises `MessageTooLarge` and sends nothing.
- Memory is bounded: the reader stops reading the socket while more than `buffer_limit` bytes of
  received responses wait for `recv` (TCP flow control then pushes back on the replica).
"""

from __future__ import annotations

import asyncio
import socket
import ssl as _ssl
from collections import deque
from types import TracebackType
from typing import Final

from twofold.client import Pipe
from twofold.protocol import ComputeCommand, ComputeResponse, DecodeError
from twofold.protocol.codec import decode_response, encode
from twofold.protocol.framing import DEFAULT_MAX_FRAME, frame, read_frame
from twofold.transport.coalesce import Coalescer
from twofold.transport.errors import (
    ConnectFailed,
    ConnectionClosed,
    ConnectionLost,
    ConnectTimeout,
    HandshakeFailed,
    MessageTooLarge,
    TlsFailed,
)
from twofold.transport.handshake import (
    HANDSHAKE_MAX_FRAME,
    client_hello,
    parse_server_hello,
    raise_for,
)

DEFAULT_TIMEOUT: Final = 10.0
DEFAULT_BUFFER_LIMIT: Final = 16 * 1024 * 1024
MAX_FRAME_LIMIT: Final = 0xFFFFFFFF
"""The largest payload a 4-byte length header can announce."""
STREAM_LIMIT: Final = 1024 * 1024
"""asyncio's per-stream read buffer high-water mark (bytes)."""


class ReplicaConnection:
    """A connected `ComputeClient` for one replica. See the module docstring."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        peer: str,
        max_frame: int = DEFAULT_MAX_FRAME,
        buffer_limit: int = DEFAULT_BUFFER_LIMIT,
        close_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.peer = peer
        self._reader = reader
        self._writer = writer
        # Commands sent in one loop turn leave in one socket write (`coalesce.py`).
        self._out = Coalescer(writer)
        self._max_frame = max_frame
        self._buffer_limit = buffer_limit
        self._close_timeout = close_timeout
        self._inbox: Pipe[ComputeResponse] = Pipe()
        # Sizes of the payloads queued in `_inbox`, in the same order, for the buffer bound.
        self._sizes: deque[int] = deque()
        self._buffered = 0
        self._room = asyncio.Event()
        self._room.set()
        self._closed = False
        self._failure: BaseException | None = None
        self._reader_task = asyncio.get_running_loop().create_task(
            self._read_responses(), name=f"twofold-transport-reader-{peer}"
        )

    # -- ComputeClient -------------------------------------------------------------------------

    async def send(self, command: ComputeCommand) -> None:
        if self._closed:
            raise ConnectionClosed(f"send on a closed connection to {self.peer}")
        payload = encode(command)
        if len(payload) > self._max_frame:
            what = f"{type(command).__name__} command"
            raise MessageTooLarge(what, len(payload), self._max_frame)
        if self._writer.is_closing():
            raise self._lost(f"cannot send {type(command).__name__}")
        # One write call for header and payload: a cancelled send queues all of it or nothing.
        self._out.write(frame(payload))
        try:
            await self._writer.drain()
        except OSError as e:
            raise self._lost(f"sending {type(command).__name__} failed: {e}") from e

    async def recv(self) -> ComputeResponse | None:
        if self._closed:
            raise ConnectionClosed(f"recv on a closed connection to {self.peer}")
        response = await self._inbox.get()
        # No await between taking the response and the accounting: cancellation cannot split them.
        if response is not None:
            self._buffered -= self._sizes.popleft()
            if self._buffered < self._buffer_limit:
                self._room.set()
        return response

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        """Payload bytes of received responses waiting for `recv` (bounded by `buffer_limit`
        plus the one frame that crossed it)."""
        return self._buffered

    @property
    def closed(self) -> bool:
        """`close()` was called."""
        return self._closed

    def close(self) -> None:
        """Stop reading, fail pending `recv`s with `ConnectionClosed`, and close the socket after
        what was sent is flushed. `aclose()` also waits for all of it."""
        if self._closed:
            return
        self._closed = True
        self._reader_task.cancel()
        if not self._inbox.closed:
            self._inbox.fail(ConnectionClosed(f"the connection to {self.peer} was closed"))
        self._out.flush()
        self._writer.close()

    async def aclose(self) -> None:
        """`close()`, then wait for the reader task and the socket to finish."""
        self.close()
        # asyncio.wait, not await: the reader's own cancellation is not ours to propagate.
        await asyncio.wait([self._reader_task])
        try:
            await asyncio.wait_for(self._writer.wait_closed(), self._close_timeout)
        except (OSError, TimeoutError):
            # A peer that never acknowledges the close (or a reset) must not hang us.
            self._writer.transport.abort()

    async def __aenter__(self) -> ReplicaConnection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- internals -----------------------------------------------------------------------------

    def _lost(self, what: str) -> BaseException:
        if self._failure is not None:
            return ConnectionLost(f"{what}: the connection to {self.peer} failed: {self._failure}")
        return ConnectionLost(f"{what}: the connection to {self.peer} is closed")

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        self._inbox.fail(exc)
        self._out.discard()
        self._writer.transport.abort()

    async def _read_responses(self) -> None:
        try:
            while True:
                while self._buffered >= self._buffer_limit:
                    self._room.clear()
                    await self._room.wait()
                payload = await read_frame(self._reader, self._max_frame)
                if payload is None:
                    self._inbox.close()
                    # The replica is gone: a later send must fail, not vanish silently.
                    self._writer.close()
                    return
                response = decode_response(payload, max_size=self._max_frame)
                self._sizes.append(len(payload))
                self._buffered += len(payload)
                self._inbox.put(response)
        except DecodeError as e:  # includes FrameTooLarge
            self._fail(e)
        except asyncio.IncompleteReadError as e:
            self._fail(
                ConnectionLost(
                    f"the replica at {self.peer} closed the connection in the middle of a frame "
                    f"({len(e.partial)} of {e.expected} bytes received)"
                )
            )
        except OSError as e:
            self._fail(ConnectionLost(f"the connection to {self.peer} was lost: {e}"))


async def connect(
    host: str,
    port: int,
    token: str | bytes | None = None,
    ssl: _ssl.SSLContext | None = None,
    *,
    max_frame: int = DEFAULT_MAX_FRAME,
    timeout: float = DEFAULT_TIMEOUT,
    server_hostname: str | None = None,
    buffer_limit: int = DEFAULT_BUFFER_LIMIT,
    storage_id: str | None = None,
) -> ReplicaConnection:
    """Connect to a replica server and complete the handshake.

    `timeout` bounds the TCP connect, the TLS handshake and the twofold handshake together.
    `storage_id` (`twofold.storage.identity`) names the storage this controller uses; a replica
    serving another refuses. Raises `ConnectFailed` (`ConnectTimeout`), `AuthenticationFailed`,
    `VersionMismatch`, `StorageMismatch` or `HandshakeFailed`; `ValueError` for an empty token.
    """
    hello = client_hello(token, storage_id=storage_id)
    check_max_frame(max_frame)
    if buffer_limit <= 0:
        raise ValueError(f"buffer_limit must be positive, got {buffer_limit}")
    peer = f"{host}:{port}"
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            try:
                reader, writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=ssl,
                    server_hostname=(server_hostname or host) if ssl is not None else None,
                    limit=STREAM_LIMIT,
                )
            except OSError as e:  # refused, unreachable, TLS failures (ssl.SSLError)
                if ssl is not None and isinstance(e, _TLS_FAILURES):
                    raise TlsFailed(
                        f"cannot connect to the replica at {peer}: TLS handshake failed "
                        f"({_why(e)}); does the replica serve TLS, with a trusted certificate?"
                    ) from e
                raise ConnectFailed(f"cannot connect to the replica at {peer}: {_why(e)}") from e
            await _handshake(reader, writer, hello, peer)
    except TimeoutError as e:
        if writer is not None:
            writer.transport.abort()
        raise ConnectTimeout(
            f"connecting to the replica at {peer} took longer than {timeout} s"
        ) from e
    except BaseException:
        if writer is not None:
            writer.transport.abort()
        raise
    return ReplicaConnection(
        reader, writer, peer=peer, max_frame=max_frame, buffer_limit=buffer_limit,
        close_timeout=timeout,
    )  # fmt: skip


async def _handshake(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hello: bytes, peer: str
) -> None:
    try:
        writer.write(frame(hello))
        await writer.drain()
        payload = await read_frame(reader, HANDSHAKE_MAX_FRAME)
    except DecodeError as e:
        raise HandshakeFailed(f"{peer} is not a twofold replica server: {e}") from e
    except asyncio.IncompleteReadError as e:
        raise HandshakeFailed(f"{peer} closed the connection during the handshake") from e
    except OSError as e:
        raise HandshakeFailed(f"the connection to {peer} failed during the handshake: {e}") from e
    if payload is None:
        raise HandshakeFailed(
            f"{peer} closed the connection during the handshake "
            "(a TLS server reached without TLS, or not a twofold replica?)"
        )
    raise_for(parse_server_hello(payload), peer)


# With TLS, a reset or EOF in the middle of connecting is a plaintext peer hanging up on the
# ClientHello (or a failed handshake): not something a retry fixes.
_TLS_FAILURES = (_ssl.SSLError, ConnectionResetError, BrokenPipeError)


def _why(e: OSError) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused (is a replica listening there?)"
    if isinstance(e, socket.gaierror):
        return f"unknown host ({e.strerror or e})"
    if isinstance(e, _ssl.SSLError):
        return str(e.reason or e)
    return e.strerror or str(e)


def check_max_frame(max_frame: int) -> None:
    """Refuse a frame limit a 4-byte header cannot express (shared with the server)."""
    if not 0 < max_frame <= MAX_FRAME_LIMIT:
        raise ValueError(f"max_frame must be in [1, {MAX_FRAME_LIMIT}] bytes, got {max_frame}")
