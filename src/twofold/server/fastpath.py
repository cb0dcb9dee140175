"""A kept point lookup's request answered from its bytes: a driver's Bind/Describe/Execute/Sync
of a prepared statement, turned into its reply with no message objects, no portal and no
per-message dispatch.

Contract: `answer(session, data, start)` returns `(reply, end)` when `data[start:]` begins with
a whole request of the one shape drivers send for a prepared statement — Bind of the unnamed
portal, optionally Describe of that portal, Execute of it with no row limit, Sync — that the
session would answer at once (`Session.handle_now` for each of the four messages: the
statement's text handed to the SQL layer, a kept lookup `PreparedStatement.execute_now`
answers — here through `rows_now`, its form without a `Result`, on the statement kept per
plan — no transaction block, no implicit transaction, no subscription on the unnamed
portal), and then the reply is exactly the bytes that path writes — BindComplete,
RowDescription if described, DataRows, CommandComplete, ReadyForQuery — and the session is
left as that path leaves it (the unnamed portal gone, the statement's columns and catalog
version noted). Otherwise None, with nothing done: then the messages go through the machine
and the session as before, which also gives every error (a malformed or unknown message, a
missing statement, a parameter that does not parse, ...). The caller checks the connection is
between requests (`Machine.between_requests`).

`answer_each(requests)` is `answer(s, data, 0)` for each of a loop turn's `(session, data)`
that is one whole request, with the reads of one kept statement made together
(`turns.rows_now_each`); the same reply bytes, None (nothing done) for the rest.

Per statement and parameter/result format codes (`Prepared.fast`), what a request needs is
worked out once: how to decode each parameter, and per result shape the RowDescription and
the row encoder (`output.RowEncoder`, the same one DataRows are written with everywhere).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from twofold.server import messages as m
from twofold.server import run as run_module
from twofold.server.origins import sourced
from twofold.server.output import RowEncoder, row_description
from twofold.server.portals import Column, Prepared, Sourced, columns_of, fmt, remember_sourced
from twofold.server.turns import rows_now_each
from twofold.server.types import decoder
from twofold.sql.prepared import PreparedStatement, catalog_version, statement

if TYPE_CHECKING:
    from twofold.server.session import Session

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")


def _frontend(kind: bytes, body: bytes = b"") -> bytes:
    return kind + _I32.pack(len(body) + 4) + body


_TAIL = _frontend(b"E", b"\0" + _I32.pack(0)) + _frontend(b"S")  # Execute "" (all rows), Sync
_TAIL_DESCRIBED = _frontend(b"D", b"P\0") + _TAIL  # after Describe of the unnamed portal
_READY_IDLE = m.encode_ready("I")
_BIND_COMPLETE = m.BIND_COMPLETE
_TAGS = [m.encode_command_complete(f"SELECT {n}") for n in range(16)]


class _Shape:
    """The reply parts of one result shape (columns) under one set of result formats."""

    __slots__ = ("columns", "description", "encoder")

    def __init__(self, columns: list[Column], result_formats: tuple[int, ...]) -> None:
        self.columns = columns
        self.description = row_description(columns, result_formats)
        self.encoder = RowEncoder(columns, result_formats)


class _Plan:
    """How to answer a statement's requests bound with one set of format codes."""

    __slots__ = ("columns", "decoders", "last", "prepared", "result_formats", "schema",
                 "shapes")

    def __init__(self, stmt: Prepared, param_formats: tuple[int, ...],
                 result_formats: tuple[int, ...]) -> None:
        self.decoders = [decoder(oid, fmt(param_formats, i) == 1)
                         for i, oid in enumerate(stmt.param_oids)]
        self.result_formats = result_formats
        self.shapes: list[_Shape] = []
        self.schema: object = None  # the last result's schema and its columns
        self.columns: list[Column] = []
        self.last: _Shape | None = None  # `shape(columns)`
        self.prepared: PreparedStatement | None = None  # `statement(db, sql)`, kept

    def shape(self, columns: list[Column]) -> _Shape:
        origins = _origins(columns)  # a Sourced column equals its plain Column: told apart
        for s in self.shapes:
            if s.columns == columns and _origins(s.columns) == origins:
                return s
        s = _Shape(columns, self.result_formats)
        if len(self.shapes) < 4:
            self.shapes.append(s)
        return s


def _origins(columns: list[Column]) -> list[tuple[int, int] | None]:
    return [(c.table, c.attnum) if isinstance(c, Sourced) else None for c in columns]


_NO_CODES = b"\0\0"  # the format-code lists drivers send most: none (all text) ...
# ... and one for all
_ONE_CODE: dict[bytes, tuple[int, ...]] = {b"\0\1\0\0": (0,), b"\0\1\0\1": (1,)}


def _formats(data: bytes, pos: int) -> tuple[tuple[int, ...], int] | None:
    if data.startswith(_NO_CODES, pos):
        return (), pos + 2
    one = _ONE_CODE.get(data[pos:pos + 4])
    if one is not None:
        return one, pos + 4
    (n,) = _I16.unpack_from(data, pos)
    pos += 2
    if n < 0 or pos + 2 * n > len(data):
        return None
    codes = struct.unpack_from(f"!{n}h", data, pos) if n else ()
    if any(c != 0 and c != 1 for c in codes):
        return None  # a protocol violation: the machine says so
    return codes, pos + 2 * n


def answer(s: Session, data: bytes, start: int) -> tuple[bytes, int] | None:
    """The reply to the request at `data[start:]` and where it ends, or None (module
    docstring)."""
    try:
        req = _request(s, data, start)
        if req is None:
            return None
        return _reply(req, req.prepared.rows_now(req.params))
    except Exception:  # malformed, or a value it cannot encode: the message path says what
        return None


def answer_each(requests: list[tuple[Session, bytes]]) -> list[bytes | None]:
    """`answer(s, data, 0)`'s reply for each `(s, data)` that is one whole request (ending
    at `len(data)`), else None (and nothing done) — for a loop turn's requests, received
    before the call, on as many sessions: the reads of one kept statement are made together
    (`turns.rows_now_each`: the catalog and index checks once, one read time), the rest of
    each reply as `answer` makes it. A request the batch does not answer is left as it was:
    `answer` of it then takes the usual way."""
    out: list[bytes | None] = [None] * len(requests)
    reqs: list[_Request | None] = []
    by_statement: dict[int, list[int]] = {}
    for i, (s, data) in enumerate(requests):
        try:
            req = _request(s, data, 0)
        except Exception:
            req = None
        if req is not None and req.after != len(data):
            req = None
        reqs.append(req)
        if req is not None:
            by_statement.setdefault(id(req.prepared), []).append(i)
    for positions in by_statement.values():
        first = reqs[positions[0]]
        assert first is not None
        try:
            got = rows_now_each(first.prepared,
                                [reqs[i].params for i in positions])  # type: ignore[union-attr]
        except Exception:
            got = None
        if got is None:
            continue
        for i, one in zip(positions, got, strict=True):
            req = reqs[i]
            assert req is not None
            if one is None:
                continue
            try:
                done = _reply(req, one)
            except Exception:
                done = None
            if done is not None:
                out[i] = done[0]
    return out


class _Request:
    """A request `answer` may take, decoded: its statement, plan, kept statement and
    parameters, and where it ends."""

    __slots__ = ("after", "described", "old", "params", "plan", "prepared", "s", "stmt")

    def __init__(self, s: Session, stmt: Prepared, plan: _Plan, prepared: PreparedStatement,
                 params: list[Any], described: bool, after: int,
                 old: Any) -> None:
        self.s = s
        self.stmt = stmt
        self.plan = plan
        self.prepared = prepared
        self.params = params
        self.described = described
        self.after = after
        self.old = old


def _request(s: Session, data: bytes, start: int) -> _Request | None:
    if data[start] != 0x42 or data[start + 5] != 0:  # a Bind of the unnamed portal
        return None
    (size,) = _I32.unpack_from(data, start + 1)
    end = start + 1 + size
    if size < 4 or end > len(data) or size > s.machine.max_message:
        return None
    if data.startswith(_TAIL_DESCRIBED, end):
        described, after = True, end + len(_TAIL_DESCRIBED)
    elif data.startswith(_TAIL, end):
        described, after = False, end + len(_TAIL)
    else:
        return None
    tx = s.tx
    if tx.explicit or tx.failed or tx.implicit:
        return None
    name_end = data.index(b"\0", start + 6, end)
    stmt = s.extended.statements.get(data[start + 6:name_end].decode("utf-8"))
    if stmt is None or stmt.columns is None:
        return None  # no such statement, or not run yet: the session's path
    pos = name_end + 1
    # `_formats`' common cases inline: one code for all (psycopg's), none (asyncpg's text)
    param_formats: tuple[int, ...] | None = _ONE_CODE.get(data[pos:pos + 4])
    if param_formats is not None:
        pos += 4
    elif data.startswith(_NO_CODES, pos):
        param_formats, pos = (), pos + 2
    else:
        found = _formats(data, pos)
        if found is None:
            return None
        param_formats, pos = found
    (count,) = _I16.unpack_from(data, pos)
    pos += 2
    if count != len(stmt.param_oids):
        return None
    raws: list[bytes | None] = []
    for _ in range(count):
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n == -1:
            raws.append(None)
            continue
        if n < 0 or pos + n > end:
            return None
        raws.append(data[pos:pos + n])
        pos += n
    result_formats: tuple[int, ...] | None = _ONE_CODE.get(data[pos:pos + 4])
    if result_formats is not None:
        pos += 4
    else:
        found = _formats(data, pos)
        if found is None:
            return None
        result_formats, pos = found
    if pos != end:
        return None
    portals = s.extended.portals
    old = portals.get("")
    if old is not None and old.stream is not None:
        return None  # Bind closes its subscription: the session's path
    sql = stmt.sql
    if sql not in run_module._sql_texts:
        return None  # a shim, COPY, cursor or catalog relation may answer this text
    key = (param_formats, result_formats)
    fast = stmt.fast
    plan = fast.get(key)
    if plan is None:
        plan = fast[key] = _Plan(stmt, param_formats, result_formats)
        if len(fast) > 8:
            fast.pop(next(iter(fast)))
    # A parameter that does not parse raises: 22P02, which the session's path reports.
    if count == 1:  # a point lookup's one key: no comprehension
        raw = raws[0]
        params: list[Any] = [None if raw is None else plan.decoders[0](raw)]
    else:
        params = [None if raw is None else parse(raw)
                  for raw, parse in zip(raws, plan.decoders, strict=True)]
    db = s.db
    prepared = plan.prepared
    if prepared is None or prepared.db is not db:
        prepared = plan.prepared = statement(db, sql)
    return _Request(s, stmt, plan, prepared, params, described, after, old)


def _reply(req: _Request, got: tuple[Any, int, list[tuple[Any, ...]]] | None
           ) -> tuple[bytes, int] | None:
    plan = req.plan
    if got is None:
        plan.prepared = None  # the session's path may plan (and keep) it afresh
        return None
    stmt, db, old, described, after = req.stmt, req.s.db, req.old, req.described, req.after
    schema, _, rows = got
    if schema is plan.schema:  # a kept lookup's results share one schema
        columns, shape = plan.columns, plan.last
    else:
        columns = columns_of(schema)  # as every path announces them (declared int4, ...)
        if not any(isinstance(c, Sourced) for c in columns):
            # A schema no path has announced yet (a plan kept again after the catalog moved,
            # its first result this one): which table columns its columns are, as the
            # session's path says (`run._sourced`), worked out once for the schema.
            traced = sourced(db, stmt.sql, columns)
            if any(isinstance(c, Sourced) for c in traced):
                columns = traced
                remember_sourced(schema, traced)
        shape = plan.shape(columns)
        plan.schema, plan.columns, plan.last = schema, columns, shape
    version = catalog_version(db)
    told = stmt.version
    if told is not None and version != told and columns != stmt.columns:
        return None  # 0A000, cached plan must not change result type: the session's path
    assert shape is not None
    n = len(rows)
    tag = _TAGS[n] if n < 16 else m.encode_command_complete(f"SELECT {n}")
    body = shape.encoder.rows(rows)
    # Nothing can fail past here: the session as its own path leaves it.
    if version != told or columns is not stmt.columns:
        stmt.tell(columns, version)
    if old is not None:
        del req.s.extended.portals[""]
    if described:
        return b"".join((_BIND_COMPLETE, shape.description, body, tag, _READY_IDLE)), after
    return b"".join((_BIND_COMPLETE, body, tag, _READY_IDLE)), after
