"""An evaluation error counts only on a row that reaches it, against PostgreSQL 15: a scan's
quals in order (a later conjunct's error only where the earlier ones hold) and the select list
after them. Before, every map and filter of a Map/Filter/Project was evaluated on every input
row, so `WHERE f < '-inf' AND f::integer IS NOT NULL` over a NaN failed with 22003 where
PostgreSQL answers (found by a PostgreSQL fuzz run of `test_pg_differential`'s generator)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair, same_error

import twofold
from twofold.sql.errors import sqlstate_of

ROWS = [(1, 5, 0.5), (2, 0, math.nan), (3, None, math.inf), (4, -2, 2.5), (5, 1, None)]
SCHEMA = "CREATE TABLE t (k integer, a integer, f double precision)"

QUERIES = [
    "SELECT k FROM t WHERE f < '-inf' AND f::integer IS NOT NULL",
    "SELECT k FROM t WHERE coalesce(f, 1.5) IN (0, 1, 3) AND f::integer > 0",
    "SELECT k, f::integer AS i FROM t WHERE abs(f) < 1e6",
    "SELECT k, 10 / a AS q FROM t WHERE a <> 0",
    "SELECT k FROM t WHERE k = 1 AND 10 / a > 1",
    "SELECT k, round(f)::integer AS r FROM t WHERE f = 0.5 OR f = 2.5",
    "SELECT v.k, v.i FROM (SELECT k, f::integer AS i FROM t) v WHERE v.k = 4",
    # BETWEEN is two quals: the second is not evaluated where the first is NULL
    "SELECT k FROM t WHERE f BETWEEN nullif(a, a) AND f::integer",
]


pg, db = fixture_pair("pgfe", SCHEMA, rows={"t": ROWS})


@pytest.mark.parametrize("sql", QUERIES)
def test_errors_of_rows_a_filter_drops_do_not_count(db: twofold.Database, pg: Any,
                                                    sql: str) -> None:
    want = sorted(tuple(r) for r in pg.execute(sql).fetchall())
    try:
        got = sorted(db.sql(sql).rows)
    except twofold.TwofoldError as e:
        pytest.fail(f"{sql}: {sqlstate_of(e)} {e}; PostgreSQL {want}")
    assert got == want, sql
    name = f"fe{QUERIES.index(sql)}"
    db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    assert sorted(db.sql(f"SELECT * FROM {name}").rows) == want, f"maintained: {sql}"


def test_an_error_the_filter_reaches_still_fails(db: twofold.Database, pg: Any) -> None:
    sql = "SELECT k FROM t WHERE k = 2 AND f::integer > 0"
    assert same_error(db, pg, sql) == "22003"
