"""Result columns of declared types on the wire, compared with a real PostgreSQL 15.

A column declared smallint/integer/real/varchar is announced as int2/int4/float4/varchar (OIDs
21/23/700/1043) through plain references, `SELECT *`, views, materialized views, indexes,
subqueries, joins, set operations, min/max, COALESCE/CASE and casts that keep the type; its
values go out as PostgreSQL writes them (4- and 2-byte binary integers, 4-byte floats, float4's
shortest text). psycopg's `cursor.description` type codes, text and binary cursor values,
asyncpg's records and `prepare().get_attributes()` equal PostgreSQL's for random rows with
NULLs, range boundaries, NaN/infinities and -0. Parameters (binary int4 and float4) and binary
COPY FROM into such columns are read as PostgreSQL reads them.
"""

from __future__ import annotations

import asyncio
import math
import struct
from collections.abc import Sequence
from typing import Any

import asyncpg
import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from twofold.server.types import float4_text
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

_DDL = ("(k bigint, i2 smallint, i4 integer, i8 bigint, f4 real, f8 double precision, "
        "t text, b boolean, v varchar(5))")
_COLS = "k, i2, i4, i8, f4, f8, t, b, v"
_I2, _I4 = 2**15, 2**31
_i2 = st.none() | st.sampled_from([-_I2, _I2 - 1, 0, -1, 1]) | st.integers(-_I2, _I2 - 1)
_i4 = st.none() | st.sampled_from([-_I4, _I4 - 1, 0]) | st.integers(-_I4, _I4 - 1)
_i8 = st.none() | st.sampled_from([-(2**63) + 1, 2**63 - 1]) | st.integers(-(2**63) + 1, 2**63 - 1)
_specials = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0, 0.1, 1 / 3, 1e6,
                             123456.7, 1e-5, 1e-45, 3.4028234663852886e38, 16777217.0])
# No -0.0 in the real column: which of 0 and -0 min/max keep is the engines' (float4_text's
# own test and the f8 column cover -0).
_f4 = (st.none() | (_specials | st.floats(width=32)).map(lambda x: 0.0 if x == 0 else x)
       | st.floats(1e-30, 1e30) | st.floats(-1e30, -1e-30))
_f8 = st.none() | _specials | st.floats(allow_nan=True, allow_infinity=True)
_text = st.none() | st.text("ab c'\\", max_size=5)
_rows = st.lists(st.tuples(_i2, _i4, _i8, _f4, _f8, _text, st.none() | st.booleans(), _text),
                 min_size=0, max_size=5)

QUERIES = [
    f"SELECT {_COLS} FROM {{t}}",
    "SELECT * FROM {t}",
    "SELECT * FROM {t}_v",
    "SELECT * FROM {t}_mv",
    "SELECT s.i4, s.f4, s.i2 FROM (SELECT i4, f4, i2 FROM {t}) s",
    "SELECT x.k, x.i4, y.i2 FROM {t} x JOIN {t} y ON x.k = y.k",
    "SELECT i2 FROM {t} UNION ALL SELECT i4 FROM {t}",
    "SELECT f4 FROM {t} UNION ALL SELECT i4 FROM {t}",
    "SELECT f4 FROM {t} UNION SELECT f4 FROM {t}",
    "SELECT min(i2), max(i4), min(f4), max(f4), min(v), count(*), sum(i4), sum(i2) FROM {t}",
    "SELECT b, min(i4), max(i2) FROM {t} GROUP BY b",
    "SELECT COALESCE(i4, i2), COALESCE(i2, NULL), CASE WHEN b THEN i2 ELSE i4 END, "
    "COALESCE(f4, f4) FROM {t}",
    "SELECT i2::integer, i4::int4, f4::real, i4::bigint, f4::float8 FROM {t}",
    "SELECT DISTINCT i4 FROM {t}",
    "SELECT i4, f4 FROM {t} ORDER BY k LIMIT 3",
    "SELECT i4, i2 FROM {t} WHERE i4 = 7",
]


def _literal(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "'NaN'"
        if math.isinf(v):
            return "'Infinity'" if v > 0 else "'-Infinity'"
        return "'-0'" if v == 0 and math.copysign(1, v) < 0 else repr(v)
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(v)


def _load(dsn: str, t: str, rows: Sequence[tuple[object, ...]]) -> None:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
        for stmt in (f"DROP MATERIALIZED VIEW IF EXISTS {t}_mv", f"DROP VIEW IF EXISTS {t}_v",
                     f"DROP TABLE IF EXISTS {t} CASCADE", f"CREATE TABLE {t} {_DDL}"):
            c.execute(stmt)
        if rows:
            values = ", ".join("(" + ", ".join(_literal(v) for v in (k, *r)) + ")"
                               for k, r in enumerate(rows))
            c.execute(f"INSERT INTO {t} VALUES {values}")
        c.execute(f"CREATE VIEW {t}_v AS SELECT k, i2, i4, f4, v FROM {t}")
        c.execute(f"CREATE MATERIALIZED VIEW {t}_mv AS SELECT i4, f4, i2, k + 1 AS e FROM {t}")
        c.execute(f"CREATE INDEX {t}_i4 ON {t} (i4)")


def _canon(rows: list[Any]) -> list[str]:
    """Rows as sorted reprs (NaN equal to NaN; order-free)."""
    return sorted(repr(tuple(r)) for r in rows)


def _psycopg_view(dsn: str, t: str) -> list[Any]:
    out: list[Any] = []
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
        for q in QUERIES:
            sql = q.format(t=t)
            for binary in (False, True):
                cur = c.cursor(binary=binary)
                cur.execute(sql)
                assert cur.description is not None
                out.append((sql, binary, [d.type_code for d in cur.description],
                            _canon(cur.fetchall())))
    return out


async def _asyncpg_view(host: str, port: int, user: str, database: str, t: str) -> list[Any]:
    out: list[Any] = []
    conn = await asyncpg.connect(host=host, port=port, user=user, database=database,
                                 timeout=10, command_timeout=30)
    try:
        for q in QUERIES:
            sql = q.format(t=t)
            stmt = await conn.prepare(sql)
            attrs = [(a.type.oid, a.type.name) for a in stmt.get_attributes()]
            records = await stmt.fetch()
            out.append((sql, attrs, _canon([tuple(r.values()) for r in records])))
    finally:
        await conn.close(timeout=5)
    return out


@given(_rows)
# No shrinking: an example is DDL and ~60 statements on two servers, and shrinking one took
# past the suite's timeout; a failure reports the rows it was generated with.
@settings(max_examples=examples(15), deadline=None,
          phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_result_types_and_values_as_postgres(server: ServerHandle, postgres: tuple[str, int],
                                             rows: list[tuple[object, ...]]) -> None:
    host, port = postgres
    pg = f"host={host} port={port} user=postgres dbname=postgres"
    _load(pg, "oids_t", rows)
    _load(server.dsn(), "oids_t", rows)
    want, got = _psycopg_view(pg, "oids_t"), _psycopg_view(server.dsn(), "oids_t")
    for w, g in zip(want, got, strict=True):
        assert g == w
    want_a = asyncio.run(_asyncpg_view(host, port, "postgres", "postgres", "oids_t"))
    got_a = asyncio.run(_asyncpg_view(server.host, server.port, "twofold", "twofold", "oids_t"))
    for w, g in zip(want_a, got_a, strict=True):
        assert g == w


def test_expressions_are_announced_with_postgres_types(server: ServerHandle,
                                                        name: str) -> None:
    """Expressions have PostgreSQL's types (docs/sql.md, twofold.sql.pgtypes): int4 + int4
    is int4 (checked in that range), -smallint int2, a literal int4, real * integer float8,
    sum(real) real; avg is float8 (PostgreSQL's numeric: the documented deviation)."""
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (a integer, b smallint, c real)")
        cur = c.execute(f"SELECT a + a, -b, abs(a), c * 2, sum(c), avg(a), 1, "
                        f"COALESCE(a, 0), a + 1::bigint FROM {name} GROUP BY a, b, c")
        assert cur.description is not None
        assert [d.type_code for d in cur.description] == [23, 21, 23, 701, 700, 701, 23, 23,
                                                          20]


def test_type_codes_name_the_declared_types(server: ServerHandle, name: str) -> None:
    """The OIDs themselves (not only equal to PostgreSQL's): the case the issue names."""
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (a integer, b smallint, c real, d bigint, "
                  "e double precision, f varchar(3))")
        cur = c.execute(f"SELECT a, b, c, d, e, f, a + a, a + d FROM {name}")
        assert cur.description is not None
        assert [d.type_code for d in cur.description] == [23, 21, 700, 20, 701, 1043, 23, 20]
        c.execute(f"INSERT INTO {name} VALUES (1, 2, 0.1, 4, 0.1, 'x')")
        assert c.execute(f"SELECT c, c = 0.1, c::float8 FROM {name}").fetchone() == (
            0.1, False, float(np.float32(0.1)))


@given(st.floats(width=32) | st.sampled_from([-0.0, 1e-45, 3.4028235e38, 1e6, 999999.0,
                                              34110950.0, 34110952.0, 16777217.0])
       | st.integers(-(2**31), 2**31 - 1).map(float))
@settings(max_examples=examples(100), deadline=None)
def test_float4_text_as_postgres(postgres: tuple[str, int], x: float) -> None:
    host, port = postgres
    with psycopg.connect(f"host={host} port={port} user=postgres dbname=postgres",
                         autocommit=True) as c:
        want = c.execute("SELECT %s::float8::real::text", (x,)).fetchone()
    assert want is not None
    assert float4_text(x) == want[0]


def _outcome(dsn: str, t: str, run: Any) -> Any:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
        c.execute(f"DROP TABLE IF EXISTS {t}")
        c.execute(f"CREATE TABLE {t} (k bigint, i2 smallint, i4 integer, f4 real)")
        try:
            run(c)
        except psycopg.Error as e:
            return e.sqlstate
        return c.execute(f"SELECT k, i2, i4, f4::float8 FROM {t} ORDER BY k").fetchall()


_param_rows = st.lists(st.tuples(
    st.integers(-_I2 - 2, _I2 + 1) | st.none(), st.integers(-_I4 - 2, _I4 + 1) | st.none(),
    st.floats(width=32) | st.floats(-1e39, 1e39) | st.none()), min_size=1, max_size=3)


@given(_param_rows)
@settings(max_examples=examples(20), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_binary_parameters_into_declared_columns(server: ServerHandle,
                                                 postgres: tuple[str, int],
                                                 rows: list[tuple[Any, Any, Any]]) -> None:
    """A prepared INSERT whose parameters are sent in binary as int2/int4/float4 (psycopg's
    `%b` with the types the server described): stored as PostgreSQL stores them."""
    from psycopg.types.numeric import Float4, Int2, Int4

    def dumpable(r: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
        i2, i4, f4 = r
        return (None if i2 is None or not -_I2 <= i2 < _I2 else Int2(i2),
                None if i4 is None or not -_I4 <= i4 < _I4 else Int4(i4),
                None if f4 is None or abs(f4) > 3.4e38 else Float4(f4))

    def run(c: psycopg.Connection[Any]) -> None:
        for k, r in enumerate(rows):
            c.execute("INSERT INTO oids_p VALUES (%b, %b, %b, %b)", (k, *dumpable(r)),
                      prepare=True)

    host, port = postgres
    want = _outcome(f"host={host} port={port} user=postgres dbname=postgres", "oids_p", run)
    assert repr(_outcome(server.dsn(), "oids_p", run)) == repr(want)  # NaN equal to NaN


def test_asyncpg_parameters_take_the_declared_types(server: ServerHandle,
                                                    postgres: tuple[str, int]) -> None:
    """asyncpg encodes a parameter by the type the server describes: int4 for an integer
    column (4 bytes), float4 for a real one, int2 for a smallint; out-of-range values fail in
    the client, as against PostgreSQL."""
    async def run(host: str, port: int, user: str) -> Any:
        conn = await asyncpg.connect(host=host, port=port, user=user, database=user,
                                     timeout=10, command_timeout=30)
        try:
            await conn.execute("DROP TABLE IF EXISTS oids_ap")
            await conn.execute("CREATE TABLE oids_ap (i2 smallint, i4 integer, f4 real)")
            stmt = await conn.prepare("INSERT INTO oids_ap VALUES ($1, $2, $3)")
            types = [t.name for t in stmt.get_parameters()]
            await stmt.fetch(-32768, 2**31 - 1, 0.1)
            await stmt.fetch(None, -(2**31), None)
            try:
                await stmt.fetch(1, 2**31, 1.0)
                overflow = None
            except Exception as e:  # the client refuses to encode it
                overflow = type(e).__name__
            lookup = await conn.prepare("SELECT i2, i4, f4 FROM oids_ap WHERE i4 = $1")
            found = [tuple(r.values()) for r in await lookup.fetch(2**31 - 1)]
            return types, overflow, found, [(a.name, a.type.name) for a in
                                            lookup.get_attributes()]
        finally:
            await conn.close(timeout=5)

    host, port = postgres
    want = asyncio.run(run(host, port, "postgres"))
    got = asyncio.run(run(server.host, server.port, "twofold"))
    assert got == want
    assert want[0] == ["int2", "int4", "float4"]


def _binary_copy(dsn: str, t: str, rows: list[tuple[Any, Any, Any]]) -> Any:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
        c.execute(f"DROP TABLE IF EXISTS {t}")
        c.execute(f"CREATE TABLE {t} (i2 smallint, i4 integer, f4 real)")
        with c.cursor().copy(f"COPY {t} FROM STDIN (FORMAT binary)") as cp:
            cp.set_types(["int2", "int4", "float4"])
            for r in rows:
                cp.write_row(r)
        got = c.execute(f"SELECT i2, i4, f4::float8 FROM {t}").fetchall()
        return sorted(got, key=repr)


@given(st.lists(st.tuples(
    st.integers(-_I2, _I2 - 1) | st.none(), st.integers(-_I4, _I4 - 1) | st.none(),
    st.floats(width=32) | st.none()), min_size=0, max_size=6))
@settings(max_examples=examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_binary_copy_into_declared_columns(server: ServerHandle, postgres: tuple[str, int],
                                           rows: list[tuple[Any, Any, Any]]) -> None:
    host, port = postgres
    want = _binary_copy(f"host={host} port={port} user=postgres dbname=postgres", "oids_c", rows)
    got = _binary_copy(server.dsn(), "oids_c", rows)
    assert repr(got) == repr(want)


def test_binary_copy_of_many_rows_reads_them_at_once(server: ServerHandle) -> None:
    """Without NULLs, every tuple has one layout: the numpy batch reader (4- and 2-byte
    fields of declared columns) gives what the row reader gives."""
    rows = [(k % 30000, k * 1000, k / 7) for k in range(3000)]
    got = _binary_copy(server.dsn(), "oids_cb", rows)
    assert got == sorted([(a, b, float(np.float32(c))) for a, b, c in rows], key=repr)


def test_prepared_point_lookup_on_indexed_int4_table_fast_path(server: ServerHandle,
                                                               postgres: tuple[str, int]
                                                               ) -> None:
    """A prepared point lookup executed many times (psycopg prepares it server-side after
    the first executions: the fast path answers those) gives PostgreSQL's types and bytes,
    text and binary, every time."""
    def run(dsn: str) -> list[Any]:
        out = []
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
            c.execute("DROP TABLE IF EXISTS oids_fast")
            c.execute("CREATE TABLE oids_fast (k integer, s smallint, r real, n bigint)")
            c.execute("INSERT INTO oids_fast VALUES (1, 1, 0.1, 1), (2, -32768, 'NaN', NULL), "
                      f"({2**31 - 1}, 32767, 3.4028235e38, 3)")
            c.execute("CREATE INDEX oids_fast_k ON oids_fast (k)")
            for binary in (False, True):
                cur = c.cursor(binary=binary)
                for i in range(12):
                    key = [1, 2, 2**31 - 1, 5][i % 4]
                    cur.execute("SELECT k, s, r, n FROM oids_fast WHERE k = %s", (key,),
                                prepare=True)
                    assert cur.description is not None
                    out.append(([d.type_code for d in cur.description], repr(cur.fetchall())))
        return out

    host, port = postgres
    want = run(f"host={host} port={port} user=postgres dbname=postgres")
    assert run(server.dsn()) == want


def test_int4_binary_encoding_of_a_value_outside_the_range_is_22003() -> None:
    """A value outside int4 in a declared column (only the Python API can write one) is a
    typed error at encoding, not a struct.error."""
    from twofold.server.types import encode
    from twofold.sql.errors import NumericValueOutOfRange

    with pytest.raises(NumericValueOutOfRange):
        encode(2**31, "int4", True)
    assert encode(2**31 - 1, "int4", True) == struct.pack("!i", 2**31 - 1)
    assert encode(1e39, "float4", True) == struct.pack("!f", math.inf)


def test_asyncpg_prepared_lookup_executed_again_keeps_the_announced_types(
        server: ServerHandle, postgres: tuple[str, int]) -> None:
    """asyncpg decodes every execution of a prepared statement with the types its Describe
    announced: the later executions (which the fast path may answer) must send 4-byte int4
    and float4 values too, not int8/float8 ones."""
    async def run(host: str, port: int, user: str) -> list[Any]:
        conn = await asyncpg.connect(host=host, port=port, user=user, database=user,
                                     timeout=10, command_timeout=30)
        try:
            await conn.execute("DROP TABLE IF EXISTS oids_again")
            await conn.execute("CREATE TABLE oids_again (k integer, s smallint, r real, "
                               "v varchar(4))")
            await conn.execute("INSERT INTO oids_again VALUES (1, -1, 0.1, 'ab'), "
                               "(2, 2, NULL, NULL)")
            await conn.execute("CREATE INDEX oids_again_k ON oids_again (k)")
            stmt = await conn.prepare("SELECT k, s, r, v FROM oids_again WHERE k = $1")
            return [[tuple(r.values()) for r in await stmt.fetch(1 + i % 2)]
                    for i in range(8)]
        finally:
            await conn.close(timeout=5)

    host, port = postgres
    assert asyncio.run(run(server.host, server.port, "twofold")) == \
        asyncio.run(run(host, port, "postgres"))


def test_binary_batch_reader_takes_declared_widths() -> None:
    """`parse_binary_batch` reads int2/int4/float4 fields of declared columns at once (and
    leaves a file of other widths to the row reader)."""
    from twofold.server.copy import HEADER, TRAILER, parse_binary_batch, parse_binary_rows

    rows = [(1, -5, 0.5), (-32768, 2**31 - 1, -1e-3)]
    body = b"".join(struct.pack("!h", 3) + struct.pack("!ih", 2, a) + struct.pack("!ii", 4, b)
                    + struct.pack("!if", 4, c) for a, b, c in rows)
    data = HEADER + body + TRAILER
    batch = parse_binary_batch(data, ["int", "int", "float"], ["int2", "int4", "float4"])
    assert batch is not None
    got = list(zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True))
    assert got == parse_binary_rows(data, ["int", "int", "float"])
    assert got == [(a, b, float(np.float32(c))) for a, b, c in rows]
    assert parse_binary_batch(data, ["int", "int", "float"]) is None  # 8-byte layout expected


def test_subscribe_and_cursors_announce_the_declared_types(server: ServerHandle,
                                                          name: str) -> None:
    """SUBSCRIBE (streamed, and through DECLARE/FETCH) and COPY (query) TO STDOUT in binary
    carry the declared types as queries do: mz_timestamp/mz_diff int8, then the columns."""
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (a integer, b smallint, r real)")
        c.execute(f"INSERT INTO {name} VALUES (1, 2, 0.1)")
        c.execute(f"DECLARE cur CURSOR FOR SUBSCRIBE {name}")
        cur = c.execute("FETCH 10 cur WITH (timeout = '2s')")
        assert cur.description is not None
        assert [d.type_code for d in cur.description] == [20, 20, 23, 21, 700]
        assert [r[1:] for r in cur.fetchall()] == [(1, 1, 2, 0.1)]
        c.execute("CLOSE cur")
        with c.cursor(binary=True) as bc:
            for row in bc.stream(f"SUBSCRIBE {name}"):
                assert bc.description is not None
                assert [d.type_code for d in bc.description] == [20, 20, 23, 21, 700]
                assert row[1:] == (1, 1, 2, float(np.float32(0.1)))
                break
        with c.cursor().copy(f"COPY (SELECT a, b, r FROM {name}) TO STDOUT (FORMAT binary)"
                             ) as cp:
            cp.set_types(["int4", "int2", "float4"])
            assert list(cp.rows()) == [(1, 2, float(np.float32(0.1)))]
        with c.cursor().copy(f"COPY (SELECT a, b, r FROM {name}) TO STDOUT") as cp:
            assert b"".join(bytes(b) for b in cp) == b"1\t2\t0.1\n"
