"""One client session: takes the frontend messages the machine accepted, runs them against the
shared database, and writes backend messages.

Contract: the server feeds each frontend message the `Machine` accepted to `Session.handle`;
the session writes the replies through `out` (buffered; `drain` writes and waits for the
socket, which back-pressures a slow reader) and tells the machine what it sent. Every failure
of a statement is an ErrorResponse with the SQLSTATE of the typed error (`state_of`); after
an error inside `BEGIN` the transaction is failed (`E`) until `ROLLBACK`/`COMMIT`. `close()`
stops every subscription the session holds, releasing its read holds.

Which part answers a statement is `run.py`; the extended protocol is `extended.py`; cursors
`cursors.py`; COPY `copy.py`; row encoding `output.py`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from twofold.api.errors import TwofoldError
from twofold.server import messages as m
from twofold.server import monitoring, shims, staging
from twofold.server import run as run_statement
from twofold.server.copy import CopyIn, CopyOut
from twofold.server.cursors import Cursors
from twofold.server.extended import Extended
from twofold.server.machine import Machine
from twofold.server.output import ROWS_PER_TURN, RowEncoder, data_rows, fields
from twofold.server.portals import Outcome, SessionError, Stream, state_of
from twofold.server.statements import split_statements
from twofold.server.transaction import Transaction

log = logging.getLogger(__name__)
FLUSH_AT = 1 << 16  # replies buffered past this are sent even while more messages wait
STREAM_CHUNK = 256
"""A streaming session writes a subscription's rows this many at a time, each piece drained
before the next: what a reader that stops reading leaves in the server's write buffer is one
piece, however many writes one batch of the subscription covers."""


class Session:
    def __init__(self, db: Any, machine: Machine, out: Callable[[bytes], None],
                 drain: Callable[[], Awaitable[None]], user: str, startup: dict[str, str],
                 pid: int, backlog: Callable[[], int] = lambda: 0) -> None:
        self.db = db
        self.machine = machine
        self.out = out
        self.drain = drain
        self.backlog = backlog  # bytes written and not yet sent
        self.user = user
        self.pid = pid
        self.vars = shims.Variables(user, startup)
        self.tx = Transaction()
        self.extended = Extended(self)
        self.cursors = Cursors(db, lambda sql, params: staging.sql(self, sql, params))
        self._copy: CopyIn | None = None
        self.simple_rest = 0  # statements after the running one in its Query message
        self.simple_many = False  # the running Query message holds several statements
        self.activity = monitoring.Activity()  # what pg_stat_activity shows of it
        monitoring.track(db, self)
        self._after_copy: list[str] = []  # a Query's statements after its COPY FROM STDIN

    # -- framing helpers ------------------------------------------------------------------

    def error(self, e: BaseException) -> None:
        code = state_of(e)
        # an evaluation error is PostgreSQL's message alone, without what was being read
        msg = getattr(e, "primary", None) or str(e) or type(e).__name__
        if not isinstance(e, TwofoldError | SessionError):
            log.exception("unexpected error in a session", exc_info=e)
            msg = f"internal error: {type(e).__name__}: {msg}"
        self.out(m.encode_error(code, msg, routine=getattr(e, "routine", None),
                                hint=getattr(e, "hint", None)))
        self.tx.fail()
        self.machine.sent_error()

    def ready(self) -> None:
        self.out(m.encode_ready(self.txn))
        self.machine.sent_ready()

    # -- dispatch -------------------------------------------------------------------------

    def handle_now(self, msg: m.Frontend) -> bool:
        """Handle `msg` synchronously if that needs no wait — Parse, Bind, Close, Flush, and
        Describe/Execute/Sync of a portal whose statement runs at once (a kept point lookup,
        `Extended.prime_now`) — as `handle` would; False (nothing done) when it must be
        awaited. The caller sends the replies (`handle`'s drain) once no message waits."""
        ext = self.extended
        if isinstance(msg, m.Bind):
            self._guard(ext.bind, msg)
        elif isinstance(msg, m.Describe):
            return self._guard_now(ext.describe_now, msg)
        elif isinstance(msg, m.Execute):
            return self._guard_now(ext.execute_now, msg)
        elif isinstance(msg, m.Sync):
            if not ext.sync_now():
                return False
            self.ready()
        elif isinstance(msg, m.Parse):
            self._guard(ext.parse, msg)
        elif isinstance(msg, m.Close):
            ext.close(msg)
        elif not isinstance(msg, m.Flush):
            return False
        return True

    def _guard_now(self, fn: Callable[[Any], bool], msg: Any) -> bool:
        try:
            return fn(msg)
        except Exception as e:
            self.error(e)
            return True

    async def handle(self, msg: m.Frontend) -> None:
        ext = self.extended
        if isinstance(msg, m.Query):
            self.activity.start(msg.sql)
            try:
                await self.simple_query(msg.sql)
            finally:
                self.activity.stop()
        elif isinstance(msg, m.Parse):
            self._guard(ext.parse, msg)
        elif isinstance(msg, m.Bind):
            self._guard(ext.bind, msg)
        elif isinstance(msg, m.Describe):
            await self._aguard(ext.describe(msg))
        elif isinstance(msg, m.Execute):
            portal = ext.portals.get(msg.portal)
            self.activity.start(portal.sql if portal is not None else "")
            try:
                await self._aguard(ext.execute(msg))
            finally:
                self.activity.stop()
        elif isinstance(msg, m.Close):
            ext.close(msg)
        elif isinstance(msg, m.Sync):
            await ext.sync()
            self.ready()
        elif isinstance(msg, m.Flush):
            pass
        elif isinstance(msg, m.CopyData):
            if self._copy is not None:
                self._copy.feed(msg.data)
        elif isinstance(msg, m.CopyDone):
            await self.copy_done()
        elif isinstance(msg, m.CopyFail):
            self._copy = None
            self._after_copy = []
            self.machine.copy_finished()
            self.error(SessionError(f"COPY from stdin failed: {msg.message}", "57014"))
            if self.machine.phase.name == "READY":
                await self._statements([])  # ends the Query message's implicit transaction
        if not self.machine.has_message() or self.backlog() > FLUSH_AT:
            await self.drain()  # the replies to pipelined messages go out together

    def _guard(self, fn: Callable[[Any], None], msg: Any) -> None:
        try:
            fn(msg)
        except Exception as e:
            self.error(e)

    async def _aguard(self, aw: Awaitable[None]) -> None:
        try:
            await aw
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.error(e)

    # -- running statements ---------------------------------------------------------------

    async def run(self, sql: str, params: list[Any]) -> Outcome:
        return await run_statement.run(self, sql, params)

    @property
    def txn(self) -> str:
        """The transaction status ReadyForQuery reports (`transaction.Transaction`)."""
        return self.tx.status

    async def simple_query(self, text: str) -> None:
        statements = split_statements(text)
        if not statements:
            self.out(m.EMPTY_QUERY)
            self.ready()
            return
        self.simple_many = len(statements) > 1
        if self.simple_many and (bad := shims.syntax_error(statements)) is not None:
            self.error(bad)  # none of them runs, as in PostgreSQL
            statements = []
        await self._statements(statements)

    async def _statements(self, statements: list[str]) -> None:
        """Run a Query message's statements in order, stopping at the first error; a write
        with more after it opens the implicit transaction they share (`staging`), which ends
        with the message (applied, or discarded after an error). COPY FROM STDIN pauses
        them: `copy_done` runs the rest."""
        for i, sql in enumerate(statements):
            self.simple_rest = len(statements) - 1 - i
            try:
                outcome = await self.run(sql, [])
                if outcome.copy is not None and outcome.copy.direction == "in":
                    self.begin_copy_in(outcome, simple=True)
                    self._after_copy = statements[i + 1:]
                    return  # the rest and ReadyForQuery after CopyDone
                await self.send_outcome(outcome, ())
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.error(e)
                break
        self.simple_rest, self.simple_many = 0, False
        await staging.end_implicit(self)  # the message (or a Query after Execute) ends it
        self.ready()

    async def send_outcome(self, o: Outcome, formats: tuple[int, ...],
                           describe: bool = True) -> None:
        """Write an Outcome in full: rows, a COPY TO's data, a SUBSCRIBE's stream to its end."""
        if o.empty:
            self.out(m.EMPTY_QUERY)
            return
        if o.copy is not None:  # COPY ... TO STDOUT
            assert o.columns is not None
            copy_out = CopyOut(o.copy, [s for _, s in o.columns], [n for n, _ in o.columns])
            self.out(copy_out.start())
            if o.stream is not None:
                await self._stream(o.stream, lambda rows: self.out(copy_out.rows(rows)))
            await self.send_rows(copy_out.rows, o.rows)
            self.out(copy_out.finish())
            self.out(m.encode_command_complete(f"COPY {copy_out.count}"))
            return
        if o.columns is not None:
            cols = o.columns
            if describe:
                self.out(m.encode_row_description(fields(cols, formats)))
            if o.stream is not None:
                await self._stream(o.stream, lambda rows: self.out(data_rows(cols, rows,
                                                                             formats)))
                self.out(m.encode_command_complete("SUBSCRIBE"))
                return
            encoder = RowEncoder(cols, formats)
            await self.send_rows(encoder.rows, o.rows)
        self.out(m.encode_command_complete(o.tag))

    async def send_rows(self, encode: Callable[[list[tuple[Any, ...]]], bytes],
                        rows: list[tuple[Any, ...]]) -> None:
        """`self.out(encode(rows))`, `ROWS_PER_TURN` rows at a time, draining the socket and
        letting the event loop run between pieces (the other sessions' requests)."""
        if len(rows) <= ROWS_PER_TURN:
            self.out(encode(rows))
            return
        for i in range(0, len(rows), ROWS_PER_TURN):
            if i:
                await self.drain()
                await asyncio.sleep(0)
            self.out(encode(rows[i:i + ROWS_PER_TURN]))

    async def _stream(self, stream: Stream, write: Callable[[list[tuple[Any, ...]]], Any]
                      ) -> None:
        """Write a subscription's rows as they come, `STREAM_CHUNK` rows per socket drain,
        until it ends; then close it."""
        try:
            while True:
                if stream.pending:
                    rows = list(stream.pending)
                    stream.pending.clear()
                    for i in range(0, len(rows), STREAM_CHUNK):
                        if i and i % ROWS_PER_TURN == 0:
                            await asyncio.sleep(0)  # the other sessions' requests
                        write(rows[i:i + STREAM_CHUNK])
                        await self.drain()
                if stream.done:
                    return
                await stream.fill(None)
        finally:
            await stream.close()

    # -- COPY FROM STDIN ------------------------------------------------------------------

    def begin_copy_in(self, o: Outcome, simple: bool) -> None:
        assert o.copy is not None and o.columns is not None
        self._copy = CopyIn(o.copy, o.columns, simple)
        self.out(m.encode_copy_response(b"G", len(o.columns), o.copy.binary))
        self.machine.sent_copy_in()

    async def copy_done(self) -> None:
        copy = self._copy
        assert copy is not None
        self._copy = None
        self.machine.copy_finished()
        rest, self._after_copy = self._after_copy, []
        try:
            count = await copy.finish(self.db, lambda table, rows: staging.insert_rows(
                self, table, rows))
            self.out(m.encode_command_complete(f"COPY {count}"))
        except Exception as e:
            self.error(e)
            rest = []  # an error stops the Query message's other statements
        if copy.simple:
            await self._statements(rest)

    # -- ending ---------------------------------------------------------------------------

    async def close(self) -> None:
        """Stop every subscription this session holds (its read holds go with them), and
        release its transaction's read holds."""
        staging.release(self)
        monitoring.untrack(self.db, self)
        streams = self.extended.take_streams() + self.cursors.take_streams()
        for s in streams:
            try:
                await s.close()
            except Exception:
                log.debug("closing a subscription failed", exc_info=True)
