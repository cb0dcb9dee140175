"""One pgwire client connection: its startup, TLS and authentication, then its session's
request loop (`Session`), with the synchronous path that answers a kept lookup's request as
its bytes arrive (`fastpath`, `Connection._now`) and the statement task a hang-up or a
CancelRequest cancels. `Server` (server.py) accepts the connections and keeps their cancel
keys; everything else about one connection is here.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from twofold.server import fastpath, shims
from twofold.server import messages as m
from twofold.server.auth import Authenticator, AuthFailed
from twofold.server.inbox import Inbox
from twofold.server.machine import Machine, Phase
from twofold.server.portals import SessionError
from twofold.server.session import FLUSH_AT, Session

if TYPE_CHECKING:
    from twofold.server.server import Server


class Connection:
    def __init__(self, server: Server, inbox: Inbox, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.inbox = inbox
        inbox.owner = self
        self.writer = writer
        self._held: m.Frontend | None = None  # taken by the synchronous path, for the loop
        self._failure: BaseException | None = None  # raised in the synchronous path
        self.machine = Machine()
        self.session: Session | None = None
        self.task: asyncio.Task[Any] | None = None  # the running statement
        self.cancelled_by_key = False
        self.pid = 0
        self._out: list[bytes] = []
        self._out_size = 0

    def out(self, data: bytes) -> None:
        self._out.append(data)
        self._out_size += len(data)

    def flush(self) -> None:
        """Hand what `out` buffered to the socket, in one write."""
        if self._out:
            data = b"".join(self._out) if len(self._out) > 1 else self._out[0]
            self._out.clear()
            self._out_size = 0
            self.writer.write(data)

    async def drain(self) -> None:
        self.flush()
        await self.writer.drain()

    def backlog(self) -> int:
        """Bytes written and not yet sent (buffered here or in the transport)."""
        return self._out_size + self.writer.transport.get_write_buffer_size()

    async def read(self) -> bytes | None:
        """The bytes received since the last read; b"" at end of stream; None when the
        synchronous path (`_now`) left something for the loop."""
        return await self.inbox.read()

    async def next_message(self) -> m.Frontend | None:
        """The next accepted message, or None at end of stream."""
        while True:
            msg = self.machine.next_message()
            if msg is not None:
                return msg
            data = await self.read()
            if not data:
                return None
            self.machine.receive_data(data)

    def _answer_at_once(self, data: bytes) -> bytes:
        """Answer the kept lookups' requests at the start of `data` from their bytes
        (`fastpath`), between requests only and while the replies not yet sent are few (a
        client that does not read them is back-pressured by the machine's path, which drains
        before it reads on); the rest of `data` (from the first request it does not answer)
        is the machine's."""
        session = self.session
        if (session is None or self._held is not None or self._failure is not None
                or not self.machine.between_requests()):
            return data
        at = 0
        while at < len(data) and self.backlog() <= FLUSH_AT:  # else the machine's path drains
            done = fastpath.answer(session, data, at)
            if done is None:
                break
            reply, at = done
            self.out(reply)
        return data[at:] if at else data

    def fast_ready(self) -> bool:
        """Whether a request received now may be answered from its bytes alone (`fastpath`):
        in a session, nothing buffered, held or failed, the socket's buffer short and the
        connection between requests."""
        return (self.session is not None and not self._out and self._held is None
                and self._failure is None
                and self.writer.transport.get_write_buffer_size() <= FLUSH_AT
                and self.machine.between_requests())

    def _now(self, data: bytes) -> bool:
        """The synchronous path, run by the protocol as bytes arrive while the loop waits for
        them: each complete message the session handles at once (`Session.handle_now`) is
        answered here and the replies written; the first one it cannot is left in `_held`
        for the loop (and so is a full socket buffer to drain, or an error to raise)."""
        session = self.session
        assert session is not None
        transport = self.writer.transport
        if self.fast_ready():
            # The common case: one kept lookup's request, answered in one write — its checks
            # shared with the iteration's other receives (`Turn.scope`).
            turn = self.server.turn
            turn.scope()
            done = fastpath.answer(session, data, 0)
            if done is not None:
                reply, at = done
                if at == len(data):
                    turn.write(transport, reply)  # after the turn's others
                    return True
                turn.unscope()  # what came after it may have arrived after the checks
                self.out(reply)
                data = self._answer_at_once(data[at:])
            # else not a request it answers: the machine's (`_answer_at_once` would only
            # ask the fast path the same question again)
        else:
            data = self._answer_at_once(data)
        if not data:
            self.flush()
            return True
        self.machine.receive_data(data)
        try:
            while True:
                msg = self.machine.next_message()
                if msg is None:
                    break
                if isinstance(msg, m.Terminate) or not session.handle_now(msg):
                    self._held = msg
                    self.inbox.poke()
                    break
                if self._out_size > FLUSH_AT:
                    self.flush()
                    if self.writer.transport.get_write_buffer_size() > FLUSH_AT:
                        self.inbox.poke()  # the loop drains it, then goes on
                        break
        except Exception as e:  # a protocol violation: the loop raises it
            self._failure = e
            self.inbox.poke()
        self.flush()
        return True

    async def serve(self) -> None:
        try:
            await self._serve()
        except m.ProtocolViolation as e:
            with contextlib.suppress(Exception):
                self.out(m.encode_error("08P01", f"protocol violation: {e}", "FATAL"))
                await self.drain()
        except AuthFailed as e:
            with contextlib.suppress(Exception):
                self.out(m.encode_error(e.code, str(e), "FATAL"))
                await self.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.machine.close()
            if self.session is not None:
                await self.session.close()
            self.server._keys.pop(self.pid, None)
            with contextlib.suppress(Exception):
                if self.server.closing:  # as PostgreSQL's shutdown: say why, then close
                    self.out(m.encode_error("57P01", "terminating connection due to "
                                            "administrator command", "FATAL"))
                self.flush()
                self.writer.close()

    async def _serve(self) -> None:
        startup = await self._startup()
        if startup is None:
            return
        user = startup.params.get("user", "")
        if not user:
            raise AuthFailed("no PostgreSQL user name specified in startup packet", "28000")
        database = startup.params.get("database", user)
        if database != shims.DATABASE:
            raise AuthFailed(f"database \"{database}\" does not exist", "3D000")
        auth = Authenticator(self.server.auth, self.server.passwords)
        reply, done = auth.start(user)
        self.out(reply)
        while not done:
            await self.drain()
            msg = await self.next_message()
            if msg is None:
                return
            if isinstance(msg, m.Terminate):
                return
            assert isinstance(msg, m.Password)
            reply, done = auth.step(msg.data)
            self.out(reply)
        self.machine.sent_auth_ok()
        self.pid, secret = self.server._new_key(self)
        session = Session(self.server.db, self.machine, self.out, self.drain, user,
                          startup.params, self.pid, self.backlog)
        self.session = session
        session.activity.peer = self.writer.get_extra_info("peername")
        for name in shims.REPORTED:
            self.out(m.encode_parameter_status(name, session.vars.values[name]))
        self.out(m.encode_backend_key(self.pid, secret))
        session.ready()
        await self.drain()
        await self._loop(session)

    async def _startup(self) -> m.Startup | None:
        while True:
            msg = await self.next_message()
            if msg is None:
                return None
            if isinstance(msg, m.SslRequest):
                if self.server.tls is None:
                    self.out(m.SSL_NO)
                    await self.drain()
                    continue
                self.out(m.SSL_YES)
                await self.drain()
                await self.writer.start_tls(self.server.tls)
                continue
            if isinstance(msg, m.GssEncRequest):
                self.out(m.SSL_NO)
                await self.drain()
                continue
            if isinstance(msg, m.CancelRequest):
                self.server._cancel(msg.pid, msg.secret)
                return None
            assert isinstance(msg, m.Startup)
            return msg

    async def _loop(self, session: Session) -> None:
        self._pending: asyncio.Task[bytes | None] | None = None
        try:
            await self._run_loop(session)
        finally:
            # However the loop ended (a hang-up, a reset, a protocol error), the running
            # statement is cancelled, so its subscription closes and its read holds go.
            if self.task is not None and not self.task.done():
                self.task.cancel()
                with contextlib.suppress(BaseException):
                    await self.task
            if self._pending is not None:
                self._pending.cancel()
                with contextlib.suppress(BaseException):
                    await self._pending

    async def _run_loop(self, session: Session) -> None:
        pending: asyncio.Task[bytes | None] | None = None
        while True:
            msg, self._held = self._held, None
            if msg is None:
                msg = self.machine.next_message()
            if msg is None:
                await self.drain()  # the replies so far, in one write (back-pressured)
                if pending is None:
                    # Bytes arriving now are answered as they come where that needs no wait
                    # (`_now`); the read returns once the loop has something to do.
                    self.inbox.now = self._now
                    try:
                        data = await self.read()
                    finally:
                        self.inbox.now = None
                else:  # the read that watched the last statement
                    data = await pending
                    pending = self._pending = None
                if self._failure is not None:
                    failure, self._failure = self._failure, None
                    raise failure
                if data is None:
                    continue  # the synchronous path left a message (or a drain) for the loop
                if not data:
                    return
                data = self._answer_at_once(data)
                if data:
                    self.machine.receive_data(data)
                continue
            if isinstance(msg, m.Terminate):
                return
            # A message that needs no wait (a kept point lookup's Bind/Describe/Execute/Sync)
            # is handled here, with no task and no socket watch: nothing can hang up mid-way.
            if session.handle_now(msg):
                if self._out_size > FLUSH_AT:
                    await self.drain()
                continue
            # Run the statement while watching the socket: a hang-up cancels it.
            self.task = asyncio.ensure_future(self._handle_received(session, msg))
            self.cancelled_by_key = False
            while True:
                if pending is None:
                    pending = self._pending = asyncio.ensure_future(self.read())
                done, _ = await asyncio.wait({self.task, pending},
                                             return_when=asyncio.FIRST_COMPLETED)
                if self.task in done:
                    break
                data = pending.result()
                pending = None
                if not data:  # the client went away mid-statement
                    self.task.cancel()
                    with contextlib.suppress(BaseException):
                        await self.task
                    return
                self.machine.receive_data(data)
            task, self.task = self.task, None
            try:
                if task.result():
                    return  # a Terminate among the messages
            except asyncio.CancelledError:
                if not self.cancelled_by_key:
                    raise
                session.error(SessionError("canceling statement due to user request", "57014"))
                if self.machine.phase is Phase.READY:
                    session.ready()
                await self.drain()

    async def _handle_received(self, session: Session, msg: m.Frontend) -> bool:
        """Handle `msg` and every message received after it that is already complete (a
        client's Bind/Describe/Execute/Sync arrive together: one task for all of them); True
        when a Terminate ends them."""
        while True:
            await session.handle(msg)
            nxt = self.machine.next_message()
            if nxt is None:
                return False
            if isinstance(nxt, m.Terminate):
                return True
            msg = nxt

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.cancelled_by_key = True
            self.task.cancel()
