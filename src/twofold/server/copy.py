"""COPY over the wire: `COPY t [(cols)] FROM STDIN` (a table's columns, then the data the
client sends, inserted in one write; columns left out are NULL) and `COPY (query) TO STDOUT`
(a query's rows), in the text, csv or binary format.

Contract: `copy_statement(db, copy, params, sql)` checks a COPY against the catalog and gives
the Outcome the session sends (for FROM STDIN: the columns the data carries; for TO STDOUT: the
query's rows or subscription, the query run by `sql` — the session's, inside its transaction).
`CopyIn` collects CopyData; `finish(db, insert)` parses it and has `insert` write every row in
one write, or none on a bad line or tuple (`22P02` naming it), and returns the count. Text and
csv data are parsed in batches into an Arrow table (`copy_batch`); what that path leaves
undecided (and every error) goes through the row parser, `statements.parse_copy_rows`; binary
data of fixed-width columns without NULLs is read by numpy at once (`parse_binary_batch`; a
declared integer/smallint/real column's fields as int4/int2/float4), anything else tuple by
tuple. `CopyOut`
encodes a COPY TO's messages: `start()`, `rows(batch)` (any number of times), `finish()`.

The binary format is PostgreSQL's: the 11-byte signature `PGCOPY\\n\\377\\r\\n\\0`, a flags
word and a header extension (skipped), then per tuple an int16 field count and per field an
int32 length (-1: NULL) and the value in its type's binary encoding, then the int16 trailer -1.
A file that does not start with the signature, or sets the OID flag, is `22P04`.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from twofold.server import messages as m
from twofold.server.copy_batch import columns_in_order, parse_batch
from twofold.server.output import copy_rows
from twofold.server.portals import (
    Column,
    Outcome,
    SessionError,
    declared_columns,
    table_columns,
)
from twofold.server.statements import CopyStatement, parse_copy_rows
from twofold.server.types import OIDS, TEXT, InvalidParameterValue, decode, encode
from twofold.sql.errors import FeatureNotSupported, NotNullViolation, UndefinedTable

SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
HEADER = SIGNATURE + struct.pack("!ii", 0, 0)
TRAILER = struct.pack("!h", -1)


async def copy_statement(db: Any, copy: CopyStatement, params: list[Any],
                         sql: Callable[[str, list[Any]], Awaitable[Any]] | None = None
                         ) -> Outcome:
    if copy.direction == "in":
        assert copy.table is not None
        from twofold.api.errors import UnknownObject

        try:
            obj = db.get(copy.table)
        except UnknownObject:
            raise UndefinedTable(f'relation "{copy.table}" does not exist') from None
        if not hasattr(obj, "insert"):
            raise SessionError(f"cannot copy to {copy.table!r}: it is not a table", "42809")
        cols = table_columns(db, copy.table)
        if copy.columns:
            by = dict(cols)
            missing = [c for c in copy.columns if c not in by]
            if missing:
                raise SessionError(f"column {missing[0]!r} of relation {copy.table!r} "
                                   "does not exist", "42703")
            if len(set(copy.columns)) != len(copy.columns):
                raise SessionError(f"a column of relation {copy.table!r} is named twice in "
                                   "COPY", "42701")
            for n, t in getattr(obj, "schema", ()):
                if n not in copy.columns and not t.nullable:
                    raise NotNullViolation(f"COPY {copy.table} leaves out column {n!r}, which "
                                           "is NOT NULL")
            cols = [(c, by[c]) for c in copy.columns]
        return Outcome("COPY", cols, copy=copy)
    if not copy.csv and copy.delimiter != "\t":
        raise FeatureNotSupported("COPY TO STDOUT in the text format writes tab-delimited "
                                  "rows; use FORMAT csv for another DELIMITER")
    query = copy.query if copy.query is not None else \
        f"SELECT {', '.join(map(_quote, copy.columns)) or '*'} FROM {_quote(copy.table or '')}"
    run = sql or (lambda text, p: db.sql(text, p or None))
    o = Outcome.of(query, await run(query, params))
    o.copy = copy
    return o


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class CopyIn:
    """A COPY FROM STDIN in progress: its statement, columns and the data received so far."""

    def __init__(self, copy: CopyStatement, columns: list[Column], simple: bool) -> None:
        self.copy = copy
        self.columns = columns
        self.simple = simple  # simple query protocol: ReadyForQuery follows CopyDone
        self.data = bytearray()

    def feed(self, data: bytes) -> None:
        self.data.extend(data)

    async def finish(self, db: Any,
                     insert: Callable[[str, Any], Awaitable[int]]) -> int:
        copy, cols = self.copy, self.columns
        assert copy.table is not None
        scalars = [s for _, s in cols]
        names = [n for n, _ in cols]
        table = table_columns(db, copy.table)
        order = [n for n, _ in table]
        data = bytes(self.data)
        if copy.binary:
            declared = dict(zip(order, declared_columns(db, copy.table), strict=True))
            batch = parse_binary_batch(data, scalars, [declared.get(n) for n in names])
        else:
            batch = parse_batch(data, copy, scalars)
        if batch is not None:
            return await insert(copy.table, columns_in_order(batch, names, order, dict(table)))
        if copy.binary:  # what the batch parsers leave: the same rows, or the typed error
            rows = parse_binary_rows(data, scalars)
        else:
            rows = parse_copy_rows(data, copy, scalars)
        if names != order:
            at = {n: i for i, n in enumerate(names)}
            rows = [tuple(r[at[n]] if n in at else None for n in order) for r in rows]
        return await insert(copy.table, rows)


_FIXED = {"int": ">i8", "float": ">f8", "bool": "u1", "int4": ">i4", "int2": ">i2",
          "float4": ">f4"}  # bigint, double precision, boolean; integer, smallint, real


def parse_binary_batch(data: bytes, scalars: list[str],
                       declared: list[str | None] | None = None) -> pa.Table | None:
    """A binary COPY file's tuples as an Arrow table of columns `c0..` (as `copy_batch`
    gives them), read at once by numpy when every tuple has the same layout — only fixed-width
    columns (bigint as int8, double precision as float8, boolean; a column `declared` integer,
    smallint or real as int4, int2, float4) and no NULL — else None, for `parse_binary_rows`
    (which also gives every error)."""
    widths = [d if d in ("int4", "int2", "float4") else s
              for s, d in zip(scalars, declared or [None] * len(scalars), strict=True)]
    if not scalars or any(s not in _FIXED for s in widths) or not data.startswith(SIGNATURE) \
            or len(data) < len(HEADER):
        return None
    flags, ext = struct.unpack_from("!ii", data, len(SIGNATURE))
    if flags & (1 << 16) or ext < 0:
        return None
    body = data[len(HEADER) + ext:]
    if not body.endswith(TRAILER):
        return None
    body = body[:-len(TRAILER)]
    fields: list[tuple[str, str]] = [("n", ">i2")]
    for i, w in enumerate(widths):
        fields += [(f"l{i}", ">i4"), (f"v{i}", _FIXED[w])]
    layout = np.dtype(fields)
    if len(body) % layout.itemsize:
        return None
    tuples = np.frombuffer(body, dtype=layout)
    if not (tuples["n"] == len(scalars)).all():
        return None
    columns = []
    for i, (s, w) in enumerate(zip(scalars, widths, strict=True)):
        if not (tuples[f"l{i}"] == np.dtype(_FIXED[w]).itemsize).all():
            return None  # a NULL (-1), or a field of another width: the row parser reads it
        v = tuples[f"v{i}"]
        columns.append(pa.array(v != 0) if s == "bool" else
                       pa.array(v.astype(np.int64 if s == "int" else np.float64)))
    return pa.table(columns, names=[f"c{i}" for i in range(len(scalars))])


def parse_binary_rows(data: bytes, scalars: list[str]) -> list[tuple[Any, ...]]:
    """The tuples of a binary-format COPY file whose columns have engine `scalars`."""
    if not data.startswith(SIGNATURE) or len(data) < len(HEADER):
        raise SessionError("COPY file signature not recognized (binary COPY data must start "
                           "with PGCOPY\\n\\377\\r\\n\\0)", "22P04")
    flags, ext = struct.unpack_from("!ii", data, len(SIGNATURE))
    if flags & (1 << 16):
        raise SessionError("binary COPY data with OIDs is not supported", "22P04")
    at = len(HEADER) + max(ext, 0)
    oids = [OIDS.get(s, TEXT) for s in scalars]
    rows: list[tuple[Any, ...]] = []
    end = len(data)
    try:
        while True:
            (nfields,) = struct.unpack_from("!h", data, at)
            at += 2
            if nfields == -1:
                break
            if nfields != len(scalars):
                raise InvalidParameterValue(f"COPY binary tuple {len(rows) + 1}: expected "
                                            f"{len(scalars)} fields, got {nfields}")
            row: list[Any] = []
            for i, oid in enumerate(oids):
                (size,) = struct.unpack_from("!i", data, at)
                at += 4
                if size < 0:
                    row.append(None)
                    continue
                if at + size > end:
                    raise struct.error("field runs past the end of the data")
                raw = data[at:at + size]
                at += size
                row.append(_decode_field(raw, oid, len(rows) + 1, i + 1))
            rows.append(tuple(row))
    except struct.error as e:
        raise InvalidParameterValue(f"COPY binary tuple {len(rows) + 1}: data ends early or "
                                    f"is malformed ({e})") from None
    return rows


def _decode_field(raw: bytes, oid: int, tuple_no: int, column: int) -> Any:
    try:
        return decode(raw, oid, True, column)
    except InvalidParameterValue:
        raise InvalidParameterValue(f"COPY binary tuple {tuple_no}, column {column}: not a "
                                    f"valid binary value of type OID {oid} ({len(raw)} bytes)"
                                    ) from None


class CopyOut:
    """The messages of one COPY TO STDOUT: CopyOutResponse, CopyData, CopyDone. In binary,
    the file header goes in the first tuple's CopyData (as PostgreSQL sends it; clients parse
    the first message as header and tuple), or the trailer's when there are no rows."""

    def __init__(self, copy: CopyStatement, scalars: list[str],
                 names: list[str] | None = None) -> None:
        self.copy = copy
        self.binary = copy.binary
        self.scalars = scalars
        self.count = 0
        self._header = HEADER if copy.binary else b""
        if copy.csv and copy.header:
            self._header = self._csv_line(list(names or [f"column{i + 1}" for i in
                                                         range(len(scalars))]))

    def start(self) -> bytes:
        return m.encode_copy_response(b"H", len(self.scalars), self.binary)

    def _head(self) -> bytes:
        head, self._header = self._header, b""
        return head

    def _csv_line(self, fields: list[str | None]) -> bytes:
        c = self.copy
        out = []
        for f in fields:
            if f is None:
                out.append(c.null)
            elif f == c.null or f == "\\." or any(ch in f for ch in (c.delimiter, '"', "\n",
                                                                      "\r")):
                out.append('"' + f.replace('"', '""') + '"')
            else:
                out.append(f)
        return (c.delimiter.join(out) + "\n").encode("utf-8")

    def rows(self, rows: Iterable[tuple[Any, ...]]) -> bytes:
        if self.copy.csv:
            out = [m.encode_copy_data(self._head() + self._csv_line(
                [None if (b := encode(v, s, False)) is None else b.decode("utf-8")
                 for v, s in zip(row, self.scalars, strict=True)])) for row in rows]
            self.count += len(out)
            return b"".join(out)
        if not self.binary:
            data, n = copy_rows(rows, self.scalars)
            self.count += n
            return data
        out = []
        head = struct.pack("!h", len(self.scalars))
        for row in rows:
            parts = [self._head(), head]
            for v, s in zip(row, self.scalars, strict=True):
                b = encode(v, s, True)
                parts.append(struct.pack("!i", -1) if b is None else
                             struct.pack("!i", len(b)) + b)
            out.append(m.encode_copy_data(b"".join(parts)))
        self.count += len(out)
        return b"".join(out)

    def finish(self) -> bytes:
        if self.binary:
            return m.encode_copy_data(self._head() + TRAILER) + m.COPY_DONE
        head = self._head()  # a CSV header over no rows
        return (m.encode_copy_data(head) if head else b"") + m.COPY_DONE
