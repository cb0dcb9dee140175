"""Indexes, materialized views, peeks at several times, subscribes, copy-tos, drops and the
typed errors of reads and writes, end to end on the embedded default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

import twofold
from twofold import col, count, sum

from .conftest import ORDERS


def revenue(orders: twofold.Table) -> twofold.Relation:
    return orders.group_by("customer").agg(sum("amount").alias("revenue"), count())


def test_index_lookup_by_key(shop: Any) -> None:
    db, orders, _ = shop
    idx = db.create_index("revenue", revenue(orders), key="customer")
    assert idx.lookup(10).rows == [(10, 9.5, 3)]
    assert sorted(idx.lookup(11, 12, 99).rows) == [(11, 3.5, 2), (12, 20.0, 1)]
    assert db.lookup(idx, 13).dicts() == [{"customer": 13, "revenue": 7.5, "count": 1}]
    two = db.create_index("by_pair", orders, key=["customer", "amount"])
    assert two.lookup((10, 7.5)).rows == [(2, 10, 7.5, None)]
    assert two.lookup((10, 5)).rows == [(1, 10, 5.0, "first")]  # int key, float column


def test_lookup_errors(shop: Any) -> None:
    db, orders, _ = shop
    idx = db.create_index("by_customer", orders, key="customer")
    with pytest.raises(twofold.TypeMismatch, match="lookup on column 'customer'"):
        idx.lookup("ten")
    with pytest.raises(twofold.InvalidArgument, match="1 values"):
        idx.lookup((10, 11))
    with pytest.raises(twofold.InvalidArgument):
        idx.lookup()
    with pytest.raises(twofold.ColumnNotFound, match="create_index"):
        db.create_index("bad", orders, key="nope")
    with pytest.raises(twofold.ObjectExists):
        db.create_index("by_customer", orders, key="id")


def test_reads_as_of_several_times(shop: Any) -> None:
    db, orders, _ = shop
    idx = db.create_index("revenue", revenue(orders), key="customer", retain_history=60)
    view = db.create_materialized_view("revenue_mv", revenue(orders))
    t0 = max(idx.collect().timestamp, view.collect().timestamp)
    t1 = orders.insert([(100, 10, 100.0, None)]).timestamp
    t2 = orders.delete([ORDERS[3]]).timestamp
    t3 = orders.update([(100, 10, 100.0, None)], [(100, 12, 1.0, None)]).timestamp
    expected = {
        t0: {10: 9.5, 11: 3.5, 12: 20.0},
        t1: {10: 109.5, 11: 3.5, 12: 20.0},
        t2: {10: 109.5, 11: 3.5},
        t3: {10: 9.5, 11: 3.5, 12: 1.0},
    }
    for t, want in expected.items():
        for source in (idx, view, revenue(orders)):
            got = db.query(source, as_of=t)
            assert got.timestamp == t
            assert {r[0]: r[1] for r in got.rows if r[0] in (10, 11, 12)} == want, (source, t)
        assert {r[0]: r[1] for r in idx.lookup(10, 11, 12, as_of=t).rows} == want
    assert orders.filter(col("id") == 100).collect(as_of=t1).rows == [(100, 10, 100.0, None)]
    assert orders.filter(col("id") == 100).collect(as_of=t1 - 1).rows == []


def test_read_before_since_is_a_typed_error(shop: Any) -> None:
    db, orders, _ = shop
    idx = db.create_index("by_customer", orders, key="customer")
    since = db.controller.since(idx.id).time
    with pytest.raises(twofold.ReadBeforeSince, match="index 'by_customer'") as e:
        idx.collect(as_of=since - 1)
    assert e.value.time == since - 1
    with pytest.raises(twofold.ReadBeforeSince):
        idx.lookup(10, as_of=since - 1)
    with pytest.raises(twofold.InvalidArgument):
        orders.collect(as_of=-1)


def test_materialized_view_reads_like_a_table(shop: Any) -> None:
    db, orders, customers = shop
    view = db.create_materialized_view("big", orders.filter(col("amount") > 5))
    assert sorted(r[0] for r in view.collect().rows) == [2, 4, 6]
    assert view.shard.startswith("mv/big/") and view.shard in db.core.storage.list_shards()
    orders.insert([(50, 15, 50.0, "new")])
    assert sorted(r[0] for r in view.collect().rows) == [2, 4, 6, 50]
    joined = view.join(customers, left_on="customer", right_on="id").select("id", "name")
    assert sorted(joined.collect().rows) == [(2, "ann"), (4, "cy"), (6, "di"), (50, "eve")]
    assert db.frontier(view).time is not None


def test_subscribe_delivers_snapshot_then_changes(shop: Any) -> None:
    db, orders, _ = shop
    idx = db.create_index("revenue", revenue(orders), key="customer")
    with db.subscribe(idx.filter(col("customer") == 11)) as sub:
        first = sub.next(timeout=20)
        assert [(r, d) for _, r, d in first.updates] == [((11, 3.5, 2), 1)]
        t = orders.insert([(200, 11, 1.5, None)]).timestamp
        changes: list[tuple[int, tuple[Any, ...], int]] = []
        upper = first.upper
        while not changes:
            batch = sub.next(timeout=20)
            assert batch.lower == upper  # contiguous
            upper = batch.upper
            changes.extend(batch.updates)
        assert sorted(changes) == [(t, (11, 3.5, 2), -1), (t, (11, 5.0, 3), 1)]
        assert batch.to_polars().columns == ["customer", "revenue", "count", "time", "diff"]


def test_subscribe_up_to_ends(shop: Any) -> None:
    db, orders, _ = shop
    start = orders.collect().timestamp
    sub = db.subscribe(orders.select("id"), as_of=start, up_to=start + 1)
    batches = list(sub)
    assert sum_rows(batches) == len(ORDERS)


def sum_rows(batches: list[twofold.Batch]) -> int:
    return len([u for b in batches for u in b.updates])


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_copy_to_files(shop: Any, tmp_path: Path, fmt: str) -> None:
    db, orders, _ = shop
    path = tmp_path / f"big.{fmt}"
    n = db.copy_to(orders.filter(col("amount") > 5).select("id", "note"), path)
    assert n == 3
    frame = pl.read_parquet(path) if fmt == "parquet" else pl.read_csv(path)
    assert sorted(frame["id"].to_list()) == [2, 4, 6]
    with pytest.raises(twofold.InvalidArgument, match="format"):
        db.copy_to(orders, tmp_path / "x.json")


def test_drop_index_and_view(shop: Any) -> None:
    db, orders, _ = shop
    view = db.create_materialized_view("rev_mv", revenue(orders))
    idx = db.create_index("rev_idx", view, key="customer")
    with pytest.raises(twofold.DependencyError, match="rev_idx"):
        db.drop(view)
    db.drop(idx)
    with pytest.raises(twofold.UnknownObject):
        idx.collect()
    with pytest.raises(twofold.UnknownObject):
        db.get("rev_idx")
    db.drop("rev_mv")
    with pytest.raises(twofold.UnknownObject):
        view.collect()
    # The name is free again.
    again = db.create_index("rev_idx", revenue(orders), key="customer")
    assert again.lookup(12).rows == [(12, 20.0, 1)]
    with pytest.raises(twofold.DependencyError, match="rev_idx"):  # tables drop like the rest
        db.drop("orders")


def test_write_errors_write_nothing(shop: Any) -> None:
    _db, orders, _ = shop
    before = orders.upper
    with pytest.raises(twofold.InvalidRows, match="orders"):
        orders.insert([(1, 2)])
    with pytest.raises(twofold.InvalidRows):
        orders.insert([(1, "x", 1.0, None)])
    with pytest.raises(twofold.InvalidRows, match="unknown columns"):
        orders.insert([{"id": 1, "nope": 2}])
    with pytest.raises(twofold.InvalidRows):
        orders.insert("not rows")  # type: ignore[arg-type]
    assert len(orders.collect()) == len(ORDERS)
    assert orders.upper >= before


def test_inserts_from_dicts_and_frames(db: twofold.Database) -> None:
    t = db.create_table("t", {"a": int, "b": float}, nullable=False)
    t.insert([{"a": 1, "b": 2}])
    t.insert(pl.DataFrame({"a": [2], "b": [3.5]}))
    assert sorted(t.collect().rows) == [(1, 2.0), (2, 3.5)]


def test_catalog(db: twofold.Database) -> None:
    t = db.create_table("t", {"a": int})
    assert db.table("t") is t and db.get("t") is t
    assert db.tables() == ["t"]
    with pytest.raises(twofold.ObjectExists):
        db.create_table("t", {"a": int})
    assert db.create_table("t", {"a": int}, exist_ok=True) is t
    with pytest.raises(twofold.ObjectExists):
        db.create_table("t", {"a": str}, exist_ok=True)
    with pytest.raises(twofold.UnknownObject, match="'u'"):
        db.table("u")
    with pytest.raises(twofold.InvalidArgument):
        db.create_table("a/b", {"a": int})


def test_closed_database_refuses_work(db: twofold.Database) -> None:
    t = db.create_table("t", {"a": int})
    db.close()
    with pytest.raises(twofold.DatabaseClosed):
        t.collect()
    with pytest.raises(twofold.DatabaseClosed):
        t.insert([(1,)])


def test_relations_of_different_databases_do_not_mix(db: twofold.Database) -> None:
    t = db.create_table("t", {"a": int})
    with twofold.open() as other:
        u = other.create_table("t", {"a": int})
        with pytest.raises(twofold.InvalidArgument, match="different databases"):
            t.union(u)
        with pytest.raises(twofold.InvalidArgument, match="another database"):
            other.query(t)


def test_sqlite_file_persists_tables(tmp_path: Path) -> None:
    path = tmp_path / "shop.db"
    with twofold.open(path, tick_interval=0.01) as db:
        t = db.create_table("t", {"a": int, "b": str})
        t.insert([(1, "x"), (2, "y")])
        idx = db.create_index("by_a", t, key="a")
        assert idx.lookup(2).rows == [(2, "y")]
    with twofold.open(path, tick_interval=0.01) as db:
        t = db.table("t")
        assert sorted(t.collect().rows) == [(1, "x"), (2, "y")]
        t.insert([(3, "z")])
        assert t.group_by().agg(count()).collect().rows == [(3,)]


def test_one_runtime_mode_answers_the_same(tmp_path: Path) -> None:
    with twofold.open(runtimes="one", tick_interval=0.01) as db:
        t = db.create_table("t", {"a": int})
        t.insert([(1,), (2,), (2,)])
        idx = db.create_index("i", t.group_by("a").agg(count()), key="a")
        assert sorted(idx.collect().rows) == [(1, 1), (2, 2)]
        assert db.replica.mode == "one"


def test_bad_options_are_refused() -> None:
    with pytest.raises(twofold.InvalidArgument, match="consistency"):
        twofold.open(consistency="eventual")  # type: ignore[arg-type]
    with pytest.raises(twofold.InvalidArgument, match="runtimes"):
        twofold.open(runtimes="three")  # type: ignore[arg-type]
    with pytest.raises(twofold.InvalidArgument, match="SQLite"):
        twofold.open(replicas=["127.0.0.1:1"])
    with pytest.raises(twofold.InvalidArgument, match="HOST:PORT"):
        twofold.open("x.db", replicas=["nohost"])


def test_map_filter_project_of_an_index_is_a_plain_peek(shop: Any) -> None:
    db, orders, _ = shop
    idx = db.create_index("by_customer", orders, key="customer")

    def no_dataflow(*args: object, **kwargs: object) -> None:
        raise AssertionError("a map/filter/project of an index needs no peek dataflow")

    queries = [
        lambda r: r.filter(col("amount") > 2),
        lambda r: r.filter(col("amount") > 2).select("note", "id"),
        lambda r: r.with_columns((col("amount") * 2).alias("double")).filter(col("double") > 10)
        .select("id", "double").filter(col("id") < 6),
        lambda r: r.select("id", col("note").str.to_uppercase().alias("n")).sort("id"),
    ]
    expected = [q(orders).collect().rows for q in queries]  # via peek dataflows over the table
    real = db.controller.peek_query
    db.controller.peek_query = no_dataflow
    try:
        for q, want in zip(queries, expected, strict=True):
            got = q(idx).collect()
            assert sorted(got.rows, key=repr) == sorted(want, key=repr)
        assert [r[0] for r in queries[3](idx).collect().rows] == sorted(r[0] for r in ORDERS)
    finally:
        db.controller.peek_query = real
    # A map above a filter is not fused (it would run on rows the filter drops): a dataflow.
    div = idx.filter(col("id") != 2).select((col("id") // (col("id") - 2)).alias("x"))
    assert len(div.collect()) == len(ORDERS) - 1
