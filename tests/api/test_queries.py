"""DSL queries through the public API on the embedded default, checked against DuckDB over the
same rows (an independent oracle for the results)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import pytest

import twofold
from twofold import coalesce, col, count, lit, mean, n_unique, sum, when

from .conftest import CUSTOMERS, ORDERS

Build = Callable[[twofold.Table, twofold.Table], twofold.Relation]

CASES: list[tuple[str, Build, str]] = [
    ("scan", lambda o, c: o, "SELECT * FROM orders"),
    ("filter", lambda o, c: o.filter(col("amount") > 2, col("note").is_not_null()),
     "SELECT * FROM orders WHERE amount > 2 AND note IS NOT NULL"),
    ("select-arith", lambda o, c: o.select("id", (col("amount") * 2 + 1).alias("x"),
                                          (col("id") / 4).alias("q"), (col("id") % 3).alias("m")),
     "SELECT id, amount * 2 + 1 AS x, id / 4 AS q, id % 3 AS m FROM orders"),
    ("strings", lambda o, c: o.filter(col("note").str.contains("ush"))
     .select("id", col("note").str.to_lowercase().alias("l"),
             col("note").str.len_chars().alias("n")),
     "SELECT id, lower(note) AS l, length(note) AS n FROM orders WHERE note LIKE '%ush%'"),
    ("case-coalesce", lambda o, c: o.select(
        "id", when(col("amount") >= 7.5).then(lit("big")).when(col("amount") > 0)
        .then(lit("small")).otherwise(lit("neg")).alias("size"),
        coalesce(col("note"), lit("-")).alias("note")),
     "SELECT id, CASE WHEN amount >= 7.5 THEN 'big' WHEN amount > 0 THEN 'small' ELSE 'neg' END"
     " AS size, coalesce(note, '-') AS note FROM orders"),
    ("cast", lambda o, c: o.select((col("amount").cast(int)).alias("a"),
                                   col("id").cast(str).alias("s")),
     "SELECT trunc(amount)::BIGINT AS a, id::VARCHAR AS s FROM orders"),
    ("is_in", lambda o, c: o.filter(col("customer").is_in([10, 12])).select("id"),
     "SELECT id FROM orders WHERE customer IN (10, 12)"),
    ("join-on", lambda o, c: o.join(c.rename({"id": "customer"}), on="customer")
     .select("id", "name", "amount"),
     "SELECT o.id, c.name, o.amount FROM orders o JOIN customers c ON o.customer = c.id"),
    ("join-left-right", lambda o, c: o.join(c, left_on="customer", right_on="id"),
     "SELECT o.*, c.* FROM orders o JOIN customers c ON o.customer = c.id"),
    ("group-by", lambda o, c: o.group_by("customer").agg(
        count(), sum("amount").alias("total"), twofold.min("amount").alias("lo"),
        twofold.max("note").alias("hi"), count("note").alias("notes")),
     "SELECT customer, count(*), sum(amount), min(amount), max(note), count(note) "
     "FROM orders GROUP BY customer"),
    ("group-by-expr", lambda o, c: o.group_by((col("amount") > 3).alias("big"))
     .agg(n_unique("customer").alias("n"), mean("amount").alias("avg")),
     "SELECT amount > 3 AS big, count(DISTINCT customer), avg(amount) FROM orders "
     "GROUP BY amount > 3"),
    ("global-agg", lambda o, c: o.agg(count(), sum("amount")),
     "SELECT count(*), sum(amount) FROM orders"),
    ("join-agg", lambda o, c: o.join(c, left_on="customer", right_on="id")
     .group_by("country").agg(sum("amount").alias("revenue")),
     "SELECT country, sum(amount) FROM orders o JOIN customers c ON o.customer = c.id "
     "GROUP BY country"),
    ("top-k", lambda o, c: o.top_k(3, "amount", descending=True),
     "SELECT * FROM orders ORDER BY amount DESC, id, customer LIMIT 3"),
    ("top-k-grouped", lambda o, c: o.top_k(1, "amount", group_by="customer").select(
        "customer", "amount"),
     "SELECT customer, amount FROM (SELECT *, row_number() OVER (PARTITION BY customer "
     "ORDER BY amount, id) AS r FROM orders) WHERE r = 1"),
    ("union", lambda o, c: o.select("customer").union(c.select("id")),
     "SELECT customer FROM orders UNION ALL SELECT id FROM customers"),
    ("distinct", lambda o, c: o.select("customer").distinct(),
     "SELECT DISTINCT customer FROM orders"),
    ("except", lambda o, c: c.select("id").except_all(o.select("customer")),
     "SELECT id FROM customers EXCEPT ALL SELECT customer FROM orders"),
]


def normalize(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    def key(r: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple((v is not None, str(type(v)), v) for v in r)

    out = [tuple(round(v, 9) if isinstance(v, float) else v for v in r) for r in rows]
    return sorted(out, key=key)


@pytest.fixture
def oracle() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE orders (id BIGINT, customer BIGINT, amount DOUBLE, note VARCHAR)")
    con.execute("CREATE TABLE customers (id BIGINT, name VARCHAR, country VARCHAR)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", ORDERS)
    con.executemany("INSERT INTO customers VALUES (?, ?, ?)", CUSTOMERS)
    return con


def test_dsl_queries_match_duckdb(shop: Any, oracle: duckdb.DuckDBPyConnection) -> None:
    _db, orders, customers = shop
    for name, build, sql in CASES:
        rel = build(orders, customers)
        got = rel.collect()
        want = oracle.execute(sql).fetchall()
        assert normalize(got.rows) == normalize(want), name
        assert got.columns == rel.columns


def test_queries_over_indexes_and_views_match_duckdb(
        shop: Any, oracle: duckdb.DuckDBPyConnection) -> None:
    db, orders, customers = shop
    revenue = orders.group_by("customer").agg(sum("amount").alias("revenue"))
    idx = db.create_index("revenue", revenue, key="customer")
    view = db.create_materialized_view("revenue_mv", revenue)
    sql = ("SELECT c.name, r.revenue FROM customers c JOIN (SELECT customer, sum(amount) AS "
           "revenue FROM orders GROUP BY customer) r ON r.customer = c.id")
    for source in (idx, view):
        rel = source.join(customers, left_on="customer", right_on="id").select("name", "revenue")
        assert normalize(rel.collect().rows) == normalize(oracle.execute(sql).fetchall())
    # After a change, every path answers the new state (read-your-writes).
    orders.update([ORDERS[0]], [(1, 10, 105.0, "first")])
    oracle.execute("UPDATE orders SET amount = 105.0 WHERE id = 1")
    want = normalize(oracle.execute(
        "SELECT customer, sum(amount) FROM orders GROUP BY customer").fetchall())
    assert normalize(idx.collect().rows) == want
    assert normalize(view.collect().rows) == want
    assert normalize(revenue.collect().rows) == want


def test_results_as_dicts_and_polars(shop: Any) -> None:
    _db, orders, _ = shop
    res = orders.filter(col("id") == 2).collect()
    assert res.dicts() == [{"id": 2, "customer": 10, "amount": 7.5, "note": None}]
    frame = orders.collect().to_polars()
    assert frame.columns == ["id", "customer", "amount", "note"]
    assert frame.height == len(ORDERS)
    assert str(frame.schema["note"]) == "String"


def test_evaluation_errors_are_query_failed(shop: Any) -> None:
    _db, orders, _ = shop
    with pytest.raises(twofold.QueryFailed, match="division by zero"):
        orders.select((col("id") // 0).alias("x")).collect()


ORDERED: list[tuple[str, Build, str]] = [
    ("sort", lambda o, c: o.sort("amount", descending=True),
     "SELECT * FROM orders ORDER BY amount DESC, id, customer, note NULLS LAST"),
    ("sort-nulls", lambda o, c: o.sort(["note", "id"]),
     "SELECT * FROM orders ORDER BY note NULLS LAST, id"),
    ("sort-limit", lambda o, c: o.filter(col("amount") > 0).sort("customer").limit(3, offset=1),
     "SELECT * FROM orders WHERE amount > 0 ORDER BY customer, id LIMIT 3 OFFSET 1"),
    ("agg-sort", lambda o, c: o.group_by("customer").agg(sum("amount").alias("total"))
     .sort("total", descending=True).limit(2),
     "SELECT customer, sum(amount) AS total FROM orders GROUP BY customer "
     "ORDER BY total DESC, customer LIMIT 2"),
]


def test_ordered_reads_match_duckdb_in_order(shop: Any,
                                             oracle: duckdb.DuckDBPyConnection) -> None:
    _db, orders, customers = shop
    for name, build, sql in ORDERED:
        got = build(orders, customers).collect().rows
        assert got == oracle.execute(sql).fetchall(), name


def test_an_index_reads_in_sort_order(shop: Any) -> None:
    db, orders, _ = shop
    idx = db.create_index("by_id", orders, key="id")
    assert [r[0] for r in idx.sort("id", descending=True).collect().rows] == list(range(8, 0, -1))
    # filter/select/with_columns keep the order (as polars does); a join or aggregate makes
    # a new, unordered collection.
    assert idx.sort("id").filter(col("id") > 0).order == idx.sort("id").order
    assert idx.sort("id").group_by("customer").agg(count()).order == []
