"""The sign of zero against PostgreSQL 15, one-off and maintained, compared strictly (-0.0 is
not 0.0 here, unlike `querygen.normalize`).

PostgreSQL's float8 `sum` adds in order from the first value, so it is -0 exactly when every
value is -0.0; its `avg` adds to 0.0 and is never -0; a `GROUP BY` key, `min`/`max` and
`DISTINCT` read a member of the group, so they are -0 when every zero of the group is -0.0.
Over both zeros PostgreSQL's answer depends on the order it read the rows: those cells are
compared without their sign (`_tokens`)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair

import twofold

ROWS = [(1, -0.0), (1, -0.0), (2, -0.0), (2, 0.0), (3, 0.0), (4, None), (5, -0.0), (5, 1.5),
        (5, -1.5), (6, -0.0), (6, None)]

# Over ROWS each answer is PostgreSQL's whatever order it reads them in.
QUERIES = [
    "SELECT k, sum(f) AS s FROM z GROUP BY k",
    "SELECT sum(f) AS s FROM z WHERE k = 1",
    "SELECT sum(f) AS s FROM z WHERE k IN (1, 6)",
    "SELECT k, sum(f) AS s, count(*) AS n FROM z GROUP BY k",
    "SELECT k, sum(f) AS s, min(f) AS lo, max(f) AS hi FROM z WHERE k <> 2 GROUP BY k",
    "SELECT k, sum(f::real) AS s FROM z GROUP BY k",
    "SELECT k, sum(-f) AS s FROM z GROUP BY k",
    "SELECT k, sum(f) FILTER (WHERE f = 0) AS s FROM z GROUP BY k",
    "SELECT k, sum(DISTINCT f) AS s FROM z WHERE k <> 2 GROUP BY k",
    "SELECT k, avg(f) AS a, sum(f) AS s FROM z GROUP BY k",
    "SELECT avg(f) AS a FROM z WHERE k = 1",
    "SELECT f, count(*) AS n FROM z WHERE k IN (1, 5) GROUP BY f",
    "SELECT f, sum(f) AS s, min(k) AS lo FROM z WHERE k IN (1, 5, 6) GROUP BY f",
    "SELECT k, f, sum(f) AS s FROM z WHERE k <> 2 GROUP BY k, f",
    "SELECT f, k, count(*) AS n FROM z WHERE k <> 2 GROUP BY f, k",
    "SELECT DISTINCT f FROM z WHERE k IN (1, 5)",
    "SELECT f FROM z WHERE k = 1 UNION SELECT f FROM z WHERE k = 6",
    "SELECT k, var_pop(f) AS v, stddev_samp(f) AS d FROM z GROUP BY k",
]


def _token(v: Any) -> Any:
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if v == 0:
            return "-0" if math.copysign(1.0, v) < 0 else "+0"
    return v


def _strict(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_token(v) for v in r) for r in rows), key=repr)


pg, db = fixture_pair("pgz", "CREATE TABLE z (k integer, f double precision)",
                      "CREATE TABLE t (k integer, f double precision)", rows={"z": ROWS})


@pytest.mark.parametrize("sql", QUERIES)
def test_zero_signs_equal_postgres(db: twofold.Database, pg: Any, sql: str) -> None:
    want = _strict(pg.execute(sql).fetchall())
    assert _strict(db.sql(sql).rows) == want, sql
    name = f"zv{QUERIES.index(sql)}"
    db.sql(f"CREATE MATERIALIZED VIEW {name} AS {sql}")
    assert _strict(db.sql(f"SELECT * FROM {name}").rows) == want, f"maintained: {sql}"


def _mixed(rows: list[tuple[Any, ...]]) -> bool:
    zeros = {math.copysign(1.0, f) for _, f in rows if f == 0}
    return len(zeros) == 2


def _tokens(rows: list[tuple[Any, ...]], loose: Callable[[tuple[Any, ...], int], bool]
            ) -> list[tuple[Any, ...]]:
    """Rows with each zero as its sign, or as plain 0 where `loose(row, column)`."""
    return sorted((tuple(0 if v == 0 and isinstance(v, float) and loose(r, i) else _token(v)
                         for i, v in enumerate(r)) for r in rows), key=repr)


def test_maintained_zero_signs_follow_inserts_and_deletes(db: twofold.Database, pg: Any
                                                          ) -> None:
    """Materialized views over both reduce paths (accumulated count/sum/avg; recomputed
    min/max/DISTINCT) after each of random inserts and deletes of -0.0, 0.0 and others:
    equal to PostgreSQL's query over the same rows, and to twofold's one-off query."""
    rng = random.Random(5)
    model: list[tuple[Any, ...]] = []
    table = db.table("t")
    by_k: Callable[[tuple[Any, ...]], bool] = lambda r: _mixed([m for m in model if m[0] == r[0]])  # noqa: E731
    everywhere: Callable[[], bool] = lambda: _mixed(model)  # noqa: E731
    queries: list[tuple[str, Callable[[tuple[Any, ...], int], bool]]] = [
        ("SELECT k, sum(f) AS s, avg(f) AS a, count(f) AS n FROM t GROUP BY k",
         lambda r, i: False),
        ("SELECT k, sum(f) AS s, min(f) AS lo, max(f) AS hi FROM t GROUP BY k",
         lambda r, i: i >= 2 and by_k(r)),
        ("SELECT f, count(*) AS n, sum(f) AS s FROM t GROUP BY f",
         lambda r, i: i == 0 and everywhere()),
        ("SELECT f, min(k) AS lo FROM t GROUP BY f", lambda r, i: i == 0 and everywhere()),
        ("SELECT sum(f) AS s, sum(DISTINCT f) AS d, avg(f) AS a FROM t",
         lambda r, i: i == 1 and everywhere()),
    ]
    for j, (sql, _) in enumerate(queries):
        db.sql(f"CREATE MATERIALIZED VIEW tv{j} AS {sql}")
    values = (-0.0, -0.0, -0.0, 0.0, 2.5, -2.5, None)
    for _ in range(14):
        gone = [i for i in range(len(model)) if rng.random() < 0.35]
        if gone:
            table.delete([model[i] for i in gone])
            for i in reversed(gone):
                del model[i]
        new = [(rng.choice((1, 2, None)), rng.choice(values)) for _ in range(rng.randint(0, 3))]
        if new:
            table.insert(new)
            model.extend(new)
        pg.execute("DELETE FROM t")
        if model:
            with pg.cursor() as cur:
                cur.executemany("INSERT INTO t VALUES (%s, %s)", model)
        for j, (sql, loose) in enumerate(queries):
            want = _tokens(pg.execute(sql).fetchall(), loose)
            assert _tokens(db.sql(sql).rows, loose) == want, f"{sql} over {model}"
            got = _tokens(db.sql(f"SELECT * FROM tv{j}").rows, loose)
            assert got == want, f"maintained {sql} over {model}"


def test_sum_of_negative_zeros_is_negative_zero_as_text(db: twofold.Database, pg: Any) -> None:
    """The sign reaches text as PostgreSQL's `-0`."""
    sql = "SELECT sum(f)::text AS s FROM z WHERE k = 1"
    assert db.sql(sql).rows == [tuple(r) for r in pg.execute(sql).fetchall()] == [("-0",)]
