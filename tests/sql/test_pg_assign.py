"""Statements whose outcome PostgreSQL 15 decides when they run, run in turn against a real
PostgreSQL (`servers` fixture) and twofold (`db.sql`): the same rows (doubles bit for bit,
numeric as its double) or the same SQLSTATE.

- `CREATE MATERIALIZED VIEW` runs its query: one that fails over the rows there are fails the
  statement with the evaluation error and creates nothing (`sql.creation`).
- `INSERT ... SELECT` and `UPDATE ... SET` apply PostgreSQL's assignment casts: a double or a
  numeric into an integer column rounds (ties to even / away from zero) and is range-checked,
  a number or boolean into a text column is its text, anything else is `42804` naming both
  types as PostgreSQL does."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair, twofold_with

import twofold
from twofold.sql.errors import sqlstate_of

SCHEMA = ("CREATE TABLE t (i integer, f double precision, s text)",
          "INSERT INTO t VALUES (1, 2.5, 'a'), (0, -0.5, 'b'), (2, 3.5, NULL)",
          "CREATE TABLE w (i integer, h smallint, n bigint, s text, v varchar(3), c char(3), "
          "b boolean, r real, f double precision)")


pg, db = fixture_pair("asg", *SCHEMA)


def _key(v: Any) -> Any:
    if type(v).__name__ == "Decimal":
        v = float(v) + 0.0
    if isinstance(v, float):
        return "nan" if math.isnan(v) else struct.pack("<d", v)
    return v


def _outcome_pg(pg: Any, sql: str) -> Any:
    import psycopg

    try:
        cur = pg.execute(sql)
    except psycopg.Error as e:  # a type mismatch with PostgreSQL's message too
        return ("error", e.sqlstate, e.diag.message_primary if e.sqlstate == "42804" else "")
    rows = cur.fetchall() if cur.description else []
    return sorted((tuple(_key(v) for v in r) for r in rows), key=repr)


def _outcome(db: twofold.Database, sql: str) -> Any:
    try:
        got = db.sql(sql)
    except twofold.TwofoldError as e:
        state = sqlstate_of(e)
        return ("error", state, str(e) if state == "42804" else "")
    rows = got.rows if hasattr(got, "rows") else []
    return sorted((tuple(_key(v) for v in r) for r in rows), key=repr)


def _same(pg: Any, db: twofold.Database, statements: list[str]) -> None:
    for sql in statements:
        want, got = _outcome_pg(pg, sql), _outcome(db, sql)
        assert got == want, f"{sql}: twofold {got}; PostgreSQL {want}"


CREATE_CASES = [
    ["CREATE MATERIALIZED VIEW m1 AS SELECT 1 / i AS q FROM t", "SELECT * FROM m1"],
    ["CREATE MATERIALIZED VIEW m2 AS SELECT i + 2147483647 AS q FROM t", "SELECT * FROM m2"],
    ["CREATE MATERIALIZED VIEW m3 AS SELECT sqrt(f) AS q FROM t", "SELECT * FROM m3"],
    ["CREATE MATERIALIZED VIEW m4 AS SELECT (SELECT i FROM t) AS q", "SELECT * FROM m4"],
    ["CREATE MATERIALIZED VIEW m5 AS SELECT s::varchar(1)::char(1) AS q, 1 / (i + 1) AS d "
     "FROM t", "SELECT * FROM m5"],
    ["CREATE MATERIALIZED VIEW m6 AS SELECT 1 / i AS q FROM t WHERE i > 0", "SELECT * FROM m6",
     "DROP MATERIALIZED VIEW m6", "SELECT * FROM m6"],
]


@pytest.mark.parametrize("statements", CREATE_CASES, ids=lambda s: s[0].split()[3])
def test_materialized_view_runs_its_query_when_created(pg: Any, db: twofold.Database,
                                                        statements: list[str]) -> None:
    _same(pg, db, statements)


def test_materialized_view_create_error_is_the_evaluation_error() -> None:
    """The error of a failed creation is the evaluation error (its `primary` what pgwire
    sends), and the name is free again: the same statement over good rows creates it."""
    with twofold_with(*SCHEMA) as db:
        with pytest.raises(twofold.QueryFailed) as e:
            db.sql("CREATE MATERIALIZED VIEW m AS SELECT 1 / i AS q FROM t")
        assert e.value.primary == "division by zero" and sqlstate_of(e.value) == "22012"
        assert ("m",) not in db.sql("SHOW MATERIALIZED VIEWS").rows
        db.sql("DELETE FROM t WHERE i = 0")
        db.sql("CREATE MATERIALIZED VIEW m AS SELECT 1 / i AS q FROM t")
        assert sorted(db.sql("SELECT q FROM m").rows) == [(0,), (1,)]


ASSIGN_CASES = [
    # a double (or numeric) into an integer column: rint / away from zero, range-checked
    "INSERT INTO w (i) SELECT f FROM t",
    "INSERT INTO w (i, h, n) SELECT f * 3, f + 0.5, -f FROM t",
    "INSERT INTO w (i) SELECT x FROM (VALUES (2.5), (3.5), (-2.5), (NULL)) v(x)",
    "INSERT INTO w (i) SELECT x FROM (VALUES (2.5), (3), (-4.5)) v(x)",
    "INSERT INTO w (i) SELECT x FROM (VALUES (2.5), (3.5::float8)) v(x)",
    "INSERT INTO w (i) WITH c AS (SELECT 0.5 AS x) SELECT x FROM c",
    "INSERT INTO w (i) SELECT 2.5 * i FROM t",
    "INSERT INTO w (i) SELECT 'NaN'::float8", "INSERT INTO w (i) SELECT f * 1e300 FROM t",
    "INSERT INTO w (h) SELECT 32767.5::float8", "INSERT INTO w (h) SELECT 32766.5::float8",
    "INSERT INTO w (i) SELECT 2147483647.5::float8", "INSERT INTO w (n) SELECT 1e19::float8",
    "INSERT INTO w (i) SELECT i::bigint * 3000000000 FROM t",
    "INSERT INTO w (f, r) SELECT i, i * 16777217 FROM t",
    # numbers and booleans into text columns: their text
    "INSERT INTO w (s, v) SELECT i = 1, i * 100 FROM t",
    "INSERT INTO w (s, c) SELECT f, i FROM t", "INSERT INTO w (v) SELECT i * 1000 FROM t",
    "INSERT INTO w (s) SELECT x FROM (VALUES (0.1::real), (1e30::float8), (-0.0::float8)) v(x)",
    # no assignment cast: 42804, PostgreSQL's message
    "INSERT INTO w (i) SELECT s FROM t", "INSERT INTO w (b) SELECT i FROM t",
    "INSERT INTO w (i) SELECT i = 1 FROM t", "INSERT INTO w (h) SELECT true",
    # a quoted literal that is a whole item of INSERT's SELECT takes its column's type
    "INSERT INTO w (i, b, h) SELECT '5', 't' AS q, '7'", "INSERT INTO w (h) SELECT '40000'",
    "INSERT INTO w (i) SELECT 'x'", "INSERT INTO w (i) SELECT x FROM (SELECT '7' AS x) s",
    "INSERT INTO w (i) SELECT '5' UNION SELECT '6'", "INSERT INTO w (r, s) SELECT '0.5', 'abc'",
    "INSERT INTO w (i) SELECT DISTINCT '5'", "INSERT INTO w (i) SELECT '6' FROM t WHERE i > 0",
    "DELETE FROM w",
    # INSERT ... VALUES: computed values, and values of another type, assigned the same way
    "INSERT INTO w (i, s, f) VALUES (1 + 1, upper('a'), 2.5 * 2), (2.5::float8 * 1, 'x' || 'y', 1)",
    "INSERT INTO w (i, s, n) VALUES (1, 5, 2), (NULL, 2.5::float8, 3.5::float8 + 0)",
    "INSERT INTO w (s, v, c) VALUES (1.50, 12, true)",
    "INSERT INTO w (r, f) VALUES (0.25 + 0, NULL)",
    "INSERT INTO w (i) VALUES (true)", "INSERT INTO w (h) VALUES (40000 - 1)",
    "INSERT INTO w (v) VALUES (123)", "INSERT INTO w (i) VALUES (1 / 0)",
    "INSERT INTO w (b) VALUES (1)", "INSERT INTO w (i) VALUES (1), (2 + 0), ('3')",
    "DELETE FROM w",
    # UPDATE ... SET, the same casts
    "INSERT INTO w (i, f) VALUES (1, 2.5), (2, -0.5)",
    "UPDATE w SET i = f", "UPDATE w SET n = f * 3", "UPDATE w SET s = f", "UPDATE w SET c = i",
    "UPDATE w SET s = i = 1", "UPDATE w SET h = f * 20000", "UPDATE w SET v = f * 1000",
    "UPDATE w SET b = i", "UPDATE w SET i = s", "UPDATE w SET i = 1 WHERE i",
]


READ_W = "SELECT i, h, n, s, v, c::text, b, r, f FROM w"  # char(n) unpadded: docs/sql.md


def test_assignment_casts_as_postgres(pg: Any, db: twofold.Database) -> None:
    """Each write, then the table's rows, equal PostgreSQL's (or the same error, with
    nothing written)."""
    for sql in ASSIGN_CASES:
        _same(pg, db, [sql, READ_W])
        if sql.startswith("INSERT INTO w (i) SELECT"):
            _same(pg, db, ["DELETE FROM w"])


NUMERIC_CASES = [
    "SELECT 1.50::text, (-1.50)::text, 1e3::text, 1.5e-3::text, 1.50e1::text, .5::text, "
    "5.::text, (-0.00)::text, 1.50 || 'x', concat(1.50, 'x'), (-(-2.50))::text, "
    "99999999999999999999::text, 0.10::varchar(3)",
    "CREATE VIEW nv AS SELECT 2.5 AS x, -0.5 AS y, 3 AS z",
    "SELECT x::integer, round(x), round(y), y::integer, (x * z)::integer FROM nv",
    "CREATE MATERIALIZED VIEW nm AS SELECT x, y FROM nv",
    "SELECT x::integer, y::integer, round(x) FROM nm",
    "SELECT x::integer FROM (SELECT x FROM nv UNION ALL SELECT 4.5 UNION ALL SELECT 6) u",
    "SELECT x::integer FROM (SELECT 2.5 AS x UNION SELECT 3) u",
    "SELECT x::integer FROM (VALUES (2.5), (NULL), (3)) v(x)",
    "SELECT x::integer FROM (VALUES (2.5), (3.5::float8)) v(x)",
    "WITH c AS (SELECT 0.5 AS x, 1.5 AS y) SELECT x::integer, round(y) FROM c",
    "INSERT INTO w (i, h) SELECT x, y FROM nv", READ_W, "DELETE FROM w",
]


def test_numeric_literals_as_postgres(pg: Any, db: twofold.Database) -> None:
    """A decimal literal's text keeps its scale; numeric columns of subqueries, CTEs, VALUES,
    set operations, views and materialized views round as numeric (away from zero)."""
    _same(pg, db, NUMERIC_CASES)
