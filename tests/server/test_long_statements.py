"""Long statements do not hold up other sessions (spec/pgwire.md, Robustness: "no statement of
one session can block another session's reads"): a long text is parsed on a worker thread
(`parser.parse_off_loop`), a long INSERT's VALUES are bound a few hundred rows per turn of the
event loop, and a large result is encoded and written `ROWS_PER_TURN` rows at a time with the
loop let run between pieces — in the simple and the extended protocol, with and without row
limits, and in COPY TO — and every row still arrives, in order, once."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.server.wire import Raw, msg

from twofold.server import session as session_module
from twofold.server.copy import CopyOut
from twofold.server.output import ROWS_PER_TURN, RowEncoder
from twofold.server.session import Session
from twofold.server.statements import parse_copy
from twofold.sql import parser
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

_ROWS = 3 * ROWS_PER_TURN + 17  # several pieces and a short last one


def _table(server: ServerHandle, name: str, rows: int = _ROWS) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v double precision, s text)")
        with c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
            cp.write("".join(f"{k}\t{k * 0.5}\tv{k}\n" for k in range(rows)))


def _expected(rows: int = _ROWS) -> list[tuple[int, float, str]]:
    return [(k, k * 0.5, f"v{k}") for k in range(rows)]


def test_a_large_result_arrives_whole_in_both_protocols(server: ServerHandle,
                                                        name: str) -> None:
    _table(server, name)
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        sql = f"SELECT k, v, s FROM {name} ORDER BY k"
        extended = c.execute(sql).fetchall()  # psycopg's execute: the extended protocol
        binary = c.cursor(binary=True).execute(sql).fetchall()
        copied = bytearray()
        with c.cursor().copy(f"COPY ({sql}) TO STDOUT") as cp:
            for chunk in cp:
                copied += chunk
    assert extended == _expected()
    assert binary == _expected()
    # PostgreSQL's text form of a double: `1` for 1.0, `0.5` for 0.5
    assert copied.decode().splitlines() == [
        f"{k}\t{int(v) if v.is_integer() else v}\t{s}" for k, v, s in _expected()]


def test_simple_query_sends_every_row_then_the_count(server: ServerHandle, name: str) -> None:
    _table(server, name)
    raw = Raw(server.host, server.port)
    try:
        raw.login()
        raw.send(msg(b"Q", f"SELECT k FROM {name} ORDER BY k\0".encode()))
        got = raw.until(b"Z")
    finally:
        raw.close()
    rows = [int(body[6:]) for kind, body in got if kind == b"D"]
    tags = [body for kind, body in got if kind == b"C"]
    assert rows == list(range(_ROWS))
    assert tags == [f"SELECT {_ROWS}\0".encode()]


def test_execute_row_limits_across_pieces(server: ServerHandle, name: str) -> None:
    """Execute with a row limit larger than a piece, then the rest: PortalSuspended after
    exactly the limit, the rest after it, nothing twice or lost."""
    _table(server, name)
    limit = ROWS_PER_TURN + 500
    raw = Raw(server.host, server.port)
    try:
        raw.login()
        sql = f"SELECT k FROM {name} ORDER BY k"
        raw.send(msg(b"P", b"\0" + sql.encode() + b"\0" + struct.pack("!h", 0))
                 + msg(b"B", b"\0\0" + struct.pack("!hhh", 0, 0, 0))
                 + msg(b"E", b"\0" + struct.pack("!i", limit))
                 + msg(b"E", b"\0" + struct.pack("!i", 0))
                 + msg(b"S"))
        got = raw.until(b"Z")
    finally:
        raw.close()
    kinds = [kind for kind, _ in got]
    rows = [int(body[6:]) for kind, body in got if kind == b"D"]
    assert rows == list(range(_ROWS))
    suspended = kinds.index(b"s")
    assert kinds[:suspended].count(b"D") == limit
    assert kinds.count(b"C") == 1 and kinds.index(b"C") > suspended


def test_a_long_insert_does_not_stop_other_sessions_reads(server: ServerHandle,
                                                           name: str) -> None:
    """While one session's 20,000-row INSERT is parsed, bound and written, another session's
    reads keep being answered: some start and finish inside the INSERT's span (before,
    the parse alone held the loop for the whole span, and none did)."""
    _table(server, name, rows=10)
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        c.execute(f"SELECT s FROM {name} WHERE k = %s", [1]).fetchall()
    text = f"INSERT INTO {name} VALUES " + ", ".join(
        f"({k}, {k}.5, 'x{k}')" for k in range(100, 20_100))
    assert len(text) > parser.OFF_LOOP_CHARS
    spans: list[tuple[float, float]] = []
    stop = threading.Event()

    def reader() -> None:
        with psycopg.connect(server.dsn(), autocommit=True) as r:
            while not stop.is_set():
                t0 = time.perf_counter()
                got = r.execute(f"SELECT s FROM {name} WHERE k = %s", [1],
                                prepare=True).fetchall()
                spans.append((t0, time.perf_counter()))
                assert got == [("v1",)]

    th = threading.Thread(target=reader)
    th.start()
    try:
        time.sleep(0.2)  # the reader is going
        with psycopg.connect(server.dsn(), autocommit=True) as w:
            start = time.perf_counter()
            w.execute(text)
            end = time.perf_counter()
            (n,) = w.execute(f"SELECT count(*) FROM {name}").fetchone() or (0,)
    finally:
        stop.set()
        th.join(30)
    assert n == 10 + 20_000
    inside = [s for s in spans if s[0] > start and s[1] < end]
    assert len(inside) >= 5, (len(inside), end - start)


def test_parse_off_loop_hands_over_one_fresh_tree() -> None:
    import asyncio

    long = "SELECT " + " + ".join(str(i) for i in range(2000))
    assert len(long) >= parser.OFF_LOOP_CHARS
    asyncio.run(parser.parse_off_loop(long))
    first = parser.parse(long)  # the handed tree
    second = parser.parse(long)  # a copy of the kept one
    assert first == second and first is not second
    first.set("distinct", True)  # the handed tree is the caller's own: nothing else changes
    assert parser.parse(long) == second
    # short texts and texts that do not parse are left to `parse` (its error, on the loop)
    asyncio.run(parser.parse_off_loop("SELECT 1"))
    assert "SELECT 1" not in parser._HANDED
    bad = "SELECT (" + "1, " * 3000
    asyncio.run(parser.parse_off_loop(bad))
    assert bad not in parser._HANDED


_VALUES = st.tuples(
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    st.one_of(st.none(), st.sampled_from([0.0, -0.0, 0.5, float("nan"), float("inf"),
                                          -float("inf"), 1e300]), st.floats()),
    st.one_of(st.none(), st.sampled_from(["", "a", "tab\there", 'q"uote', "ünï", "\\."]),
              st.text(max_size=5)),
)


@settings(max_examples=examples(60), deadline=None)
@given(rows=st.lists(_VALUES, max_size=30).flatmap(
           lambda base: st.lists(st.sampled_from(base), max_size=40) if base
           else st.just([])),  # duplicates: rows drawn again from a few
       piece=st.integers(1, 7), form=st.integers(0, 4))
def test_rows_in_pieces_are_the_rows_in_one(rows: list[tuple[Any, ...]], piece: int,
                                            form: int) -> None:
    """`Session.send_rows` with pieces of `piece` rows writes the bytes one piece writes —
    DataRows in text and binary, COPY TO in text, csv with a header and binary (a COPY's
    header and count carried across pieces) — over NULLs, NaN, infinities, -0.0, quoting
    and duplicates."""
    cols = [("k", "int"), ("v", "float"), ("s", "str")]

    def encoder() -> Any:
        if form < 2:
            return RowEncoder(cols, (form,)).rows
        sql = ["COPY t TO STDOUT", "COPY t TO STDOUT WITH (FORMAT csv, HEADER)",
               "COPY t TO STDOUT WITH (FORMAT binary)"][form - 2]
        copy = parse_copy(sql)
        assert copy is not None
        return CopyOut(copy, [s for _, s in cols], [n for n, _ in cols]).rows

    class Stub:
        def __init__(self) -> None:
            self.written: list[bytes] = []

        def out(self, data: bytes) -> None:
            self.written.append(data)

        async def drain(self) -> None:
            pass

    whole = encoder()(rows)
    stub = Stub()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(session_module, "ROWS_PER_TURN", piece)
        asyncio.run(Session.send_rows(stub, encoder(), rows))  # type: ignore[arg-type]
    assert b"".join(stub.written) == whole
    assert len(stub.written) == (1 if len(rows) <= piece else -(-len(rows) // piece))
