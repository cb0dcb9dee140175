"""Result rows on the wire: RowDescription fields, DataRows and COPY text rows.

Contract: `fields(cols, formats)` is the RowDescription of columns `(name, scalar)` with the
result format codes of a Bind (none: text; one: every column; else per column), a
`portals.Sourced` column with its table OID and attribute number (others 0, 0).
`row_description(cols, formats)` is that message encoded (kept for the most recent shapes: a
prepared statement sends the same one at every execution).
`data_rows(cols, rows, formats)` encodes rows as DataRow messages, all in one bytes object
(`RowEncoder(cols, formats).rows(rows)`: the encoder kept where one shape is sent again);
`copy_rows(rows, scalars)` encodes rows as COPY text-format CopyData messages and counts them.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable
from typing import Any

from twofold.server import messages as m
from twofold.server.portals import Column, Sourced, fmt
from twofold.server.statements import copy_text_row
from twofold.server.types import encode, encoder, wire_field


def fields(cols: list[Column], formats: tuple[int, ...]) -> list[m.Field]:
    out = []
    for i, col in enumerate(cols):
        name, scalar = col
        oid, size, typmod = wire_field(scalar)  # varchar(n)/char(n): typmod n + 4
        table, attnum = (col.table, col.attnum) if isinstance(col, Sourced) else (0, 0)
        out.append((name, oid, size, fmt(formats, i), typmod, table, attnum))
    return out


def row_description(cols: list[Column], formats: tuple[int, ...]) -> bytes:
    # keyed by origins too: a Sourced column equals its plain Column
    return _row_description(tuple(cols), formats, tuple(
        (c.table, c.attnum) if isinstance(c, Sourced) else None for c in cols))


@functools.lru_cache(maxsize=256)
def _row_description(cols: tuple[Column, ...], formats: tuple[int, ...],
                     origins: tuple[tuple[int, int] | None, ...]) -> bytes:
    return m.encode_row_description(fields(list(cols), formats))


class RowEncoder:
    """DataRows of columns `cols` under result formats `formats`, worked out once."""

    __slots__ = ("encoders", "head")

    def __init__(self, cols: list[Column], formats: tuple[int, ...]) -> None:
        self.encoders = [encoder(s, fmt(formats, i) == 1) for i, (_, s) in enumerate(cols)]
        self.head = _I16.pack(len(cols))

    def rows(self, rows: Iterable[tuple[Any, ...]]) -> bytes:
        """The rows as DataRow messages (`messages.encode_data_row`'s bytes), in one."""
        encoders, pack = self.encoders, _I32.pack
        out = []
        for row in rows:
            body = [self.head]
            for v, enc in zip(row, encoders, strict=True):
                b = enc(v)
                if b is None:
                    body.append(_NULL)
                else:
                    body.append(pack(len(b)))
                    body.append(b)
            data = b"".join(body)
            out.append(b"D" + pack(len(data) + 4) + data)
        return b"".join(out)


_I16, _I32 = struct.Struct("!h"), struct.Struct("!i")
_NULL = _I32.pack(-1)


ROWS_PER_TURN = 1024
"""A result's rows are encoded and written at most this many at a time, the event loop let
run between pieces (and the socket drained): however large a result, encoding it holds up
the other sessions' requests for one piece at a time (~2-4 ms here), never for the whole
result (a 100k-row SELECT took ~350 ms in one piece). Also the most a statement's rows add
to the server's write buffer beyond what the client has read."""


def data_rows(cols: list[Column], rows: Iterable[tuple[Any, ...]],
              formats: tuple[int, ...]) -> bytes:
    return RowEncoder(cols, formats).rows(rows)


def copy_rows(rows: Iterable[tuple[Any, ...]], scalars: list[str]) -> tuple[bytes, int]:
    out = [m.encode_copy_data(copy_text_row(
        [encode(v, s, False) for v, s in zip(row, scalars, strict=True)])) for row in rows]
    return b"".join(out), len(out)
