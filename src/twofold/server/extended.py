"""The extended query protocol of one session: Parse, Bind, Describe, Execute, Close, and the
unnamed portal's end at Sync.

Contract: Parse keeps a named or unnamed statement with its parameter types (inferred where the
client sent 0; the statement is not checked against the catalog until Describe or Execute).
Bind decodes the parameters into a portal; the portal's statement runs once, at its first
Describe or Execute, and Execute sends its rows up to the row limit (PortalSuspended when rows
remain), streaming a SUBSCRIBE's rows as they come. Errors are raised for the session to
report (it then skips to Sync).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import weakref
from typing import TYPE_CHECKING, Any

from twofold.server import messages as m
from twofold.server import staging
from twofold.server.describe import describe_sql
from twofold.server.output import (
    ROWS_PER_TURN,
    RowEncoder,
    data_rows,
    fields,
    row_description,
)
from twofold.server.params import infer_param_types
from twofold.server.portals import Outcome, Portal, Prepared, SessionError, fmt, scalar_of
from twofold.server.run import run_now
from twofold.server.statements import split_statements
from twofold.server.types import decode
from twofold.sql.prepared import catalog_version, refresh_catalog

if TYPE_CHECKING:
    from twofold.server.session import Session



def _changed_result_type() -> SessionError:
    # PostgreSQL's routine name is what asyncpg recognises to prepare again.
    return SessionError("cached plan must not change result type", "0A000",
                        routine="RevalidateCachedQuery")


_DUMMY = {"int": 0, "float": 0.0, "str": "", "bool": False, "bytes": b""}
_TYPES_KEPT = 512
_param_types_kept: weakref.WeakKeyDictionary[
    Any, collections.OrderedDict[tuple[str, tuple[int, ...]], tuple[int, tuple[int, ...]]]] = \
    weakref.WeakKeyDictionary()


def _param_types(db: Any, sql: str, given: tuple[int, ...]) -> tuple[int, ...]:
    """`infer_param_types`, kept per database, statement and given types until the catalog's
    version moves (a driver parses its unnamed statement again for every execution)."""
    kept = _param_types_kept.get(db)
    if kept is None:
        kept = _param_types_kept[db] = collections.OrderedDict()
    with contextlib.suppress(Exception):  # a catalog that cannot be read: errors at Execute
        refresh_catalog(db)  # a storage read only when the catalog may have moved
    version = catalog_version(db)
    key = (sql, given)
    hit = kept.get(key)
    if hit is not None and hit[0] == version:
        kept.move_to_end(key)
        return hit[1]
    oids = infer_param_types(db, sql, given)
    kept[key] = (version, oids)
    if len(kept) > _TYPES_KEPT:
        kept.popitem(last=False)
    return oids


class Extended:
    def __init__(self, session: Session) -> None:
        self.s = session
        self.statements: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}
        self._closing: set[asyncio.Future[None]] = set()
        self.running = ""  # the portal whose statement runs (Describe or Execute named it)

    def parse(self, msg: m.Parse) -> None:
        if msg.name and msg.name in self.statements:
            raise SessionError(f"prepared statement \"{msg.name}\" already exists", "42P05")
        stmts = split_statements(msg.sql)
        if len(stmts) > 1:
            raise SessionError("cannot insert multiple commands into a prepared statement",
                               "42601")
        sql = stmts[0] if stmts else ""
        oids = _param_types(self.s.db, sql, msg.param_oids)
        self.statements[msg.name] = Prepared(sql, oids)
        self.s.out(m.PARSE_COMPLETE)

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
        self.portals[msg.portal] = Portal(stmt.sql, params, msg.result_formats, statement=stmt)
        self.s.out(m.BIND_COMPLETE)

    def describe_now(self, msg: m.Describe) -> bool:
        """`describe(msg)` done synchronously, when it needs no wait: a portal whose statement
        has run or runs at once (`prime_now`), or a DECLAREd cursor; False (nothing done) when
        it must be awaited."""
        if msg.kind == "S":
            return False
        if msg.name and msg.name not in self.portals and \
                (cursor := self.s.cursors.columns(msg.name)) is not None:
            self.s.out(m.encode_row_description(fields(cursor, ())))
            return True
        portal = self._portal(msg.name)
        if not self.prime_now(portal):
            return False
        self._describe_portal(portal)
        return True

    def _describe_portal(self, portal: Portal) -> None:
        self.s.out(m.NO_DATA if portal.columns is None or portal.copy is not None else
                   row_description(portal.columns, portal.formats))

    async def describe(self, msg: m.Describe) -> None:
        out = self.s.out
        if msg.kind == "S":
            stmt = self.statements.get(msg.name)
            if stmt is None:
                raise SessionError(f"prepared statement \"{msg.name}\" does not exist", "26000")
            out(m.encode_parameter_description(stmt.param_oids))
            dummy = [_DUMMY.get(scalar_of(o), "") for o in stmt.param_oids]
            cols = await describe_sql(self.s, stmt.sql, dummy)
            stmt.tell(cols, catalog_version(self.s.db))
            out(m.NO_DATA if cols is None else m.encode_row_description(fields(cols, ())))
            return
        if msg.name and msg.name not in self.portals and \
                (cursor := self.s.cursors.columns(msg.name)) is not None:
            out(m.encode_row_description(fields(cursor, ())))  # a DECLAREd cursor is a portal
            return
        portal = self._portal(msg.name)
        self.running = msg.name
        await self._prime(portal)
        self._describe_portal(portal)

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
        o = await self.s.run(portal.sql, portal.params)
        if not o.empty and portal.statement is not None and \
                self._result_type_changed(portal.statement, o):
            if o.stream is not None:
                await o.stream.close()
            raise _changed_result_type()
        self._primed(portal, o)

    def prime_now(self, portal: Portal) -> bool:
        """Whether the portal's statement has run, running it now if that needs no wait
        (`run.run_now`: a kept point lookup answered at once); False leaves the portal as it
        was, for `_prime` to run it."""
        if portal.executed:
            return True
        o = run_now(self.s, portal.sql, portal.params)
        if o is None:
            return False
        portal.executed = True
        if not o.empty and portal.statement is not None and \
                self._result_type_changed(portal.statement, o):
            raise _changed_result_type()  # run_now's Outcome holds no stream to close
        self._primed(portal, o)
        return True

    @staticmethod
    def _primed(portal: Portal, o: Outcome) -> None:
        if o.empty:
            portal.tag = ""
            return
        portal.tag, portal.columns = o.tag, o.columns
        portal.rows = collections.deque(o.rows)
        portal.stream, portal.copy = o.stream, o.copy

    def _result_type_changed(self, stmt: Prepared, o: Outcome) -> bool:
        """As PostgreSQL: a prepared statement whose result columns changed with the catalog
        since the client learned them is `0A000` — a driver that
        decodes with the columns it was told (asyncpg) would otherwise misread the rows;
        asyncpg then prepares again. Otherwise the statement now has `o`'s columns."""
        version = catalog_version(self.s.db)
        told = stmt.columns
        if (stmt.version is not None and version != stmt.version and o.copy is None
                and told is not None and o.columns is not None and o.columns != told):
            return True
        stmt.tell(o.columns, version)
        return False

    def execute_now(self, msg: m.Execute) -> bool:
        """`execute(msg)` done synchronously, when it needs no wait: a portal whose statement
        has run or runs at once (`prime_now`) with rows or a tag to send (no COPY, no
        subscription); False (nothing sent) when it must be awaited."""
        portal = self._portal(msg.portal)
        if not self.prime_now(portal) or portal.copy is not None or portal.stream is not None:
            return False
        if self._wanted(portal, msg) > ROWS_PER_TURN:
            return False  # sent in pieces, the loop let run between them: `execute`
        self._execute_rows(portal, msg)
        return True

    async def execute(self, msg: m.Execute) -> None:
        out = self.s.out
        portal = self._portal(msg.portal)
        self.running = msg.portal
        await self._prime(portal)
        if portal.copy is None and portal.stream is None:
            await self._send_rows(portal, msg)
            return
        if portal.copy is not None:
            if portal.copy.direction == "in":
                self.s.begin_copy_in(Outcome("COPY", portal.columns, copy=portal.copy),
                                     simple=False)
                portal.copy = None
                return
            o = Outcome(portal.tag or "", portal.columns, list(portal.rows or ()),
                        stream=portal.stream, copy=portal.copy)
            portal.rows, portal.stream = collections.deque(), None
            await self.s.send_outcome(o, ())
            return
        if portal.columns is None:
            out(m.encode_command_complete(portal.tag or ""))
            return
        await self._execute_stream(portal, msg.max_rows if msg.max_rows > 0 else None)

    @staticmethod
    def _wanted(portal: Portal, msg: m.Execute) -> int:
        """How many rows Execute `msg` sends of `portal`'s (up to its row limit)."""
        if portal.tag == "" or portal.columns is None or portal.rows is None:
            return 0
        return len(portal.rows) if msg.max_rows <= 0 else min(msg.max_rows, len(portal.rows))

    def _execute_rows(self, portal: Portal, msg: m.Execute) -> None:
        """Execute of a portal holding rows (no COPY, no subscription): up to the row limit,
        written at once (at most `ROWS_PER_TURN` of them: `_send_rows` sends more)."""
        out = self.s.out
        if portal.tag == "":
            out(m.EMPTY_QUERY)
            return
        if portal.columns is None:
            out(m.encode_command_complete(portal.tag or ""))
            return
        out(data_rows(portal.columns, self._take(portal, msg), portal.formats))
        self._rows_sent(portal, msg)

    async def _send_rows(self, portal: Portal, msg: m.Execute) -> None:
        """`_execute_rows`, the rows written in pieces with the loop let run between them
        (`Session.send_rows`) when there are more than `ROWS_PER_TURN`."""
        if self._wanted(portal, msg) <= ROWS_PER_TURN:
            self._execute_rows(portal, msg)
            return
        assert portal.columns is not None
        await self.s.send_rows(RowEncoder(portal.columns, portal.formats).rows,
                               self._take(portal, msg))
        self._rows_sent(portal, msg)

    def _take(self, portal: Portal, msg: m.Execute) -> list[tuple[Any, ...]]:
        n = self._wanted(portal, msg)
        rows = portal.rows if portal.rows is not None else collections.deque()
        portal.sent += n
        return [rows.popleft() for _ in range(n)]

    def _rows_sent(self, portal: Portal, msg: m.Execute) -> None:
        """What follows an Execute's rows: PortalSuspended at its row limit with rows left,
        else CommandComplete with the count sent."""
        out = self.s.out
        if msg.max_rows > 0 and portal.rows:
            out(m.PORTAL_SUSPENDED)
            return
        tag = portal.tag or ""
        if tag.startswith("SELECT"):
            tag = f"SELECT {portal.sent}"
        out(m.encode_command_complete(tag))

    async def _execute_stream(self, portal: Portal, limit: int | None) -> None:
        stream = portal.stream
        assert stream is not None and portal.columns is not None
        out = self.s.out
        sent = 0
        while True:
            n = len(stream.pending) if limit is None else min(limit - sent, len(stream.pending))
            if n:
                await self.s.send_rows(RowEncoder(portal.columns, portal.formats).rows,
                                       [stream.pending.popleft() for _ in range(n)])
                sent += n
            if limit is not None and sent >= limit:
                out(m.PORTAL_SUSPENDED)
                return
            if stream.done:
                await stream.close()
                portal.stream = None
                out(m.encode_command_complete("SUBSCRIBE"))
                return
            await self.s.drain()
            await stream.fill(None)

    def close(self, msg: m.Close) -> None:
        if msg.kind == "S":
            self.statements.pop(msg.name, None)
        else:
            portal = self.portals.pop(msg.name, None)
            if portal is not None and portal.stream is not None:
                self._closing.add(asyncio.ensure_future(portal.stream.close()))
        self.s.out(m.CLOSE_COMPLETE)

    async def sync(self) -> None:
        """At Sync the implicit transaction ends (its writes are applied, `staging`); outside a
        transaction block the unnamed portal ends."""
        await staging.end_implicit(self.s)
        if self.portals.get("") is not None and self.s.txn == "I":
            portal = self.portals.pop("")
            if portal.stream is not None:
                await portal.stream.close()

    def sync_now(self) -> bool:
        """`sync()` done synchronously, when it needs no wait (no subscription to close, no
        implicit transaction's writes to apply)."""
        if self.s.tx.implicit:
            return False
        portal = self.portals.get("")
        if portal is not None and portal.stream is not None and self.s.txn == "I":
            return False
        if portal is not None and self.s.txn == "I":
            del self.portals[""]
        return True

    def take_streams(self) -> list[Any]:
        """Forget every portal; their open subscriptions, for the caller to close."""
        streams = [p.stream for p in self.portals.values() if p.stream is not None]
        self.portals.clear()
        return streams
