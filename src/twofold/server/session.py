"""One client session: runs simple and extended queries, COPY, cursors and SUBSCRIBE streams
against the shared database, and writes backend messages.

Contract: the server feeds each frontend message the `Machine` accepted to `Session.handle`;
the session writes the replies through `out` (buffered; `flush` writes and waits for the
socket, which back-pressures a slow reader) and tells the machine what it sent. Every failure
of a statement is an ErrorResponse with the SQLSTATE of the typed error (`sqlstate_of`); after
an error inside `BEGIN` the transaction is failed (`E`) until `ROLLBACK`/`COMMIT`. `close()`
stops every subscription the session holds, releasing its read holds.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from twofold.api.errors import TwofoldError
from twofold.server import messages as m
from twofold.server import shims
from twofold.server.machine import Machine
from twofold.server.params import infer_param_types
from twofold.server.portals import (
    SUB_COLS,
    Column,
    Outcome,
    Portal,
    Prepared,
    SessionError,
    Stream,
    fmt,
    scalar_of,
    state_of,
    table_columns,
)
from twofold.server.statements import (
    CopyStatement,
    command_tag,
    copy_text_row,
    parse_close,
    parse_copy,
    parse_copy_rows,
    parse_declare,
    parse_fetch,
    split_statements,
)
from twofold.server.types import OIDS, SIZES, TEXT, decode, encode
from twofold.sql.errors import FeatureNotSupported

log = logging.getLogger(__name__)
_DUMMY = {"int": 0, "float": 0.0, "str": "", "bool": False, "bytes": b""}



class Session:
    def __init__(self, db: Any, machine: Machine, out: Callable[[bytes], None],
                 drain: Callable[[], Awaitable[None]], user: str, startup: dict[str, str],
                 pid: int) -> None:
        self.db = db
        self.machine = machine
        self.out = out
        self.drain = drain
        self.user = user
        self.pid = pid
        self.vars = shims.Variables(user, startup)
        self.txn = "I"
        self.statements: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self.cursors: dict[str, Stream] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self._copy: tuple[CopyStatement, list[Column], bytearray, bool] | None = None

    # -- framing helpers ------------------------------------------------------------------

    def error(self, e: BaseException) -> None:
        code = state_of(e)
        msg = str(e) or type(e).__name__
        if not isinstance(e, TwofoldError | SessionError):
            log.exception("unexpected error in a session", exc_info=e)
            msg = f"internal error: {type(e).__name__}: {msg}"
        self.out(m.encode_error(code, msg))
        if self.txn == "T":
            self.txn = "E"
        self.machine.sent_error()

    def ready(self) -> None:
        self.out(m.encode_ready(self.txn))
        self.machine.sent_ready()

    def _fields(self, cols: list[Column], formats: tuple[int, ...]) -> list[m.Field]:
        out = []
        for i, (name, scalar) in enumerate(cols):
            oid = OIDS.get(scalar, TEXT)
            out.append((name, oid, SIZES.get(oid, -1), fmt(formats, i)))
        return out

    def _rows(self, cols: list[Column], rows: Any, formats: tuple[int, ...]) -> None:
        scalars = [s for _, s in cols]
        binary = [fmt(formats, i) == 1 for i in range(len(cols))]
        out = self.out
        for row in rows:
            out(m.encode_data_row([encode(v, s, b) for v, s, b in
                                   zip(row, scalars, binary, strict=True)]))

    # -- dispatch -------------------------------------------------------------------------

    async def handle(self, msg: m.Frontend) -> None:
        if isinstance(msg, m.Query):
            await self.simple_query(msg.sql)
        elif isinstance(msg, m.Parse):
            self._guard(self.parse, msg)
        elif isinstance(msg, m.Bind):
            self._guard(self.bind, msg)
        elif isinstance(msg, m.Describe):
            await self._aguard(self.describe(msg))
        elif isinstance(msg, m.Execute):
            await self._aguard(self.execute(msg))
        elif isinstance(msg, m.Close):
            self.close_object(msg)
        elif isinstance(msg, m.Sync):
            if self.portals.get("") is not None and self.txn == "I":
                await self._drop_portal("")
            self.ready()
        elif isinstance(msg, m.Flush):
            pass
        elif isinstance(msg, m.CopyData):
            if self._copy is not None:
                self._copy[2].extend(msg.data)
        elif isinstance(msg, m.CopyDone):
            await self.copy_done()
        elif isinstance(msg, m.CopyFail):
            self._copy = None
            self.machine.copy_finished()
            self.error(SessionError(f"COPY from stdin failed: {msg.message}", "57014"))
            if self.machine.phase.name == "READY":
                self.ready()
        await self.drain()

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

    # -- simple query ---------------------------------------------------------------------

    async def simple_query(self, text: str) -> None:
        statements = split_statements(text)
        if not statements:
            self.out(m.EMPTY_QUERY)
            self.ready()
            return
        for sql in statements:
            try:
                outcome = await self.run(sql, [])
                if outcome.copy is not None and outcome.copy.direction == "in":
                    self._begin_copy_in(outcome, simple=True)
                    return  # ReadyForQuery after CopyDone
                await self._send_outcome(outcome, (), 0)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.error(e)
                break
        self.ready()

    async def _send_outcome(self, o: Outcome, formats: tuple[int, ...], limit: int,
                            describe: bool = True) -> None:
        if o.empty:
            self.out(m.EMPTY_QUERY)
            return
        if o.copy is not None:  # COPY ... TO STDOUT
            assert o.columns is not None
            self.out(m.encode_copy_response(b"H", len(o.columns)))
            scalars = [s for _, s in o.columns]
            if o.stream is not None:
                await self._stream(o.stream, lambda rows: self._copy_rows(rows, scalars))
            count = self._copy_rows(o.rows, scalars)
            self.out(m.COPY_DONE)
            self.out(m.encode_command_complete(f"COPY {count}"))
            return
        if o.columns is not None:
            if describe:
                self.out(m.encode_row_description(self._fields(o.columns, formats)))
            if o.stream is not None:
                cols = o.columns
                await self._stream(o.stream, lambda rows: self._rows(cols, rows, formats))
                self.out(m.encode_command_complete("SUBSCRIBE"))
                return
            self._rows(o.columns, o.rows, formats)
        self.out(m.encode_command_complete(o.tag))

    def _copy_rows(self, rows: Any, scalars: list[str]) -> int:
        n = 0
        for row in rows:
            self.out(m.encode_copy_data(copy_text_row(
                [encode(v, s, False) for v, s in zip(row, scalars, strict=True)])))
            n += 1
        return n

    async def _stream(self, stream: Stream, write: Callable[[list[tuple[Any, ...]]], Any]
                      ) -> None:
        """Write a subscription's rows as they come, one batch per socket drain, until it
        ends; then close it."""
        try:
            while True:
                if stream.pending:
                    rows = list(stream.pending)
                    stream.pending.clear()
                    write(rows)
                    await self.drain()
                if stream.done:
                    return
                await stream.fill(None)
        finally:
            await stream.close()

    # -- running one statement ------------------------------------------------------------

    async def run(self, sql: str, params: list[Any]) -> Outcome:
        txn = shims.classify(sql)
        if self.txn == "E" and txn not in ("COMMIT", "ROLLBACK"):
            raise SessionError("current transaction is aborted, commands ignored until end "
                               "of transaction block", "25P02")
        if txn is not None:
            return self._transaction(txn)
        if (setting := shims.set_statement(sql, self.vars)) is not None:
            name, value = setting
            if name in shims.REPORTED:
                self.out(m.encode_parameter_status(name, value))
            return Outcome("SET")
        if (shown := shims.show_statement(sql, self.vars)) is not None:
            name, value = shown
            return Outcome("SHOW", [(name, "str")], [(value,)])
        if shims.reset_statement(sql, self.vars):
            return Outcome(command_tag(sql, 0))
        if (probe := shims.probe(sql, self.vars, self.pid)) is not None:
            names, row = probe
            return Outcome("SELECT 1", [(n, "str") for n in names], [tuple(row)])
        if (copy := parse_copy(sql)) is not None:
            return await self._copy_statement(copy, params)
        if (declared := parse_declare(sql)) is not None:
            return await self._declare(*declared, params)
        if (fetch := parse_fetch(sql)) is not None:
            return await self._fetch(*fetch)
        if (closed := parse_close(sql)) is not None:
            await self._close_cursor(closed)
            return Outcome("CLOSE CURSOR")
        from twofold.server import catalog

        if catalog.is_catalog_query(sql):
            cols, rows = await catalog.run(self.db, sql, params, self)
            return Outcome(f"SELECT {len(rows)}", cols, rows)
        result = await self.db.sql(sql, params or None)
        return self._outcome(sql, result)

    def _outcome(self, sql: str, result: Any) -> Outcome:
        from twofold.api.results import Result

        if isinstance(result, Result):
            cols: list[Column] = [(n, t.scalar) for n, t in
                                  zip(result.schema.names, result.schema.types, strict=True)]
            return Outcome(f"SELECT {len(result.rows)}", cols, result.rows)
        if hasattr(result, "__anext__") and hasattr(result, "schema"):
            stream = Stream(result)
            return Outcome("SUBSCRIBE", stream.columns, stream=stream)
        if isinstance(result, int) and not isinstance(result, bool):
            return Outcome(command_tag(sql, result))
        return Outcome(command_tag(sql, 0))

    def _transaction(self, what: str) -> Outcome:
        if what == "BEGIN":
            if self.txn == "I":
                self.txn = "T"
            return Outcome("BEGIN")
        if what in ("COMMIT", "ROLLBACK"):
            tag = "ROLLBACK" if self.txn == "E" else what
            self.txn = "I"
            return Outcome(tag)
        return Outcome(what)

    # -- COPY -----------------------------------------------------------------------------

    async def _copy_statement(self, copy: CopyStatement, params: list[Any]) -> Outcome:
        if copy.direction == "in":
            assert copy.table is not None
            obj = self.db.get(copy.table)
            if not hasattr(obj, "insert"):
                raise SessionError(f"cannot copy to {copy.table!r}: it is not a table", "42809")
            cols = table_columns(self.db, copy.table)
            if copy.columns:
                by = dict(cols)
                missing = [c for c in copy.columns if c not in by]
                if missing:
                    raise SessionError(f"column {missing[0]!r} of relation {copy.table!r} "
                                       "does not exist", "42703")
                if sorted(copy.columns) != sorted(by):
                    raise FeatureNotSupported("COPY FROM STDIN needs every column of the table")
                cols = [(c, by[c]) for c in copy.columns]
            return Outcome("COPY", cols, copy=copy)
        if copy.csv or copy.delimiter != "\t":
            raise FeatureNotSupported("COPY TO STDOUT writes the text format only")
        query = copy.query if copy.query is not None else f"SELECT * FROM {copy.table}"
        result = await self.db.sql(query, params or None)
        o = self._outcome(query, result)
        o.copy = copy
        return o

    def _begin_copy_in(self, o: Outcome, simple: bool) -> None:
        assert o.copy is not None and o.columns is not None
        self._copy = (o.copy, o.columns, bytearray(), simple)
        self.out(m.encode_copy_response(b"G", len(o.columns)))
        self.machine.sent_copy_in()

    async def copy_done(self) -> None:
        assert self._copy is not None
        copy, cols, data, simple = self._copy
        self._copy = None
        self.machine.copy_finished()
        try:
            rows = parse_copy_rows(bytes(data), copy, [s for _, s in cols])
            obj = self.db.get(copy.table)
            names = [n for n, _ in cols]
            order = [n for n, _ in table_columns(self.db, copy.table or "")]
            if names != order:
                idx = [names.index(n) for n in order]
                rows = [tuple(r[i] for i in idx) for r in rows]
            if rows:
                await asyncio.to_thread(obj.insert, rows)
            self.out(m.encode_command_complete(f"COPY {len(rows)}"))
        except Exception as e:
            self.error(e)
        if simple:
            self.ready()

    # -- cursors --------------------------------------------------------------------------

    async def _declare(self, name: str, query: str, params: list[Any]) -> Outcome:
        if name in self.cursors:
            raise SessionError(f"cursor \"{name}\" already exists", "42P03")
        result = await self.db.sql(query, params or None)
        o = self._outcome(query, result)
        self.cursors[name] = o.stream if o.stream is not None else \
            Stream.of_rows(o.columns or [], o.rows)
        return Outcome("DECLARE CURSOR")

    async def _fetch(self, name: str, count: int | None, timeout: float | None) -> Outcome:
        stream = self.cursors.get(name)
        if stream is None:
            raise SessionError(f"cursor \"{name}\" does not exist", "34000")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        want = count if count is not None else float("inf")
        while len(stream.pending) < want and not stream.done:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            if deadline is None and stream.pending:
                break  # without a timeout: as soon as some rows are there
            await stream.fill(left)
        n = len(stream.pending) if count is None else min(count, len(stream.pending))
        rows = [stream.pending.popleft() for _ in range(n)]
        return Outcome(f"FETCH {n}", stream.columns, rows)

    async def _close_cursor(self, name: str) -> None:
        names = list(self.cursors) if name.lower() == "all" else [name]
        for n in names:
            stream = self.cursors.pop(n, None)
            if stream is None:
                raise SessionError(f"cursor \"{n}\" does not exist", "34000")
            await stream.close()

    # -- extended query -------------------------------------------------------------------

    def parse(self, msg: m.Parse) -> None:
        if msg.name and msg.name in self.statements:
            raise SessionError(f"prepared statement \"{msg.name}\" already exists", "42P05")
        stmts = split_statements(msg.sql)
        if len(stmts) > 1:
            raise SessionError("cannot insert multiple commands into a prepared statement",
                               "42601")
        sql = stmts[0] if stmts else ""
        oids = infer_param_types(self.db, sql, msg.param_oids)
        self.statements[msg.name] = Prepared(sql, oids)
        self.out(m.PARSE_COMPLETE)

    def bind(self, msg: m.Bind) -> None:
        stmt = self.statements.get(msg.statement)
        if stmt is None:
            raise SessionError(f"prepared statement \"{msg.statement}\" does not exist", "26000")
        if len(msg.params) != len(stmt.param_oids):
            raise SessionError(f"bind message supplies {len(msg.params)} parameters, but "
                               f"prepared statement \"{msg.statement}\" requires "
                               f"{len(stmt.param_oids)}", "08P01")
        fmts = msg.param_formats
        params = [decode(raw, oid, fmt(fmts, i) == 1, i + 1)
                  for i, (raw, oid) in enumerate(zip(msg.params, stmt.param_oids, strict=True))]
        if msg.portal and msg.portal in self.portals:
            raise SessionError(f"cursor \"{msg.portal}\" already exists", "42P03")
        old = self.portals.pop(msg.portal, None)
        if old is not None and old.stream is not None:
            self._closing.add(asyncio.ensure_future(old.stream.close()))
        self.portals[msg.portal] = Portal(stmt.sql, params, msg.result_formats)
        self.out(m.BIND_COMPLETE)

    async def describe(self, msg: m.Describe) -> None:
        if msg.kind == "S":
            stmt = self.statements.get(msg.name)
            if stmt is None:
                raise SessionError(f"prepared statement \"{msg.name}\" does not exist", "26000")
            self.out(m.encode_parameter_description(stmt.param_oids))
            dummy = [_DUMMY.get(scalar_of(o), "") for o in stmt.param_oids]
            cols = await self._describe_sql(stmt.sql, dummy)
            self.out(m.NO_DATA if cols is None else
                     m.encode_row_description(self._fields(cols, ())))
            return
        portal = self._portal(msg.name)
        await self._prime(portal)
        self.out(m.NO_DATA if portal.columns is None or portal.copy is not None else
                 m.encode_row_description(self._fields(portal.columns, portal.formats)))

    async def _describe_sql(self, sql: str, params: list[Any]) -> list[Column] | None:
        from twofold.sql import compile_query
        from twofold.sql.parser import AsOf, Subscribe, parse
        from twofold.sql.statements import views  # noqa: F401 - keeps the SQL layer loaded

        if not sql or shims.classify(sql) or parse_copy(sql) or parse_declare(sql):
            return None
        if shims.set_statement(sql, self.vars) is not None or shims.reset_statement(sql,
                                                                                   self.vars):
            return None
        if (shown := shims.show_statement(sql, self.vars)) is not None:
            return [(shown[0], "str")]
        if (probe := shims.probe(sql, self.vars, self.pid)) is not None:
            return [(n, "str") for n in probe[0]]
        if parse_fetch(sql) is not None:
            f = parse_fetch(sql)
            assert f is not None
            stream = self.cursors.get(f[0])
            return None if stream is None else stream.columns
        from twofold.server import catalog

        if catalog.is_catalog_query(sql):
            cols, _ = await catalog.run(self.db, sql, params, self)
            return cols
        node = parse(sql)
        sub = isinstance(node, Subscribe)
        if isinstance(node, Subscribe):
            from sqlglot import exp

            target = node.this
            node = exp.select("*").from_(target.name) if isinstance(target, exp.Table) \
                else target
        if isinstance(node, AsOf):
            node = node.this
        from sqlglot import exp

        if not isinstance(node, exp.Select | exp.SetOperation | exp.Values | exp.Subquery):
            if isinstance(node, exp.Show) or type(node).__name__ == "Show":
                o = self._outcome(sql, await self.db.sql(sql, params or None))
                return o.columns
            return None
        relation, visible = compile_query(self.db, node, params or None)
        cols = [(n, t.scalar) for n, t in zip(relation.schema.names[:visible],
                                              relation.schema.types[:visible], strict=True)]
        return (SUB_COLS + cols) if sub else cols

    def _portal(self, name: str) -> Portal:
        portal = self.portals.get(name)
        if portal is None:
            raise SessionError(f"portal \"{name}\" does not exist", "34000")
        return portal

    async def _prime(self, portal: Portal) -> None:
        """Run the portal's statement once (rows are then sent by Execute)."""
        if portal.executed:
            return
        portal.executed = True
        o = await self.run(portal.sql, portal.params)
        if o.empty:
            portal.tag = ""
            return
        portal.tag, portal.columns = o.tag, o.columns
        portal.rows = collections.deque(o.rows)
        portal.stream, portal.copy = o.stream, o.copy

    async def execute(self, msg: m.Execute) -> None:
        portal = self._portal(msg.portal)
        await self._prime(portal)
        if portal.tag == "":
            self.out(m.EMPTY_QUERY)
            return
        if portal.copy is not None:
            if portal.copy.direction == "in":
                self._begin_copy_in(Outcome("COPY", portal.columns, copy=portal.copy),
                                    simple=False)
                portal.copy = None
                return
            o = Outcome(portal.tag or "", portal.columns, list(portal.rows or ()),
                        stream=portal.stream, copy=portal.copy)
            portal.rows, portal.stream = collections.deque(), None
            await self._send_outcome(o, (), 0)
            return
        if portal.columns is None:
            self.out(m.encode_command_complete(portal.tag or ""))
            return
        limit = msg.max_rows if msg.max_rows > 0 else None
        rows = portal.rows if portal.rows is not None else collections.deque()
        if portal.stream is not None:
            await self._execute_stream(portal, limit)
            return
        n = len(rows) if limit is None else min(limit, len(rows))
        batch = [rows.popleft() for _ in range(n)]
        self._rows(portal.columns, batch, portal.formats)
        portal.sent += n
        if limit is not None and rows:
            self.out(m.PORTAL_SUSPENDED)
            return
        tag = portal.tag or ""
        if tag.startswith("SELECT"):
            tag = f"SELECT {portal.sent}"
        self.out(m.encode_command_complete(tag))

    async def _execute_stream(self, portal: Portal, limit: int | None) -> None:
        stream = portal.stream
        assert stream is not None and portal.columns is not None
        sent = 0
        while True:
            while stream.pending and (limit is None or sent < limit):
                row = stream.pending.popleft()
                self._rows(portal.columns, [row], portal.formats)
                sent += 1
            if limit is not None and sent >= limit:
                self.out(m.PORTAL_SUSPENDED)
                return
            if stream.done:
                await stream.close()
                portal.stream = None
                self.out(m.encode_command_complete("SUBSCRIBE"))
                return
            await self.drain()
            await stream.fill(None)

    def close_object(self, msg: m.Close) -> None:
        if msg.kind == "S":
            self.statements.pop(msg.name, None)
        else:
            portal = self.portals.pop(msg.name, None)
            if portal is not None and portal.stream is not None:
                self._closing.add(asyncio.ensure_future(portal.stream.close()))
        self.out(m.CLOSE_COMPLETE)

    async def _drop_portal(self, name: str) -> None:
        portal = self.portals.pop(name, None)
        if portal is not None and portal.stream is not None:
            await portal.stream.close()

    async def close(self) -> None:
        """Stop every subscription this session holds (its read holds go with them)."""
        streams = [p.stream for p in self.portals.values() if p.stream is not None]
        streams += [s for s in self.cursors.values() if s.sub is not None]
        self.portals.clear()
        self.cursors.clear()
        for s in streams:
            try:
                await s.close()
            except Exception:
                log.debug("closing a subscription failed", exc_info=True)
