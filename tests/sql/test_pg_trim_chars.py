"""`btrim`/`ltrim`/`rtrim(s, chars)` and `trim([BOTH|LEADING|TRAILING] chars FROM s)` against
PostgreSQL 15: the longest prefix and/or suffix of characters in the set `chars` removed
(multi-character sets, an empty set removing nothing, a NULL set giving NULL, multi-byte
characters, regex metacharacters), one-off and as materialized views through inserts and
deletes; result columns are named `btrim`/`ltrim`/`rtrim` as PostgreSQL names them. A set of
characters was refused (0A000) and every trim column was named `trim`."""

from __future__ import annotations

from typing import Any

import pytest
from tests.sql.pgcompare import fixture_pair, same_error

import twofold

SCHEMA = "CREATE TABLE t (id integer, s text, c text, ch char(4))"
ROWS = [(1, "xxabcxx", "x", "ab"), (2, "", "ab", None), (3, None, None, "a"),
        (4, "abba", "ab", "ba"), (5, "  a  ", None, "x"), (6, "cab", "", ""),
        (7, "ééaéé", "é", "é"), (8, "a.b*a", ".*", "a"), (9, "\\a\\", "\\", "a"),
        (10, "xyx", "yx", "xy"), (11, "   ", " ", " "), (12, "\t a \t", " ", "a")]
EXPRS = [
    "ltrim(s, c)", "rtrim(s, c)", "btrim(s, c)",
    "trim(both 'ab' from s)", "trim(leading 'ax' from s)", "trim(trailing 'x' from s)",
    "trim(c from s)", "trim(leading c from s)", "trim(trailing c from s)",
    "btrim(s, NULL)", "ltrim(s, '')", "trim(both '' from s)", "btrim(ch, 'a')",
    "btrim(s, ch)", "length(rtrim(s, c))", "trim(s)", "ltrim(s)", "rtrim(s)",
]
SQL = f"SELECT id, {', '.join(f'{e} AS e{i}' for i, e in enumerate(EXPRS))} FROM t"


pg, db = fixture_pair("pgtc", SCHEMA)


def _rows(rows: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in rows)


def test_trim_sets_one_off_and_maintained(db: twofold.Database, pg: Any) -> None:
    db.sql(f"CREATE MATERIALIZED VIEW tc AS {SQL}")
    steps = [(ROWS[:6], []), (ROWS[6:], [2, 4]), ([(2, "bab", "b", "b")], [1, 12])]
    for inserts, deletes in steps:
        for row in inserts:
            pg.execute("INSERT INTO t VALUES (%s, %s, %s, %s)", row)
        db.table("t").insert(inserts)
        for i in deletes:
            pg.execute(f"DELETE FROM t WHERE id = {i}")
            db.sql(f"DELETE FROM t WHERE id = {i}")
        want = _rows(pg.execute(SQL).fetchall())
        assert _rows(db.sql(SQL).rows) == want
        assert _rows(db.sql("SELECT * FROM tc").rows) == want


def test_trim_columns_are_named_as_in_postgresql(db: twofold.Database, pg: Any) -> None:
    sql = ("SELECT trim(s), ltrim(s), btrim(s, c), trim(leading from s), "
           "trim(trailing 'x' from s), trim(both c from s) FROM t")
    names = [d.name for d in pg.execute(sql).description]
    assert db.sql(sql).columns == names == ["btrim", "ltrim", "btrim", "ltrim", "rtrim",
                                            "btrim"]


@pytest.mark.parametrize("sql", ["SELECT ltrim(id, 'a') FROM t", "SELECT btrim(s, 1) FROM t",
                                 "SELECT trim(both id from s) FROM t",
                                 # other arities (btrim's was XX000, ltrim's third dropped)
                                 "SELECT btrim(s, 'a', 'b') FROM t",
                                 "SELECT ltrim(s, 'a', 'b') FROM t", "SELECT rtrim() FROM t"])
def test_trim_of_non_text_is_an_unknown_function(db: twofold.Database, pg: Any,
                                                 sql: str) -> None:
    assert same_error(db, pg, sql) == "42883"
