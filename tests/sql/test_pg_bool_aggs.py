"""`every(x)` (PostgreSQL's SQL-standard `bool_and`), `bool_and` and `bool_or` against
PostgreSQL 15, over NULLs and empty groups, grouped and not, one-off and as materialized views
kept through inserts and deletes. `every` was refused as an unknown function (42883)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair

import twofold

SCHEMA = "CREATE TABLE t (id integer, g integer, b boolean)"
QUERIES = [
    "SELECT g, every(b) AS e, bool_and(b) AS a, bool_or(b) AS o, count(*) AS n FROM t GROUP BY g",
    "SELECT every(b) AS e, bool_and(b) AS a, bool_or(b) AS o FROM t",
    "SELECT every(b) AS e, bool_or(b) AS o FROM t WHERE g > 100",
    "SELECT g, every(b) FILTER (WHERE id % 2 = 0) AS e FROM t GROUP BY g",
    "SELECT g FROM t GROUP BY g HAVING every(b)",
    "SELECT g, every(NOT b) AS e FROM t GROUP BY g",
]
# Each step: rows inserted, then ids deleted.
STEPS: list[tuple[list[tuple[int, int, bool | None]], list[int]]] = [
    ([(1, 1, True), (2, 1, None), (3, 2, None), (4, 3, False), (5, 3, True), (6, 4, True)], []),
    ([(7, 2, True), (8, 5, None)], [4]),     # group 3 all true now; 2 gets a true
    ([], [5, 7]),                            # group 3 vanishes; 2 is NULLs only again
    ([(9, 1, False), (10, 6, False)], [1]),  # group 1: NULL and false
    ([], [2, 3, 6, 8, 9, 10]),               # nothing left
    ([(11, 7, True)], []),
]


pg, db = fixture_pair("pgba", SCHEMA)


def _rows(rows: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in rows), key=repr)


def test_every_names_its_column(db: twofold.Database) -> None:
    assert db.sql("SELECT every(b) FROM t WHERE false").columns == ["every"]


@pytest.mark.parametrize("sql", ["SELECT every(b, b) FROM t", "SELECT every() FROM t"])
def test_every_of_other_arities_is_an_unknown_function(db: twofold.Database, sql: str) -> None:
    from twofold.sql.errors import sqlstate_of

    with pytest.raises(twofold.TwofoldError) as e:
        db.sql(sql)
    assert sqlstate_of(e.value) == "42883"


def test_bool_aggregates_one_off_and_maintained(db: twofold.Database, pg: Any) -> None:
    for i, sql in enumerate(QUERIES):
        db.sql(f"CREATE MATERIALIZED VIEW ba{i} AS {sql}")
    for step, (inserts, deletes) in enumerate(STEPS):
        for sql in [*(f"INSERT INTO t VALUES ({a}, {g}, {'NULL' if b is None else b})"
                      for a, g, b in inserts),
                    *(f"DELETE FROM t WHERE id = {a}" for a in deletes)]:
            pg.execute(sql)
            db.sql(sql)
        for i, sql in enumerate(QUERIES):
            want = _rows(pg.execute(sql).fetchall())
            assert _rows(db.sql(sql).rows) == want, f"step {step}: {sql}"
            assert _rows(db.sql(f"SELECT * FROM ba{i}").rows) == want, f"step {step}: view {sql}"
