"""`LIKE`'s escape character and `BETWEEN SYMMETRIC` against PostgreSQL 15, one-off and as
materialized views: `'a\\%b'` matched `a\\b` and `'a\\\\b'` did not (the backslash was an
ordinary character), and `BETWEEN SYMMETRIC 7 AND -7` was read as `BETWEEN 7 AND -7`."""

from __future__ import annotations

from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair

import twofold

ROWS = [(1, 2, "a%b"), (2, -3, "a\\b"), (3, None, None), (4, 0, ""), (5, 7, "ab_c"),
        (6, -7, "A%b"), (7, 5, "a\\%"), (8, 1, "ab\\")]
SCHEMA = "CREATE TABLE p (k integer, a integer, s text)"

QUERIES = [
    r"SELECT k, s LIKE 'a\%b' AS x, s NOT LIKE 'a\%b' AS y FROM p",
    r"SELECT k, s LIKE 'a\\b' AS x, s LIKE '%\\%' AS y FROM p",
    r"SELECT k, s LIKE '%\_%' AS x, s LIKE '\a%' AS y FROM p",
    r"SELECT k, s ILIKE 'a\%%' AS x, s LIKE 'a\\\%' AS y FROM p",
    r"SELECT k FROM p WHERE s LIKE 'a' || '\%' || 'b'",
    r"SELECT k, s || 'x' LIKE s || 'x' AS x FROM p",
    "SELECT k, a BETWEEN SYMMETRIC 7 AND -7 AS x, a BETWEEN 7 AND -7 AS y FROM p",
    "SELECT k, a NOT BETWEEN SYMMETRIC 2 AND -3 AS x FROM p",
    "SELECT k, a BETWEEN SYMMETRIC NULL AND 2 AS x, k BETWEEN SYMMETRIC a AND 4 AS y FROM p",
]


pg, db = fixture_pair("pglike", SCHEMA, rows={"p": ROWS})


@pytest.mark.parametrize("sql", QUERIES)
def test_like_escapes_and_between_symmetric_equal_postgres(db: twofold.Database, pg: Any,
                                                           sql: str) -> None:
    want = sorted((tuple(r) for r in pg.execute(sql).fetchall()), key=repr)
    assert sorted(db.sql(sql).rows, key=repr) == want, sql
    name = f"lv{QUERIES.index(sql)}"
    db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    assert sorted(db.sql(f"SELECT * FROM {name}").rows, key=repr) == want, f"maintained: {sql}"
