"""`db.sql`: what each statement kind returns, parameters, AS OF, SUBSCRIBE, EXPLAIN, SHOW,
objects shared with the DSL, many-way joins, and typed errors."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import polars as pl
import pytest

import twofold
from twofold.protocol import Join, plan_children
from twofold.sql import compile_query, parse, subscribe_rows
from twofold.sql.errors import (
    FeatureNotSupported,
    SqlSyntaxError,
    UndefinedColumn,
    UndefinedTable,
    sqlstate_of,
)


@pytest.fixture
def db() -> Iterator[twofold.Database]:
    # memory:// keeps both runtimes on threads: no maintenance process to start per test (the
    # default placement is tested in tests/replica/test_embedded.py).
    with twofold.open("memory://", tick_interval=0.005, timeout=30) as database:
        database.sql("CREATE TABLE t (k int PRIMARY KEY, v double precision, s text)")
        database.sql("INSERT INTO t VALUES (1, 2.5, 'a'), (2, NULL, 'b'), (3, -1.0, NULL)")
        yield database


def test_query_returns_the_dsl_result(db: twofold.Database) -> None:
    r = db.sql("SELECT k, v * 2 AS w, s FROM t WHERE k < $1 ORDER BY k DESC", [3])
    assert r.columns == ["k", "w", "s"]
    assert r.rows == [(2, None, "b"), (1, 5.0, "a")]
    assert [t.scalar for t in r.schema.types] == ["int", "float", "str"]
    assert r.to_polars().schema == pl.Schema({"k": pl.Int64, "w": pl.Float64, "s": pl.String})
    dsl = db.table("t").filter(twofold.col("k") < 3).collect()
    assert sorted(dsl.rows, key=repr) != [] and len(dsl.rows) == len(r.rows)


def test_dml_returns_counts_and_ddl_objects(db: twofold.Database) -> None:
    assert db.sql("INSERT INTO t (k, s) VALUES (4, 'd'), (5, 'e')") == 2
    assert db.sql("UPDATE t SET v = 0 WHERE v IS NULL") == 3
    assert db.sql("DELETE FROM t WHERE k > $1", [3]) == 2
    assert sorted(db.sql("SELECT k, v FROM t").rows) == [(1, 2.5), (2, 0.0), (3, -1.0)]
    view = db.sql("CREATE MATERIALIZED VIEW big AS SELECT k FROM t WHERE v > 0")
    assert isinstance(view, twofold.MaterializedView)
    assert db.get("big") is view  # visible to the DSL
    assert view.collect().rows == [(1,)]
    index = db.sql("CREATE INDEX t_by_s ON t (s)")
    assert isinstance(index, twofold.Index) and index.key == ["s"]
    assert index.lookup("b").rows == [(2, 0.0, "b")]
    assert isinstance(db.sql("CREATE DEFAULT INDEX ON big"), twofold.Index)


def test_dsl_objects_are_visible_to_sql(db: twofold.Database) -> None:
    t = db.table("t")
    db.create_materialized_view("pos", t.filter(twofold.col("v") > 0).select("k", "s"))
    db.create_index("by_k", t.select("k", "v"), key="k")
    assert db.sql("SELECT s FROM pos").rows == [("a",)]
    assert sorted(db.sql("SELECT k FROM by_k WHERE v IS NULL OR v < 0").rows) == [(2,), (3,)]
    assert db.sql("SELECT count(*) FROM pos JOIN by_k USING (k)").rows == [(1,)]


def test_plain_views_are_named_queries(db: twofold.Database) -> None:
    db.sql("CREATE VIEW named AS SELECT k, s FROM t WHERE s IS NOT NULL")
    db.sql("INSERT INTO t VALUES (9, 1.0, 'z')")
    assert sorted(db.sql("SELECT k FROM named").rows) == [(1,), (2,), (9,)]
    assert db.sql("SHOW VIEWS").rows == [("named",)]
    assert "SELECT k, s FROM t" in db.sql("SHOW CREATE VIEW named").rows[0][1]


def test_as_of_and_subscribe(db: twofold.Database) -> None:
    before = db.sql("SELECT count(*) FROM t").timestamp
    db.sql("INSERT INTO t VALUES (7, 7.0, 'g')")
    assert db.sql(f"SELECT count(*) FROM t AS OF {before}").rows == [(3,)]
    with db.sql("SUBSCRIBE (SELECT k FROM t WHERE k > 2)") as sub:
        first = sub.next(timeout=20)
        assert sorted(row for _, row, d in first.updates if d > 0) == [(3,), (7,)]
        assert sorted(r[1:] for r in subscribe_rows(first)) == [(1, 3), (1, 7)]
    with db.sql("SUBSCRIBE TO t WITH (SNAPSHOT = false)") as sub:
        db.sql("INSERT INTO t VALUES (8, 8.0, 'h')")
        seen: list[tuple[object, ...]] = []
        while not seen:
            seen = [row for _, row, d in sub.next(timeout=20).updates if d > 0]
        assert seen == [(8, 8.0, "h")]


def test_explain_and_show(db: twofold.Database) -> None:
    db.sql("CREATE TABLE u (k int, w text)")
    plan = [r[0] for r in db.sql("EXPLAIN SELECT t.s, u.w FROM t, u WHERE t.k = u.k "
                                 "AND u.w <> 'x' ORDER BY 1").rows]
    text = "\n".join(plan)
    assert "Join on left #0 = right #0" in text and "Get table 't'" in text
    assert "filter" in text and plan[0].startswith("Finish order by")
    assert db.sql("SHOW TABLES").rows == [("t",), ("u",)]
    assert db.sql("SHOW COLUMNS FROM t").rows == [
        ("k", "false", "bigint"), ("v", "true", "double precision"), ("s", "true", "text")]
    db.sql("SET application_name = 'me'")
    assert db.sql("SHOW application_name").rows == [("me",)]


def test_async_database() -> None:
    async def main() -> None:
        async with twofold.open_async(tick_interval=0.005) as db:
            await db.sql("CREATE TABLE a (x int)")
            assert await db.sql("INSERT INTO a VALUES (1), (2)") == 2
            assert (await db.sql("SELECT sum(x) FROM a")).rows == [(3,)]

    asyncio.run(main())


def _joins(plan: object) -> list[Join]:
    out = []
    stack = [plan]
    while stack:
        p = stack.pop()
        if isinstance(p, Join):
            out.append(p)
        stack.extend(plan_children(p))  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("n", [20, 64])
def test_many_way_comma_joins_use_keys_not_cross_products(db: twofold.Database, n: int) -> None:
    for i in range(n):
        db.sql(f"CREATE TABLE j{i} (a{i} int, b{i} int)")
        db.sql(f"INSERT INTO j{i} VALUES ({i}, {i + 1}), ({i}, {-i})")
    # A chain written out of order: every table joins its neighbour by equality.
    tables = ", ".join(f"j{i}" for i in reversed(range(n)))
    conds = " AND ".join(f"b{i} = a{i + 1}" for i in range(n - 1))
    sql = f"SELECT a0, b{n - 1} FROM {tables} WHERE {conds}"
    rel, _ = compile_query(db.core, parse(sql))
    joins = _joins(rel.plan)
    assert len(joins) == n - 1 and all(j.left_key for j in joins)
    assert sorted(db.sql(sql).rows) == sorted([(0, n), (0, -(n - 1))])


def test_syntax_error_names_line_column_and_shows_a_caret(db: twofold.Database) -> None:
    with pytest.raises(SqlSyntaxError) as info:
        db.sql("SELECT k\nFROM t\nWHERE k >")
    e = info.value
    assert sqlstate_of(e) == "42601" and e.line == 3
    assert "line 3" in str(e) and "WHERE k >" in str(e) and "^" in str(e)


@pytest.mark.parametrize(("sql", "cls", "state"), [
    ("SELECT * FROM nope", UndefinedTable, "42P01"),
    ("SELECT nope FROM t", UndefinedColumn, "42703"),
    ("SELECT k FROM t WHERE s", twofold.TwofoldError, "42804"),
    ("SELECT k + s FROM t", twofold.TwofoldError, "42883"),
    ("SELECT row_number() OVER () FROM t", FeatureNotSupported, "0A000"),
    ("SELECT k / 0 FROM t", twofold.TwofoldError, "22012"),
    ("SELECT 9223372036854775807 + k FROM t", twofold.TwofoldError, "22003"),
    ("INSERT INTO t VALUES (1, 0.0, 'dup')", twofold.TwofoldError, "23505"),
    ("SELECT k, count(*) FROM t", twofold.TwofoldError, "42803"),
])
def test_errors_carry_sqlstates(db: twofold.Database, sql: str, cls: type, state: str) -> None:
    with pytest.raises(cls) as info:
        db.sql(sql)
    assert sqlstate_of(info.value) == state, str(info.value)


def test_sql_and_dsl_build_the_same_plan(db: twofold.Database) -> None:
    from twofold import col, count, sum

    rel, _ = compile_query(db.core, parse(
        "SELECT s, count(*) AS n, sum(k) AS total FROM t WHERE v > 0 GROUP BY s"))
    dsl = db.table("t").filter(col("v") > 0).group_by("s").agg(count().alias("n"),
                                                               sum("k").alias("total"))
    assert rel.plan == dsl.plan
    assert rel.schema == dsl.schema


def test_unquoted_identifiers_fold_to_lower_case(db: twofold.Database) -> None:
    db.sql("CREATE TABLE Orders (Id int, Amt int)")
    db.sql("INSERT INTO ORDERS VALUES (1, 2)")
    assert db.tables() == ["orders", "t"]
    r = db.sql("SELECT ID, amt AS Total FROM orders")
    assert r.columns == ["id", "total"] and r.rows == [(1, 2)]
    db.create_table("Mixed", {"X": int})
    assert db.sql('SELECT "X" FROM "Mixed"').rows == []
    with pytest.raises(UndefinedTable):
        db.sql("SELECT X FROM Mixed")


def test_a_sign_after_an_exponent_starts_a_new_term() -> None:
    # sqlglot's tokenizer read `1e9+0.1` as one number (and `1e9+0.1*2` as (1e9+0.1)*2).
    from twofold.sql.parser import parse

    assert parse("SELECT 1e9+0.1*2, 2e-3-1, 1.e2+1, .5E1-1").sql() == (
        "SELECT 1e9 + 0.1 * 2, 2e-3 - 1, 1.e2 + 1, 0.5E1 - 1")
    with twofold.open(tick_interval=0.005) as db:
        assert db.sql("SELECT 1e9+0.1*2, 2e-3-1, .5E1-1").rows == [(1e9 + 0.2, 2e-3 - 1, 4.0)]
