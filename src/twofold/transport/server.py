"""The replica's end of the network: `ReplicaServer` serves one controller connection at a time.

`target` is the replica's compute endpoint (the multiplexer, or a solo runtime): one
`ComputeClient` that outlives connections. The server owns the listening socket, one task per
accepted connection and one **response pump** task; it never closes `target` (whoever assembled
the replica does).

Contract (`spec/runtime.md`, "The replica process"):
- Every connection first completes the handshake of `handshake.py` (magic, wire version, token
  checked in constant time, then the controller's storage id against `storage_id`) within
  `handshake_timeout`, before any command is read. A refused handshake is answered with its
  reason (so the client can say why), logged, and closes only that connection.
- A connection that completes the handshake **supersedes** the current one: the old socket is
  aborted and its task cancelled, so none of its reads reach `target` afterwards. The first
  command on a connection must be `Hello`.
- A frame is decoded completely before its command is sent to `target`; an oversized frame
  header (refused before its payload is read), a truncated or undecodable frame, or a
  protocol violation closes that connection with a logged reason. The server keeps serving.
- The pump moves `target.recv()` results to the current connection. A response arriving while no
  connection is current is **dropped** (logged at debug level): the controller replays its
  history after reconnecting, which re-creates whatever it still needs.
- Shared fate: when `target.recv()` returns `None` or raises (or yields a response that cannot
  be encoded), the replica endpoint has ended and the server closes; `wait_closed()` returns
  and `exception` holds the cause (`EndpointEnded` for a `None`), so the replica process can
  exit non-zero. `aclose()` is an orderly stop and leaves `exception` as `None`.
- TLS handshake failures happen inside asyncio before a connection reaches the server; the
  client gets a clear error, the server keeps serving (asyncio logs them only in debug mode).

Invariant: commands reach `target` only whole, only from the current connection, and in the
order that connection sent them; a connection never becomes current while an older one is in
the middle of `target.send` (both take `_send_lock`).
Backpressure: commands are read one frame at a time; responses are written with `drain()`.
Responses produced in one event-loop turn leave in one socket write (`coalesce.py`): a burst of
lookups read together is answered with one `send`, not one per response (with `eager_first`,
two: the turn's first response at once, so the controller starts on it).
"""

from __future__ import annotations

import asyncio
import logging
import ssl as _ssl
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final

from twofold.client import ComputeClient
from twofold.protocol import ComputeResponse, DecodeError, FrameTooLarge, Hello
from twofold.protocol.codec import decode_command, encode
from twofold.protocol.framing import DEFAULT_MAX_FRAME, frame, read_frame
from twofold.transport.client import STREAM_LIMIT, check_max_frame
from twofold.transport.coalesce import Coalescer
from twofold.transport.errors import EndpointEnded
from twofold.transport.handshake import (
    HANDSHAKE_MAX_FRAME,
    Authenticator,
    HelloStatus,
    Verdict,
    server_hello,
)

logger = logging.getLogger(__name__)

DEFAULT_HANDSHAKE_TIMEOUT: Final = 10.0


@dataclass(eq=False)
class _Connection:
    number: int
    peer: str
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    task: asyncio.Task[None] | None = field(default=None)
    started: bool = field(default=False)  # its Hello reached the target
    eager: bool = field(default=False)  # the first response of a turn leaves at once
    out: Coalescer = field(init=False)  # responses written in one loop turn leave in one send

    def __post_init__(self) -> None:
        self.out = Coalescer(self.writer, eager=self.eager)

    def __str__(self) -> str:
        return f"#{self.number} ({self.peer})"

    def abort(self) -> None:
        self.out.discard()
        self.writer.transport.abort()

    def close(self) -> None:
        """Close after the responses gathered so far are written."""
        self.out.flush()
        self.writer.close()


class ReplicaServer:
    """Serves `target` to one controller connection at a time. See the module docstring."""

    def __init__(
        self,
        target: ComputeClient,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | bytes | None = None,
        ssl: _ssl.SSLContext | None = None,
        *,
        max_frame: int = DEFAULT_MAX_FRAME,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        storage_id: str | None = None,
        storage: str = "",
        eager_first: bool = False,
    ) -> None:
        check_max_frame(max_frame)
        self._eager_first = eager_first
        self._target = target
        self._host = host
        self._port = port
        self._ssl = ssl
        self._auth = Authenticator(token, storage_id=storage_id, storage=storage)
        self._max_frame = max_frame
        self._handshake_timeout = handshake_timeout
        self._server: asyncio.Server | None = None
        self._pump: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._send_lock = asyncio.Lock()
        self._current: _Connection | None = None
        self._connections: set[_Connection] = set()
        self._count = 0
        self._address: tuple[str, int] | None = None
        self._exception: BaseException | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind and start serving. Port 0 picks a free port; see `address`."""
        if self._server is not None:
            raise RuntimeError("ReplicaServer.start() called twice")
        if self._close_task is not None:
            raise RuntimeError("ReplicaServer.start() after aclose()")
        self._server = await asyncio.start_server(
            self._serve,
            self._host,
            self._port,
            ssl=self._ssl,
            ssl_handshake_timeout=self._handshake_timeout if self._ssl is not None else None,
            limit=STREAM_LIMIT,
        )
        name = self._server.sockets[0].getsockname()
        self._address = host, port = str(name[0]), int(name[1])
        self._pump = asyncio.get_running_loop().create_task(
            self._pump_responses(), name="twofold-transport-response-pump"
        )
        logger.info(
            "replica server listening on %s:%d (%s, %s)",
            host, port, "TLS" if self._ssl else "plaintext",
            "token required" if self._auth.requires_token else "no token",
        )  # fmt: skip

    @property
    def address(self) -> tuple[str, int]:
        """The bound `(host, port)` (still reported after the server closed)."""
        if self._address is None:
            raise RuntimeError("the server has no address before start()")
        return self._address

    @property
    def exception(self) -> BaseException | None:
        """Why the server closed on its own (shared fate): the error `target.recv()` raised, or
        `EndpointEnded` if it returned `None`. `None` while serving and after `aclose()`."""
        return self._exception

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        """Wait until the server has closed (by `aclose()` or because `target` ended)."""
        await self._closed.wait()

    async def aclose(self) -> None:
        """Stop listening, close every connection and wait for all the server's tasks."""
        self._begin_close(None)
        assert self._close_task is not None
        await asyncio.shield(self._close_task)

    async def __aenter__(self) -> ReplicaServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _begin_close(self, cause: BaseException | None) -> None:
        if self._close_task is not None:
            return
        if cause is not None:
            self._exception = cause
            logger.error(
                "the replica endpoint ended; closing the server: %s",
                cause,
                exc_info=None if isinstance(cause, EndpointEnded) else cause,
            )
        self._close_task = asyncio.get_running_loop().create_task(
            self._teardown(), name="twofold-transport-server-close"
        )

    async def _teardown(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks: list[asyncio.Task[None]] = []
        if self._pump is not None:
            self._pump.cancel()
            tasks.append(self._pump)
        for conn in list(self._connections):
            # Graceful: responses already written reach the controller before the FIN.
            conn.close()
            if conn.task is not None:
                conn.task.cancel()
                tasks.append(conn.task)
        self._current = None
        if tasks:
            await asyncio.wait(tasks)
        if self._server is not None:
            await self._server.wait_closed()
        self._closed.set()
        if self._server is not None:  # a server that never listened has nothing to report
            logger.info("replica server closed")

    # -- responses -----------------------------------------------------------------------------

    async def _pump_responses(self) -> None:
        try:
            while True:
                response = await self._target.recv()
                if response is None:
                    raise EndpointEnded("the replica endpoint ended (its recv returned None)")
                await self._deliver(response)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._begin_close(e)

    async def _deliver(self, response: ComputeResponse) -> None:
        conn = self._current
        # Until the connection's Hello has reached the target, whatever the target answers
        # belongs to the previous protocol iteration.
        if conn is None or not conn.started or conn.writer.is_closing():
            logger.debug(
                "no controller connected: dropping %s (the controller replays on reconnect)",
                type(response).__name__,
            )
            return
        conn.out.write(frame(encode(response)))
        try:
            await conn.writer.drain()
        except OSError as e:
            # The connection broke or was superseded mid-write; its reader notices and ends it.
            logger.debug("connection %s lost writing %s: %s", conn, type(response).__name__, e)

    # -- connections ---------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._count += 1
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if isinstance(peername, tuple) else str(peername)
        conn = _Connection(
            self._count, peer, reader, writer, asyncio.current_task(), eager=self._eager_first
        )
        if self._close_task is not None:
            conn.abort()
            return
        self._connections.add(conn)
        try:
            if await self._handshake(conn):
                await self._read_commands(conn)
        except asyncio.CancelledError:
            pass  # superseded or server closing; the finally block closes the socket
        except Exception:
            # Never let one connection take the server down; this is a bug, so say so loudly.
            logger.exception("connection %s failed unexpectedly; closing it", conn)
        finally:
            self._connections.discard(conn)
            if self._current is conn:
                self._current = None
            if not writer.is_closing():
                conn.close()

    async def _handshake(self, conn: _Connection) -> bool:
        """Run the handshake; on success `conn` is the current connection."""
        try:
            async with asyncio.timeout(self._handshake_timeout):
                payload = await read_frame(conn.reader, HANDSHAKE_MAX_FRAME)
                if payload is None:
                    logger.info("connection %s closed before the handshake", conn)
                    return False
                verdict = self._auth.judge(payload)
                if not verdict.ok:
                    logger.warning("refusing connection %s: %s", conn, verdict.reason)
                    conn.writer.write(frame(server_hello(verdict)))
                    await conn.writer.drain()
                    return False
        except TimeoutError:
            logger.warning(
                "refusing connection %s: no handshake within %s s", conn, self._handshake_timeout
            )
            return False
        except FrameTooLarge as e:
            if e.size >> 16 == 0x1603:  # a TLS record header (handshake, TLS 1.x) read as a length
                logger.warning("refusing connection %s: a TLS client, but this replica serves "
                               "plaintext (TLS needs --tls-cert and --tls-key)", conn)  # fmt: skip
            else:
                logger.warning("refusing connection %s: not a twofold client hello: %s", conn, e)
            conn.abort()  # no answer: the unread payload would reset the socket under it anyway
            return False
        except asyncio.IncompleteReadError:
            logger.warning("refusing connection %s: it ended in the middle of its hello", conn)
            return False
        except OSError as e:
            logger.warning("connection %s failed during the handshake: %s", conn, e)
            return False
        async with self._send_lock:
            old = self._current
            if old is not None:
                logger.info("connection %s supersedes connection %s", conn, old)
                old.abort()
                if old.task is not None:
                    old.task.cancel()
            # Written before `conn` becomes current, so no response can precede the answer.
            conn.writer.write(frame(server_hello(Verdict(HelloStatus.OK))))
            self._current = conn
        logger.info("controller connected: %s", conn)
        return True

    async def _read_commands(self, conn: _Connection) -> None:
        first = True
        while True:
            try:
                payload = await read_frame(conn.reader, self._max_frame)
            except FrameTooLarge as e:
                logger.warning("closing connection %s: %s", conn, e)
                conn.abort()  # the payload is never read; discard it with the socket
                return
            except asyncio.IncompleteReadError as e:
                logger.warning(
                    "closing connection %s: it ended in the middle of a frame "
                    "(%d of %s bytes received)",
                    conn, len(e.partial), e.expected,
                )  # fmt: skip
                return
            except OSError as e:
                logger.info("connection %s lost: %s", conn, e)
                return
            if payload is None:
                logger.info("connection %s closed by the controller", conn)
                return
            try:
                command = decode_command(payload, max_size=self._max_frame)
            except DecodeError as e:
                logger.warning("closing connection %s: undecodable command: %s", conn, e)
                conn.abort()
                return
            if first and not isinstance(command, Hello):
                logger.warning(
                    "closing connection %s: protocol violation: the first command must be "
                    "Hello, got %s",
                    conn, type(command).__name__,
                )  # fmt: skip
                conn.abort()
                return
            first = False
            # `async with`'s two extra coroutines cost ~0.5 us per command (every lookup).
            lock = self._send_lock
            await lock.acquire()
            try:
                if self._current is not conn:
                    return  # superseded while this frame was in flight: it must not apply
                try:
                    await self._target.send(command)
                except Exception as e:
                    logger.error(
                        "closing connection %s: the replica endpoint refused %s: %r",
                        conn, type(command).__name__, e,
                    )  # fmt: skip
                    conn.abort()
                    return
                if isinstance(command, Hello):
                    conn.started = True
            finally:
                lock.release()
