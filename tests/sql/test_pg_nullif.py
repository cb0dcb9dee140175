"""NULLIF of non-nullable arguments is nullable (NULL where they are equal): it was typed with
its first argument's nullability, so a materialized view of `nullif(2, k)` over a row with
k = 2 failed its sink (`Casting field 'c1' with null values to non-nullable`) and took the
maintenance runtime down (found by a PostgreSQL fuzz of maintained views)."""

from __future__ import annotations

from typing import Any

from tests.sql.pgcompare import fixture_pair

import twofold

SCHEMA = "CREATE TABLE t (k integer NOT NULL, a integer NOT NULL)"
SQL = "SELECT k, nullif(2, k) AS c, nullif(nullif(-2, k), a) AS d FROM t"


pg, db = fixture_pair("pgni", SCHEMA)


def test_nullif_of_equal_values_is_null_one_off_and_maintained(db: twofold.Database, pg: Any
                                                               ) -> None:
    db.sql(f"CREATE MATERIALIZED VIEW v AS {SQL}")
    for rows in ([(1, 5)], [(2, 5), (-2, 3), (3, -2)]):
        values = ", ".join(f"({k}, {a})" for k, a in rows)
        db.sql(f"INSERT INTO t VALUES {values}")
        pg.execute(f"INSERT INTO t VALUES {values}")
        want = sorted(tuple(r) for r in pg.execute(SQL).fetchall())
        assert sorted(db.sql(SQL).rows, key=repr) == sorted(want, key=repr)
        assert sorted(db.sql("SELECT * FROM v").rows, key=repr) == sorted(want, key=repr)
