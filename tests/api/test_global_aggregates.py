"""A global aggregate (no group keys) has one row at every time, also over no rows: count 0,
sum/min/max/mean NULL — in one-off queries and in maintained indexes and materialized views,
where the default row appears when the input becomes empty and is retracted when it is not."""

from __future__ import annotations

from typing import Any

import twofold
from twofold import col, count, max, mean, min, sum


def test_global_aggregate_over_no_rows_is_one_row(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "v": float}, nullable=False)
    rel = t.agg(count(), sum("v"), min("v").alias("lo"), max("v").alias("hi"),
                mean("v").alias("avg"))  # fmt: skip
    assert rel.collect().rows == [(0, None, None, None, None)]
    assert [ty.nullable for ty in rel.schema.types] == [False, True, True, True, True]
    assert t.filter(col("k") > 100).agg(count()).collect().rows == [(0,)]
    assert t.group_by("k").agg(count()).collect().rows == []  # with keys: no groups, no rows


def test_maintained_global_aggregate_follows_emptiness(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "v": float}, nullable=False)
    rel = t.agg(count(), sum("v"), max("v").alias("hi"))
    idx = db.create_index("totals", rel, key="count", retain_history=60)
    view = db.create_materialized_view("totals_view", rel)
    empty: tuple[Any, ...] = (0, None, None)
    times: list[tuple[Any, list[tuple[Any, ...]]]] = [(t.insert([(1, 2.5)]), [(1, 2.5, 2.5)])]
    times.append((t.insert([(2, 0.5)]), [(2, 3.0, 2.5)]))
    times.append((t.delete([(1, 2.5), (2, 0.5)]), [empty]))
    times.append((t.insert([(3, -1.0)]), [(1, -1.0, -1.0)]))
    for w, want in times:
        ts = w if isinstance(w, int) else w.timestamp
        assert rel.collect(as_of=ts).rows == want, ts
        assert idx.collect(as_of=ts).rows == want, ts
        assert view.collect(as_of=ts).rows == want, ts
    assert idx.lookup(0).rows == []


def test_index_created_over_an_empty_table_starts_with_the_default_row(
    db: twofold.Database,
) -> None:
    t = db.create_table("t", {"k": int}, nullable=False)
    idx = db.create_index("n", t.agg(count()), key="count")
    assert idx.collect().rows == [(0,)]
    assert idx.lookup(0).rows == [(0,)]
