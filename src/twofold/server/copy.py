"""COPY over the wire: `COPY t FROM STDIN` (a table's columns, then the data the client sends,
inserted in one write) and `COPY (query) TO STDOUT` (a query's rows).

Contract: `copy_statement(db, copy, params)` checks a COPY against the catalog and gives the
Outcome the session sends (for FROM STDIN: the columns the data carries; for TO STDOUT: the
query's rows or subscription). `CopyIn` collects CopyData; `finish(db)` parses it and inserts
every row in one write, or none on a bad line (`22P02` naming the line), and returns the count.
"""

from __future__ import annotations

import asyncio
from typing import Any

from twofold.server.portals import Column, Outcome, SessionError, table_columns
from twofold.server.statements import CopyStatement, parse_copy_rows
from twofold.sql.errors import FeatureNotSupported


async def copy_statement(db: Any, copy: CopyStatement, params: list[Any]) -> Outcome:
    if copy.direction == "in":
        assert copy.table is not None
        obj = db.get(copy.table)
        if not hasattr(obj, "insert"):
            raise SessionError(f"cannot copy to {copy.table!r}: it is not a table", "42809")
        cols = table_columns(db, copy.table)
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
    result = await db.sql(query, params or None)
    o = Outcome.of(query, result)
    o.copy = copy
    return o


class CopyIn:
    """A COPY FROM STDIN in progress: its statement, columns and the data received so far."""

    def __init__(self, copy: CopyStatement, columns: list[Column], simple: bool) -> None:
        self.copy = copy
        self.columns = columns
        self.simple = simple  # simple query protocol: ReadyForQuery follows CopyDone
        self.data = bytearray()

    def feed(self, data: bytes) -> None:
        self.data.extend(data)

    async def finish(self, db: Any) -> int:
        copy, cols = self.copy, self.columns
        rows = parse_copy_rows(bytes(self.data), copy, [s for _, s in cols])
        obj = db.get(copy.table)
        names = [n for n, _ in cols]
        order = [n for n, _ in table_columns(db, copy.table or "")]
        if names != order:
            idx = [names.index(n) for n in order]
            rows = [tuple(r[i] for i in idx) for r in rows]
        if rows:
            await asyncio.to_thread(obj.insert, rows)
        return len(rows)
