"""COPY FROM's batch parser (`server.copy_batch`) against the row parser it replaces on the hot
path (`statements.parse_copy_rows`): the same rows for what COPY TO writes (NULLs, quotes,
escapes, floats with NaN/Infinity/-0, booleans, bytea), and on arbitrary text either the same
rows or `None` (the row parser then answers, with its typed error naming the line). Over the
wire: a bad line is 22P02 naming line and column and writes nothing; octal and hex escapes.
Binary: numpy's read of fixed-width tuples against the tuple-by-tuple parser."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import errors

from twofold.server.copy import CopyOut, parse_binary_batch, parse_binary_rows
from twofold.server.copy_batch import parse_batch
from twofold.server.statements import copy_text_row, parse_copy, parse_copy_rows
from twofold.server.types import InvalidParameterValue, encode
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

SCALARS = ["int", "str", "float", "bool", "bytes"]
_text = st.lists(st.sampled_from([*list('ab,;"\t\n\r x\\.N0é'), "\\N", "\\."]),
                max_size=6).map("".join)
_row = st.tuples(st.none() | st.integers(-2**63, 2**63 - 1), st.none() | _text,
                 st.none() | st.floats(allow_nan=True) | st.sampled_from([0.0, -0.0, 1e300]),
                 st.none() | st.booleans(), st.none() | st.binary(max_size=4))


def _key(v: Any) -> Any:
    return ("nan",) if isinstance(v, float) and math.isnan(v) else (
        (v, math.copysign(1, v)) if isinstance(v, float) else v)


def _same(batch: Any, rows: list[tuple[Any, ...]]) -> bool:
    got = [tuple(_key(v) for v in r.values()) for r in batch.to_pylist()]
    return got == [tuple(_key(v) for v in r) for r in rows]


def _messages_data(messages: bytes) -> bytes:
    data, at = b"", 0
    while at < len(messages):
        length = int.from_bytes(messages[at + 1:at + 5], "big")
        if messages[at:at + 1] == b"d":
            data += messages[at + 5:at + 1 + length]
        at += 1 + length
    return data


def _text_data(rows: list[tuple[Any, ...]]) -> bytes:
    return b"".join(copy_text_row([encode(v, s, False) for v, s in zip(r, SCALARS, strict=True)])
                    for r in rows)


@settings(max_examples=examples(100), deadline=None)
@given(rows=st.lists(_row, max_size=8), end_marker=st.booleans(), crlf=st.booleans())
def test_text_format_batch_equals_row_parser(rows: list[tuple[Any, ...]], end_marker: bool,
                                             crlf: bool) -> None:
    copy = parse_copy("COPY t FROM STDIN")
    assert copy is not None
    data = _text_data(rows)
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    if end_marker:
        data += b"\\.\n"
    batch = parse_batch(data, copy, SCALARS)
    assert batch is not None  # what COPY TO writes, the batch path decides itself
    assert _same(batch, parse_copy_rows(data, copy, SCALARS))


@settings(max_examples=examples(100), deadline=None)
@given(rows=st.lists(_row, max_size=8), delimiter=st.sampled_from([",", ";", "|"]),
       header=st.booleans())
def test_csv_batch_equals_row_parser(rows: list[tuple[Any, ...]], delimiter: str,
                                     header: bool) -> None:
    opts = f"(FORMAT csv, DELIMITER '{delimiter}'{', HEADER' if header else ''})"
    out, into = parse_copy(f"COPY t TO STDOUT {opts}"), parse_copy(f"COPY t FROM STDIN {opts}")
    assert out is not None and into is not None
    writer = CopyOut(out, SCALARS, ["k", "s", "f", "b", "y"])
    data = _messages_data(writer.rows(rows) + writer.finish())
    batch = parse_batch(data, into, SCALARS)
    expected = parse_copy_rows(data, into, SCALARS)
    assert [tuple(map(_key, r)) for r in expected] == [tuple(map(_key, r)) for r in rows]
    if not any(r[1] is not None and ('"' in r[1] or "\\." in r[1]) for r in rows):
        assert batch is not None  # a value holding a quote or `\.` goes to the row parser
    if batch is not None:
        assert _same(batch, expected)


_raw = st.lists(st.sampled_from([*list('01a-+.e\t,"\\\n\r tfNxyé '), "\\N", "nan", "\\."]),
                max_size=30).map("".join)


@settings(max_examples=examples(200), deadline=None)
@given(text=_raw, csv=st.booleans(), scalars=st.lists(st.sampled_from(SCALARS), min_size=1,
                                                       max_size=3))
def test_arbitrary_data_same_rows_or_left_to_the_row_parser(text: str, csv: bool,
                                                           scalars: list[str]) -> None:
    copy = parse_copy("COPY t FROM STDIN" + (" (FORMAT csv)" if csv else ""))
    assert copy is not None
    data = text.encode()
    batch = parse_batch(data, copy, scalars)
    try:
        expected = parse_copy_rows(data, copy, scalars)
    except InvalidParameterValue:
        assert batch is None  # every error is the row parser's, naming the line
        return
    if batch is not None:
        assert _same(batch, expected)


def test_escapes_and_values_as_postgresql_reads_them() -> None:
    copy = parse_copy("COPY t FROM STDIN")
    assert copy is not None
    data = (b"\\101\\x42\\t\\\\x\\q\t Infinity \t YES \n"
            b"\\N\t-nan\toff\n\\.\n")
    batch = parse_batch(data, copy, ["str", "float", "bool"])
    assert batch is not None
    assert batch.column(0).to_pylist() == ["AB\t\\xq", None]
    assert batch.column(1).to_pylist()[0] == math.inf and math.isnan(batch.column(1)[1].as_py())
    assert batch.column(2).to_pylist() == [True, False]
    assert parse_copy_rows(data, copy, ["str", "float", "bool"])[0][0] == "AB\t\\xq"


def test_a_bad_line_is_22P02_naming_it_and_writes_nothing(server: ServerHandle,
                                                          name: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v double precision, s text)")
        good = "".join(f"{k}\t{k / 2}\tv{k}\n" for k in range(1000))
        for bad, where in [("7\tnope\tx\n", "line 1001, column 2"),
                           ("0x10\t1\tx\n", "line 1001, column 1"),
                           ("1\t2\n", "line 1001: expected 3 columns, got 2")]:
            with pytest.raises(errors.InvalidTextRepresentation, match=where), \
                    c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
                cp.write((good + bad + good).encode())
        assert c.execute(f"SELECT count(*) FROM {name}").fetchone() == (0,)
        with c.cursor().copy(f"COPY {name} (s, k) FROM STDIN WITH (FORMAT csv)") as cp:
            cp.write(b'"a ""q""",1\n,2\n"",3\n')
        assert c.execute(f"SELECT k, v, s FROM {name} ORDER BY k").fetchall() == [
            (1, None, 'a "q"'), (2, None, None), (3, None, "")]


_fixed = st.sampled_from(["int", "float", "bool"])


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data(), scalars=st.lists(_fixed, min_size=1, max_size=4),
       nulls=st.booleans())
def test_binary_batch_equals_row_parser(data: st.DataObject, scalars: list[str],
                                        nulls: bool) -> None:
    """What COPY TO writes in binary: read at once by numpy when no field is NULL (the same
    rows as tuple by tuple), else left to the row parser."""
    value = {"int": st.integers(-2**63, 2**63 - 1), "float": st.floats(), "bool": st.booleans()}
    rows = data.draw(st.lists(st.tuples(*[(st.none() | value[s]) if nulls else value[s]
                                          for s in scalars]), max_size=6))
    out = parse_copy("COPY t TO STDOUT (FORMAT binary)")
    assert out is not None
    writer = CopyOut(out, scalars)
    blob = _messages_data(writer.rows(rows) + writer.finish())
    batch = parse_binary_batch(blob, scalars)
    expected = parse_binary_rows(blob, scalars)
    assert [tuple(map(_key, r)) for r in expected] == [tuple(map(_key, r)) for r in rows]
    if any(v is None for r in rows for v in r):
        assert batch is None
    else:
        assert batch is not None and _same(batch, expected)
    if blob[:-2]:  # cut short: the batch path leaves it to the row parser's 22P02
        assert parse_binary_batch(blob[:-3], scalars) is None
