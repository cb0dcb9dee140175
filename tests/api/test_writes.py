"""Table writes that cannot corrupt a table: checked deletes and updates with counts, primary
keys, upserts, key and predicate writes, in every input form, through the sync API."""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

import twofold
from twofold import col, count, sum


def contents(t: twofold.Table) -> Counter[tuple[Any, ...]]:
    return Counter(t.collect().rows)


# -- issue 12: deleting what is not there ------------------------------------------------------


def test_deleting_an_absent_row_changes_nothing(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "v": int})
    t.insert([(1, 10), (2, 20)])
    assert t.delete([(1, 10)]).count == 1
    assert t.delete([(1, 10)]).count == 0
    assert contents(t) == Counter({(2, 20): 1})
    assert t.agg(count(), sum("v")).collect().rows == [(1, 20)]
    t.insert([(1, 10)])
    assert contents(t) == Counter({(1, 10): 1, (2, 20): 1})


def test_delete_removes_at_most_what_is_held(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "v": int})
    t.insert([(1, 10), (1, 10), (2, 20)])
    # Three copies asked for, two held: two go. The absent row changes nothing.
    assert t.delete([(1, 10), (1, 10), (1, 10), (9, 9)]).count == 2
    assert contents(t) == Counter({(2, 20): 1})


def test_update_replaces_only_rows_that_exist(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "v": int})
    t.insert([(1, 10), (2, 20)])
    written = t.update([(3, 30), (1, 10)], [(3, 31), (1, 11)])
    assert written.count == 1
    assert contents(t) == Counter({(1, 11): 1, (2, 20): 1})
    assert t.update([(1, 10)], [(1, 12)]).count == 0
    assert contents(t) == Counter({(1, 11): 1, (2, 20): 1})
    with pytest.raises(twofold.InvalidArgument, match="2 old rows but 1 new"):
        t.update([(1, 11), (2, 20)], [(1, 1)])


def test_writes_report_their_timestamp(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int})
    w1 = t.insert([(1,), (2,)])
    w2 = t.delete([(1,)])
    assert w1.count == 2 and w2.timestamp > w1.timestamp
    assert t.collect(as_of=w1.timestamp).rows == [(1,), (2,)] or sorted(
        t.collect(as_of=w1.timestamp).rows) == [(1,), (2,)]
    assert t.collect(as_of=w2.timestamp).rows == [(2,)]


def test_every_input_form(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "s": str})
    t.insert([(1, "a"), {"k": 2, "s": "b"}])
    t.insert(pl.DataFrame({"k": [3], "s": ["c"]}))
    t.insert(pa.table({"k": [4], "s": ["d"]}))
    assert t.delete(pl.DataFrame({"k": [1, 5], "s": ["a", "e"]})).count == 1
    assert t.delete(pa.table({"s": ["b"], "k": [2]})).count == 1
    assert t.delete([{"k": 3, "s": "c"}]).count == 1
    assert t.update(pa.table({"k": [4], "s": ["d"]}), pl.DataFrame({"k": [4], "s": ["D"]})
                    ).count == 1
    assert contents(t) == Counter({(4, "D"): 1})


def test_nulls_and_floats_match_exactly(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "f": float, "s": str})
    t.insert([(1, 0.1, None), (2, float("nan"), "x"), (3, -0.0, None)])
    assert t.delete([(1, 0.1, None)]).count == 1
    assert t.delete([(1, 0.1, None)]).count == 0
    assert t.delete([(2, float("nan"), "x")]).count == 1
    # A table without a primary key names rows by stored value (docs/semantics.md): 0.0 is
    # not the stored -0.0, so nothing goes; -0.0 is.
    assert t.delete([(3, 0.0, None)]).count == 0
    assert t.delete([(3, -0.0, None)]).count == 1
    assert contents(t) == Counter()


def test_bad_rows_write_nothing(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "v": int}, nullable=False)
    t.insert([(1, 1)])
    with pytest.raises(twofold.InvalidRows, match="'v'"):
        t.delete([(1, "x")])
    with pytest.raises(twofold.InvalidRows, match="'v'"):
        t.update([(1, 1)], [(1, None)])
    assert contents(t) == Counter({(1, 1): 1})


# -- primary keys ------------------------------------------------------------------------------


def test_primary_key_refuses_a_second_row_per_key(db: twofold.Database) -> None:
    t = db.create_table("users", {"id": int, "name": str}, primary_key="id")
    assert t.primary_key == ("id",)
    assert t.insert([(1, "ann"), (2, "bob")]).count == 2
    with pytest.raises(twofold.UniqueViolation, match=r"'users'.*\(id\) = \(1\) already exists"):
        t.insert([(3, "cy"), (1, "ann again")])
    with pytest.raises(twofold.UniqueViolation, match=r"\(id\) = \(4\) appears more than once"):
        t.insert([(4, "di"), (4, "dee")])
    assert contents(t) == Counter({(1, "ann"): 1, (2, "bob"): 1})  # nothing was written
    # Key columns are NOT NULL, whatever `nullable` says.
    assert t.schema.as_dict() == {"id": "int", "name": "str?"}
    with pytest.raises(twofold.InvalidRows, match="'id'"):
        t.insert([(None, "x")])


def test_composite_primary_key(db: twofold.Database) -> None:
    t = db.create_table("stock", {"shop": str, "item": int, "qty": int},
                        primary_key=["shop", "item"])
    t.insert([("a", 1, 5), ("a", 2, 6), ("b", 1, 7)])
    with pytest.raises(twofold.UniqueViolation, match=r"\(shop, item\) = \('a', 2\)"):
        t.insert([("a", 2, 0)])
    assert t.delete(keys=[("a", 1), ("c", 9)]).count == 1
    w = t.upsert([("b", 1, 70), ("c", 1, 1)])
    assert (w.count, w.inserted, w.replaced) == (2, 1, 1)
    assert contents(t) == Counter({("a", 2, 6): 1, ("b", 1, 70): 1, ("c", 1, 1): 1})


def test_upsert_replaces_by_key_and_counts(db: twofold.Database) -> None:
    t = db.create_table("users", {"id": int, "name": str}, primary_key="id")
    t.insert([(1, "ann")])
    w = t.upsert([(1, "anne"), (2, "bob")])
    assert (w.count, w.inserted, w.replaced) == (2, 1, 1)
    assert contents(t) == Counter({(1, "anne"): 1, (2, "bob"): 1})
    with pytest.raises(twofold.UniqueViolation, match=r"\(id\) = \(3\) appears more than once"):
        t.upsert([(3, "x"), (3, "y")])
    plain = db.create_table("plain", {"id": int})
    with pytest.raises(twofold.InvalidArgument, match="no primary key"):
        plain.upsert([(1,)])
    with pytest.raises(twofold.InvalidArgument, match="no primary key"):
        plain.delete(keys=[1])


def test_keyed_delete_and_update(db: twofold.Database) -> None:
    t = db.create_table("users", {"id": int, "name": str}, primary_key="id")
    t.insert([(1, "ann"), (2, "bob"), (3, "cy")])
    assert t.delete(keys=[1, 1, 9]).count == 1
    assert t.delete(keys=pl.DataFrame({"id": [2]})).count == 1
    # A full-row delete matches the stored row, not just its key.
    assert t.delete([(3, "someone else")]).count == 0
    assert t.update([(3, "cy")], [(3, "cyd")]).count == 1
    t.insert([(4, "di")])
    with pytest.raises(twofold.UniqueViolation, match=r"\(id\) = \(4\) already exists"):
        t.update([(3, "cyd")], [(4, "cyd")])
    # Moving a key into one another vacates in the same write is fine.
    assert t.update([(3, "cyd"), (4, "di")], [(4, "cyd"), (5, "di")]).count == 2
    assert contents(t) == Counter({(4, "cyd"): 1, (5, "di"): 1})
    with pytest.raises(twofold.InvalidRows, match="'id'"):
        t.delete(keys=["x"])


# -- predicate writes --------------------------------------------------------------------------


def test_delete_where(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "v": int})
    t.insert([(1, 1), (2, 5), (2, 5), (3, None)])
    assert t.delete(where=col("v") > 3).count == 2
    assert t.delete(where=col("v") > 3).count == 0
    assert contents(t) == Counter({(1, 1): 1, (3, None): 1})  # NULL > 3 is not true
    assert t.delete(where=col("v").is_null()).count == 1
    with pytest.raises(twofold.TypeMismatch, match="'v'"):
        t.delete(where=col("v") + 1)
    with pytest.raises(twofold.TypeMismatch, match="'v'"):
        t.delete(where=col("v") == "x")
    with pytest.raises(twofold.ColumnNotFound, match="'nope'"):
        t.delete(where=col("nope") > 1)
    with pytest.raises(twofold.InvalidArgument, match="exactly one"):
        t.delete([(1, 1)], where=col("v") > 0)
    assert contents(t) == Counter({(1, 1): 1})


def test_update_set_where(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "v": int, "f": float, "s": str}, nullable=["s"])
    t.insert([(1, 1, 0.5, "a"), (2, 5, 1.0, None), (2, 5, 1.0, None)])
    w = t.update(set={"v": col("v") + 1, "f": 2}, where=col("k") == 2)
    assert w.count == 2
    assert contents(t) == Counter({(1, 1, 0.5, "a"): 1, (2, 6, 2.0, None): 2})
    assert t.update(set={"s": "z"}).count == 3  # no where: every row
    with pytest.raises(twofold.TypeMismatch, match="'v'"):
        t.update(set={"v": "x"})
    with pytest.raises(twofold.TypeMismatch, match="'v'"):
        t.update(set={"v": col("f")})
    with pytest.raises(twofold.ColumnNotFound, match="'nope'"):
        t.update(set={"nope": 1})
    with pytest.raises(twofold.InvalidRows, match="'v' is not nullable"):
        t.update(set={"v": None})
    with pytest.raises(twofold.QueryFailed, match="division by zero"):
        t.update(set={"v": col("v") // 0})
    assert contents(t) == Counter({(1, 1, 0.5, "z"): 1, (2, 6, 2.0, "z"): 2})


def test_update_set_respects_the_primary_key(db: twofold.Database) -> None:
    t = db.create_table("t", {"id": int, "v": int}, primary_key="id")
    t.insert([(1, 10), (2, 20), (3, 30)])
    with pytest.raises(twofold.UniqueViolation, match=r"\(id\) = \(2\)"):
        t.update(set={"id": col("id") + 1}, where=col("id") == 1)
    # Shifting every key at once leaves them unique.
    assert t.update(set={"id": col("id") + 10}).count == 3
    assert contents(t) == Counter({(11, 10): 1, (12, 20): 1, (13, 30): 1})


async def test_checked_writes_from_an_async_database() -> None:
    async with twofold.open_async(tick_interval=0.01, timeout=20) as db:
        t = db.create_table("t", {"id": int, "v": int}, primary_key="id")
        assert t.insert([(1, 1), (2, 2), (3, 3)]).count == 3
        assert t.delete(where=col("v") > 2).count == 1
        assert t.upsert([(1, 10)]).replaced == 1
        assert t.update(set={"v": col("v") + 1}, where=col("id") == 2).count == 1
        assert t.delete(keys=[9]).count == 0
        with pytest.raises(twofold.UniqueViolation):
            t.insert([(2, 0)])
        assert sorted((await t.collect_async()).rows) == [(1, 10), (2, 3)]
