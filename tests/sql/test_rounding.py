"""Rounding as PostgreSQL 15 rounds what users write (`docs/sql.md`, "Semantics"):
`round(double precision)` and a double cast or assigned to an integer round ties to even, a
zero's sign kept (`rint`: `round(2.5::float8)` is 2, `round(-0.4::float8)` is -0); a decimal
literal is PostgreSQL's `numeric` — and so are arithmetic of one with integers, its negation,
`abs`, COALESCE/CASE of one with integers, `avg` of integers — which rounds ties away from zero
(`round(2.5)`, `2.5::integer` and `INSERT ... VALUES (2.5)` into an integer column are 3).
Each case is run against a real PostgreSQL (`servers` fixture): the same values (numeric
compared as doubles), or the same SQLSTATE."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair

import twofold
from twofold.sql.errors import sqlstate_of

COLS = "id bigint, i integer, b bigint, s smallint, f double precision, r real"
ROWS = ("(1, 2, 2, 2, 2.5, 2.5), (2, -2, -2, -2, -2.5, -2.5), (3, 0, 0, 0, 0.5, 0.5), "
        "(4, 1, 1, 1, 1.5, 1.5), (5, 3, 3, 3, -0.0, -0.0), (6, 4, 4, 4, -0.4, -0.4), "
        "(7, 5, 5, 5, 4503599627370497, 3.5), (8, 6, 6, 6, 0.49999999999999994, 1e30), "
        "(9, 7, 7, 7, '-0', '-0')")


SCHEMA = (f"CREATE TABLE t ({COLS})", f"CREATE TABLE w ({COLS})", f"INSERT INTO t VALUES {ROWS}")


pg, db = fixture_pair("rnd", *SCHEMA)


def _key(v: Any) -> Any:
    """A value compared bit for bit as a double (numeric's Decimal as its double)."""
    if type(v).__name__ == "Decimal":
        v = float(v) + 0.0  # numeric has no -0
    if isinstance(v, float):
        return "nan" if math.isnan(v) else struct.pack("<d", v)
    return v


def _pg(pg: Any, sql: str) -> Any:
    import psycopg

    try:
        cur = pg.execute(sql)
        rows = cur.fetchall() if cur.description else []
        return sorted(tuple(_key(v) for v in r) for r in rows)
    except psycopg.Error as e:
        return str(e.sqlstate)


def _tf(db: twofold.Database, sql: str) -> Any:
    try:
        r = db.sql(sql)
        rows = r.rows if hasattr(r, "rows") else []
        return sorted(tuple(_key(v) for v in row) for row in rows)
    except twofold.TwofoldError as e:
        return sqlstate_of(e)


CASES = [
    # double precision: ties to even, the sign of zero kept
    "SELECT id, round(f) FROM t", "SELECT id, round(r) FROM t", "SELECT id, round(-f) FROM t",
    "SELECT id, round(f * 3) FROM t WHERE abs(f) < 10", "SELECT id, round(f + 0.5) FROM t",
    "SELECT round(2.5::float8), round(-2.5::float8), round(0.5::float8), round(3.5::float8)",
    "SELECT round('nan'::float8), round('inf'::float8), round('-inf'::float8)",
    "SELECT id, f::integer, f::bigint FROM t WHERE abs(f) < 1e6",
    "SELECT id, f::bigint FROM t", "SELECT id, r::integer, r::smallint FROM t WHERE id < 7",
    "SELECT 2.5::float8::integer, (-2.5)::float8::smallint, 4503599627370497::float8::bigint",
    "SELECT id, round(avg(f)) FROM t GROUP BY id", "SELECT round(1e300::float8)",
    # numeric: ties away from zero
    "SELECT round(2.5), round(-2.5), round(0.5), round(-0.5), round(1.5)",
    "SELECT 2.5::integer, (-2.5)::integer, -2.5::integer, 2.5::bigint, 32766.5::smallint",
    "SELECT round(2.5 * 3), round(2.5 + 1), round(-(2.5)), round(abs(-2.5)), round(7 / 2.0)",
    "SELECT (2.5 * 3)::integer, (3.5 * 3)::integer, round(1e0 * 2.5), 1.5e0::integer",
    "SELECT id, round(i * 0.5), (i * 0.5)::integer, round(i + 0.5) FROM t",
    "SELECT coalesce(2.5, 1)::integer, CASE WHEN true THEN 2.5 ELSE 1 END::integer",
    "SELECT round(avg(i)), avg(i)::integer FROM t WHERE id IN (1, 7)",
    "SELECT round(2.345, 2), round(-2.5, 0), round(5, 1), round(25, -1)",
    "SELECT round(2.5 + 1::float8), coalesce(2.5, 1::float8)::integer",  # float8 again
    # out of range
    "SELECT 'nan'::float8::integer", "SELECT 2147483647.5::integer",
    "SELECT 2147483647.5::float8::integer", "SELECT 32767.5::smallint",
]
WRITES = [
    "INSERT INTO w (id, i, b, s) VALUES (1, 2.5, -2.5, 0.5), (2, 3.5, 1.5, -0.5)",
    "INSERT INTO w (id, i, b, s) VALUES (3, 2.5::float8, -2.5::float8, 0.5::float8)",
    "INSERT INTO w (id, i, b, s) VALUES (4, 1e0, -0.0, -(1.5))",
    "INSERT INTO w (id, i) VALUES (5, 'nan'::float8)", "INSERT INTO w (id, s) VALUES (5, 32767.5)",
    "INSERT INTO w (id, b) VALUES (5, 1e19)", "INSERT INTO w (id, i) VALUES (5, 2147483647.5)",
    "UPDATE w SET s = 4.5 WHERE id = 1", "UPDATE w SET b = 2.5::float8 * 3 WHERE id = 2",
    "UPDATE w SET i = 2.5 * 3 WHERE id = 3",
]


@pytest.mark.parametrize("sql", CASES)
def test_rounding_equals_postgres(db: twofold.Database, pg: Any, sql: str) -> None:
    assert _tf(db, sql) == _pg(pg, sql), sql


def test_writes_round_as_postgres(db: twofold.Database, pg: Any) -> None:
    """Each write in turn: the same SQLSTATE, and the same table afterwards."""
    state = "SELECT id, i, b, s FROM w"
    for sql in WRITES:
        assert _tf(db, sql) == _pg(pg, sql), sql
        assert _tf(db, state) == _pg(pg, state), f"after {sql}"


def test_round_to_places_of_a_double_is_an_extension(db: twofold.Database, pg: Any) -> None:
    """PostgreSQL has no round(double precision, integer) (42883); twofold rounds the double
    to `d` places half away from zero, as round(x::numeric, d) would (documented)."""
    assert _pg(pg, "SELECT round(f, 1) FROM t") == "42883"
    got = db.sql("SELECT round(2.25::float8, 1), round(-2.5::float8, 0), round(1.5::float8, 0)")
    assert got.rows == [(2.3, -3.0, 2.0)]
