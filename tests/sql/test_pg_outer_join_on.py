"""Outer joins whose ON holds an equality of expressions (a key computed on each side) beside
other conjuncts, against a real PostgreSQL 15 (`servers` fixture): the conjuncts that are not
keys must read the columns they name, whichever order the conjuncts come in (a residual once
read the column after the one it named when an expression key came before it)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair

import twofold

SCHEMA = ("CREATE TABLE x (k integer, a integer, b integer)",
          "CREATE TABLE y (k integer, a integer, b integer)",
          "INSERT INTO x VALUES (1, 0, 7), (2, 3, 1), (3, 0, 0), (NULL, 0, 2)",
          "INSERT INTO y VALUES (1, 5, 1), (2, 8, 9), (3, 4, 3), (4, 5, NULL)")

ONS = [
    "x.k = y.k AND (x.a + 1) = (y.a - 4) AND y.k > 1",
    "y.k > 1 AND x.k = y.k AND (x.a + 1) = (y.a - 4)",
    "(x.a + 1) = (y.a - 4) AND x.k + y.k > 2",
    "(x.a + 1) = (y.a - 4) AND x.b < y.b",
    "(x.a * 2) = (y.a - 5) AND (x.b + 0) = y.b AND x.k <> y.k",
    "x.k = y.k AND x.a + y.a > 4 AND (x.b - 1) = (y.b - 1)",
]


pg, db = fixture_pair("ojo", *SCHEMA)


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)


@pytest.mark.parametrize("how", ["LEFT", "RIGHT", "FULL"])
@pytest.mark.parametrize("on", ONS)
def test_outer_join_on_equals_postgres(pg: Any, db: twofold.Database, how: str, on: str
                                       ) -> None:
    sql = f"SELECT x.k, x.a, x.b, y.k, y.a, y.b FROM x {how} JOIN y ON {on}"
    assert _sorted(db.sql(sql).rows) == _sorted(pg.execute(sql).fetchall()), sql
