"""Binary COPY over the wire (psycopg 3's binary copy): FROM STDIN and TO STDOUT in PostgreSQL's
binary file format, every engine type and NULLs, and bad binary data refused whole."""

from __future__ import annotations

import math
import struct

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import errors

from twofold.server.copy import HEADER, TRAILER, parse_binary_rows
from twofold.server.statements import parse_copy
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

ROWS = [(1, 1.5, "a\tb\nc", True, b"\x00\xff"), (2, None, None, None, None),
        (-(2**63), -math.inf, "", False, b""), (2**63 - 1, 0.1, "é✓", True, b"\\x")]


def connect(server: ServerHandle) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10)


def test_binary_copy_in_and_out(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v double precision, s text, b boolean, "
                  "y bytea)")
        with c.cursor().copy(f"COPY {name} FROM STDIN (FORMAT binary)") as cp:
            cp.set_types(["int8", "float8", "text", "bool", "bytea"])
            for r in ROWS:
                cp.write_row(r)
        assert c.execute(f"SELECT * FROM {name} ORDER BY k").fetchall() == sorted(
            ROWS, key=lambda r: r[0])
        with c.cursor().copy(f"COPY (SELECT * FROM {name} ORDER BY k) TO STDOUT "
                             "(FORMAT binary)") as cp:
            cp.set_types(["int8", "float8", "text", "bool", "bytea"])
            got = list(cp.rows())
        assert got == sorted(ROWS, key=lambda r: r[0])
        with c.cursor().copy(f"COPY (SELECT k FROM {name} WHERE k = 99) TO STDOUT "
                             "(FORMAT binary)") as cp:
            cp.set_types(["int8"])
            assert list(cp.rows()) == []  # the header travels with the trailer
        with c.cursor().copy(f"COPY {name} TO STDOUT WITH (FORMAT binary)") as cp:
            raw = b"".join(bytes(b) for b in cp)
        assert raw.startswith(HEADER) and raw.endswith(TRAILER)
        assert parse_binary_rows(raw, ["int", "float", "str", "bool", "bytes"]) == [
            tuple(r) for r in c.execute(f"SELECT * FROM {name}").fetchall()]


def test_binary_copy_in_takes_narrower_ints_and_floats(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v double precision)")
        with c.cursor().copy(f"COPY {name} (k, v) FROM STDIN (FORMAT binary)") as cp:
            cp.set_types(["int4", "float4"])
            cp.write_row((7, 0.5))
            cp.write_row((-3, None))
        with c.cursor().copy(f"COPY {name} FROM STDIN (FORMAT binary)") as cp:
            cp.set_types(["int2", "float8"])
            cp.write_row((12, 2.25))
        assert c.execute(f"SELECT k, v FROM {name} ORDER BY k").fetchall() == [
            (-3, None), (7, 0.5), (12, 2.25)]


def test_bad_binary_data_writes_nothing(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, s text)")
        with pytest.raises(errors.BadCopyFileFormat, match="signature"), \
                c.cursor().copy(f"COPY {name} FROM STDIN (FORMAT binary)") as cp:
            cp.write(b"1\tnot binary\n")
        good = struct.pack("!hi", 2, 8) + struct.pack("!q", 1) + struct.pack("!i", 1) + b"x"
        for tail, match in [(struct.pack("!hi", 2, 8) + b"\x00\x01", "ends early"),
                            (struct.pack("!h", 1) + struct.pack("!i", -1), "expected 2"),
                            (struct.pack("!hi", 2, 3) + b"abc" + struct.pack("!i", -1),
                             "column 1")]:
            with pytest.raises(errors.InvalidTextRepresentation, match=match), \
                    c.cursor().copy(f"COPY {name} FROM STDIN (FORMAT binary)") as cp:
                cp.write(HEADER + good + tail + TRAILER)
        assert c.execute(f"SELECT count(*) FROM {name}").fetchone() == (0,)
        with pytest.raises(errors.SyntaxError):
            c.execute(f"COPY {name} FROM STDIN (FORMAT binary, HEADER)")


_value = {"int": st.integers(-(2**63), 2**63 - 1), "float": st.floats(allow_nan=False),
          "str": st.text(), "bool": st.booleans(), "bytes": st.binary()}
_scalars = list(_value)


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.tuples(*[st.none() | _value[s] for s in _scalars]), max_size=20))
def test_binary_rows_round_trip(rows: list[tuple[object, ...]]) -> None:
    """What `CopyOut` encodes, `parse_binary_rows` decodes to the same rows (COPY TO's
    output is valid COPY FROM input)."""
    from twofold.server.copy import CopyOut

    copy = parse_copy("COPY t TO STDOUT (FORMAT binary)")
    assert copy is not None and copy.binary
    out = CopyOut(copy, _scalars)
    # CopyData messages: type byte, int32 length, payload.
    assert out.start()[:1] == b"H"
    messages = out.rows(rows) + out.finish()[:-5]  # less CopyDone
    data, at = b"", 0
    while at < len(messages):
        (length,) = struct.unpack_from("!i", messages, at + 1)
        data += messages[at + 5:at + 1 + length]
        at += 1 + length
    assert out.count == len(rows)
    assert parse_binary_rows(data, _scalars) == rows
