"""Double precision NaN, infinities, -0 and NULL against PostgreSQL 15, where NaN equals NaN
and sorts above every number: `nullif`, `greatest`/`least`, `=`/`<>`/`<` with `'NaN'`,
`IS [NOT] DISTINCT FROM`, `IN`, `ORDER BY`, grouping - one-off and as materialized views
through inserts and deletes. A quoted literal among COALESCE/NULLIF/GREATEST/LEAST/CASE
arguments takes the other arguments' type, as PostgreSQL's `unknown` does (`nullif(f, 'NaN')`
is double precision; it failed 42804, "types double precision and text cannot be matched"),
and so does one in an IN list with its subject (`i IN (NULL::float8, 'NaN')` failed 22P02,
'NaN' taken as an integer)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair, same_error

import twofold

SCHEMA = "CREATE TABLE t (id integer, f double precision, i integer, b boolean)"
ROWS = [(1, 1.0, 1, True), (2, math.nan, 2, False), (3, None, None, None),
        (4, -0.0, 0, True), (5, math.inf, 40000, False), (6, -math.inf, -5, True),
        (7, math.nan, 7, None), (8, 2.5, -2, False)]
EXPRS = [
    "nullif(f, 'NaN')", "nullif('NaN', f)", "nullif(f, 'NaN'::float8)", "nullif(f, '-0')",
    "coalesce(f, 'NaN')", "coalesce(f, '-inf')", "coalesce(i, '7')", "coalesce(b, 'yes')",
    "greatest(f, 0)", "least(f, 0)", "greatest(f, 'NaN')", "least(f, 'NaN')",
    "greatest(f, NULL, 2)", "least(f, NULL, '-inf')", "greatest(i, '10')", "least(i, '-1', 3)",
    "CASE WHEN id > 2 THEN f ELSE 'NaN' END", "CASE WHEN id > 4 THEN 'inf' ELSE f END",
    "CASE WHEN id > 4 THEN i ELSE '5' END",
    "f = 'NaN'::float8", "f = 'NaN'", "f <> 'NaN'", "f < 'NaN'", "f > 'inf'", "f >= f",
    "f IS DISTINCT FROM 'NaN'", "f IS NOT DISTINCT FROM 'NaN'::float8",
    "f IS DISTINCT FROM nullif(f, 'NaN')", "f IN ('NaN', 1)", "f NOT IN ('NaN', 1)",
    # an IN list resolves with its subject as one set: the literal is a double here
    "i IN (NULL::float8, 'NaN')", "i IN (2.5, '-2')", "i NOT IN (2.0, '1')",
    "i IN ('NaN', 1e0)", "'NaN' IN (-1, 'NaN'::float8)", "'-2' IN (i, f)",
    "nullif('-0', 1e308)::float8",  # numeric: no negative zero
]
SQL = f"SELECT id, {', '.join(f'{e} AS e{i}' for i, e in enumerate(EXPRS))} FROM t"
GROUPED = "SELECT f, count(*) AS n, max(f) AS hi, min(f) AS lo FROM t GROUP BY f"


pg, db = fixture_pair("pgnan", SCHEMA, SCHEMA.replace(" t ", " o "), rows={"o": ROWS})


def _key(v: Any) -> Any:
    if isinstance(v, float):
        return (1, "NaN") if math.isnan(v) else (0, v, math.copysign(1.0, v))
    return (2, repr(v))


def _same(rows: Any) -> list[tuple[Any, ...]]:
    """Rows comparable with NaN (NaN != NaN in Python) and -0.0 told from 0.0."""
    return sorted((tuple(_key(v) for v in r) for r in rows), key=repr)


def test_nan_one_off_and_maintained(db: twofold.Database, pg: Any) -> None:
    db.sql(f"CREATE MATERIALIZED VIEW nan_v AS {SQL}")
    db.sql(f"CREATE MATERIALIZED VIEW nan_g AS {GROUPED}")
    steps = [(ROWS[:5], []), (ROWS[5:], [1, 2]), ([(2, math.nan, 9, True)], [7, 4])]
    for inserts, deletes in steps:
        for row in inserts:
            pg.execute("INSERT INTO t VALUES (%s, %s, %s, %s)", row)
        db.table("t").insert(inserts)
        for i in deletes:
            pg.execute(f"DELETE FROM t WHERE id = {i}")
            db.sql(f"DELETE FROM t WHERE id = {i}")
        for sql, view in ((SQL, "nan_v"), (GROUPED, "nan_g")):
            want = _same(pg.execute(sql).fetchall())
            assert _same(db.sql(sql).rows) == want, sql
            assert _same(db.sql(f"SELECT * FROM {view}").rows) == want, view


@pytest.mark.parametrize("order", ["f", "f DESC", "f NULLS FIRST", "f DESC NULLS LAST",
                                   "nullif(f, 'NaN')", "greatest(f, 'NaN'), id"])
def test_nan_sorts_above_every_number(db: twofold.Database, pg: Any, order: str) -> None:
    sql = f"SELECT id, f FROM o ORDER BY {order}, id"
    want = [tuple(_key(v) for v in r) for r in pg.execute(sql).fetchall()]
    assert [tuple(_key(v) for v in r) for r in db.sql(sql).rows] == want


@pytest.mark.parametrize("sql", ["SELECT coalesce(f, 'x') FROM t",
                                 "SELECT coalesce(i, '1.5') FROM t",
                                 "SELECT greatest(i, '3000000000') FROM t",
                                 "SELECT coalesce(b, 'maybe') FROM t",
                                 "SELECT '2.5' IN (i, 2.5) FROM t"])  # i = '2.5' alone
def test_a_literal_of_the_wrong_type_fails_as_in_postgresql(db: twofold.Database, pg: Any,
                                                            sql: str) -> None:
    same_error(db, pg, sql)
