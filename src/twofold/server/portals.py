"""Values a session keeps between messages: prepared statements, portals, subscription
streams, and what running one statement gave (`Outcome`); typed session errors.

Contract: `Stream` reads a subscription ahead one batch at a time without ever cancelling a
pending read (a cancelled read would end the subscription); `fill(timeout)` waits at most
`timeout` for one more batch, `close()` ends the subscription and releases its read holds.
`Stream.of_rows` is a finished stream over fixed rows (a cursor over a plain query).
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field
from typing import Any

from twofold.server.statements import CopyStatement, command_tag
from twofold.sql.errors import SqlError, sqlstate_of
from twofold.sql.show import subscribe_progress, subscribe_rows
from twofold.sql.types import wire_type

Column = tuple[str, str]  # name, engine scalar or declared type (`columns_of`)


class Sourced(tuple[str, str]):
    """A result column read straight from column `attnum` (from 1) of the table, view or
    materialized view whose OID is `table` (`origins.sourced`): a `Column` that also says so
    in its RowDescription field. It equals the plain `Column` (the result type is the same)."""

    table: int
    attnum: int

    def __new__(cls, name: str, scalar: str, table: int, attnum: int) -> Sourced:
        self = super().__new__(cls, (name, scalar))
        self.table, self.attnum = table, attnum
        return self

    def __getnewargs__(self) -> tuple[str, str, int, int]:  # pickled as it was made
        return self[0], self[1], self.table, self.attnum


def columns_of(schema: Any) -> list[Column]:
    """A result schema's columns as announced on the wire: `(name, type)`, the type a
    declared `int2`/`int4`/`float4` (`twofold.sql.types.wire_type`) or the engine scalar
    (`int` is int8, `float` float8, ...). Every path that sends a result's RowDescription
    and DataRows takes its columns from here, so they agree."""
    kept = _sourced.get(id(schema))
    if kept is not None and kept[0] is schema:
        return kept[1]
    return [(n, wire_type(t)) for n, t in zip(schema.names, schema.types, strict=True)]


_SOURCED_KEPT = 1024
_sourced: collections.OrderedDict[int, tuple[Any, list[Column]]] = collections.OrderedDict()


def remember_sourced(schema: Any, cols: list[Column]) -> None:
    """Have `columns_of(schema)` be `cols` (`columns_of`'s, some `Sourced`) from now on: a
    prepared statement's later results share its schema object, so every path that
    announces them (the fast path's included) says where their columns come from."""
    _sourced[id(schema)] = (schema, cols)  # the schema held: its id is not reused
    _sourced.move_to_end(id(schema))
    if len(_sourced) > _SOURCED_KEPT:
        _sourced.popitem(last=False)

SUB_COLS: list[Column] = [("mz_timestamp", "int"), ("mz_diff", "int")]
PROGRESS_COLS: list[Column] = [("mz_timestamp", "int"), ("mz_progressed", "bool"),
                               ("mz_diff", "int")]  # SUBSCRIBE ... WITH (PROGRESS)

class SessionError(SqlError):
    sqlstate = "XX000"

    def __init__(self, message: str, code: str, routine: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.routine = routine  # PostgreSQL's routine (the R field) where a driver reads it


def state_of(e: BaseException) -> str:
    if isinstance(e, SessionError):
        return e.code
    return sqlstate_of(e)


@dataclass
class Prepared:
    sql: str
    param_oids: tuple[int, ...]
    columns: list[Column] | None = None
    """The result columns the client was told (Describe) or first got (`tell`): what `0A000`
    compares with, and where set the fast path may answer the statement; `version`: the
    catalog version they held at."""
    version: int | None = None
    fast: dict[Any, Any] = field(default_factory=dict)
    """What answering its requests at once needs, per format codes (`fastpath`)."""
    def tell(self, columns: list[Column] | None, version: int) -> None:
        """Record that the client was told (or got) result `columns` (`columns_of`: declared
        int2/int4/float4/varchar included) at catalog `version`. The fast path (`fastpath`)
        answers a statement whose `columns` are set, with the same columns."""
        self.columns, self.version = columns, version


SUBSCRIBE_BACKLOG = 100_000
"""The updates a SUBSCRIBE (or a cursor over one) may have waiting beyond the batch its client
is being sent: a client that stops reading while writes go on then costs bounded memory - past
it the subscription ends with 53400 at its next read (`docs/pgwire.md`)."""


class Stream:
    """A subscription's rows, read ahead one batch without ever cancelling a pending read.
    With `progress` (WITH (PROGRESS)), Materialize's progress rows too: the first at the
    subscription's start time, then one each time its frontier moves (`subscribe_rows`).
    Its backlog is bounded (`SUBSCRIBE_BACKLOG`)."""

    def __init__(self, sub: Any, progress: bool = False) -> None:
        self.sub = sub
        bound = getattr(sub, "bound_backlog", None)
        if bound is not None:
            bound(SUBSCRIBE_BACKLOG)
        self.pending: collections.deque[tuple[Any, ...]] = collections.deque()
        self.next: asyncio.Task[Any] | None = None
        self.done = False
        self.progressed: int | None = None  # the last progress row's time (PROGRESS only)
        self.columns: list[Column] = (PROGRESS_COLS if progress else SUB_COLS) + columns_of(
            sub.schema)
        if progress:
            # No row has a time before the start: Materialize's first progress row.
            self.progressed = int(sub.as_of)
            self.pending.append((self.progressed, True, None,
                                 *([None] * len(sub.schema.names))))

    async def fill(self, timeout: float | None) -> None:
        """Wait (at most `timeout`) for at least one more batch."""
        if self.done:
            return
        if self.next is None:
            self.next = asyncio.ensure_future(self.sub.__anext__())
        finished, _ = await asyncio.wait({self.next}, timeout=timeout)
        if not finished:
            return
        task, self.next = self.next, None
        try:
            batch = task.result()
        except StopAsyncIteration:
            self.done = True
            return
        rows = subscribe_rows(batch, self.progressed)  # in time order
        if self.progressed is not None and batch.upper.time is not None:
            self.progressed = max(self.progressed, batch.upper.time)
        self.pending.extend(rows)

    @classmethod
    def of_rows(cls, columns: list[Column], rows: list[tuple[Any, ...]]) -> Stream:
        stream = cls.__new__(cls)
        stream.sub, stream.next, stream.done = None, None, True
        stream.pending = collections.deque(rows)
        stream.columns = columns
        return stream

    async def close(self) -> None:
        if self.next is not None:
            self.next.cancel()
        if self.sub is not None:
            await self.sub.aclose()


@dataclass
class Portal:
    sql: str
    params: list[Any]
    formats: tuple[int, ...]
    columns: list[Column] | None = None
    rows: collections.deque[tuple[Any, ...]] | None = None
    stream: Stream | None = None
    tag: str | None = None
    sent: int = 0
    executed: bool = False
    copy: CopyStatement | None = None
    statement: Prepared | None = None


@dataclass
class Outcome:
    """What running one statement gave."""

    tag: str
    columns: list[Column] | None = None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    stream: Stream | None = None
    copy: CopyStatement | None = None
    empty: bool = False

    @classmethod
    def of(cls, sql: str, result: Any) -> Outcome:
        """The Outcome of `db.sql(sql)`'s result: rows, a subscription, or a count."""
        from twofold.api.results import Result

        if isinstance(result, Result):
            cols = columns_of(result.schema)
            return cls(f"SELECT {len(result.rows)}", cols, result.rows)
        if hasattr(result, "__anext__") and hasattr(result, "schema"):
            stream = Stream(result, subscribe_progress(sql))
            return cls("SUBSCRIBE", stream.columns, stream=stream)
        if isinstance(result, int) and not isinstance(result, bool):
            return cls(command_tag(sql, result))
        return cls(command_tag(sql, 0))



def fmt(formats: tuple[int, ...], i: int) -> int:
    if not formats:
        return 0
    if len(formats) == 1:
        return formats[0]
    return formats[i] if i < len(formats) else 0


def scalar_of(oid: int) -> str:
    from twofold.server.types import SCALAR_OF_OID

    return SCALAR_OF_OID.get(oid, "str")


def table_columns(db: Any, name: str) -> list[Column]:
    from twofold.sql.planner import Planner

    rel = Planner(db).relation(name)
    return [(c.name, c.column_type.scalar) for c in rel.cols if not c.hidden]


def declared_columns(db: Any, name: str) -> list[str | None]:
    """The declared type of each of table `name`'s columns where it is announced as such
    (`int2`, `int4`, `float4`), else None (binary COPY FROM reads fields of that width)."""
    from twofold.sql.planner import Planner
    from twofold.sql.types import wire_declared

    rel = Planner(db).relation(name)
    return [wire_declared(c.pg) for c in rel.cols if not c.hidden]
