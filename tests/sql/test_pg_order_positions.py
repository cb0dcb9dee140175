"""ORDER BY / GROUP BY / DISTINCT ON constants against PostgreSQL 15: an integer names an
output column (1..n; others 42P10), any other constant is 42601 "non-integer constant".
Before, `ORDER BY 1.5` and `GROUP BY 1.5` failed XX000 (an internal error) and `ORDER BY 'a'`,
`ORDER BY NULL`, `ORDER BY -1` answered."""

from __future__ import annotations

from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair, same_error

import twofold

pg, db = fixture_pair("pgop", "CREATE TABLE t (id integer, s text)",
                      rows={"t": [(1, "a"), (2, "b"), (3, "a")]})

FAILING = ["SELECT id FROM t ORDER BY 1.5", "SELECT id FROM t ORDER BY 'a'",
           "SELECT id FROM t ORDER BY 'a', id", "SELECT id FROM t ORDER BY NULL",
           "SELECT id FROM t ORDER BY 1e0", "SELECT id FROM t ORDER BY -1",
           "SELECT id FROM t ORDER BY 0", "SELECT id FROM t ORDER BY 2",
           "SELECT s FROM t GROUP BY 1.5", "SELECT s FROM t GROUP BY 'a'",
           "SELECT s FROM t GROUP BY 2", "SELECT DISTINCT ON (1.5) id FROM t ORDER BY 1"]
ANSWERED = ["SELECT id, s FROM t ORDER BY 2, 1", "SELECT s, count(*) FROM t GROUP BY 1 ORDER BY 1",
            "SELECT DISTINCT ON (1) s, id FROM t ORDER BY 1, 2", "SELECT id FROM t ORDER BY (1)"]


@pytest.mark.parametrize("sql", FAILING)
def test_constants_fail_as_in_postgresql(db: twofold.Database, pg: Any, sql: str) -> None:
    same_error(db, pg, sql)


@pytest.mark.parametrize("sql", ANSWERED)
def test_positions_name_columns(db: twofold.Database, pg: Any, sql: str) -> None:
    assert db.sql(sql).rows == [tuple(r) for r in pg.execute(sql).fetchall()]
