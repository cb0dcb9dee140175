"""DSL semantics a polars or Python user expects: `//` and `%` floor (the protocol's `div` and
`mod` keep truncating for SQL), and `sort` order survives later `select`/`filter`/
`with_columns`."""

from __future__ import annotations

import polars as pl
import pytest

import twofold
from twofold import col

PAIRS = [(-7, 2), (7, -2), (-7, -2), (7, 2), (0, -3), (-1, 5), (-(2**63), 3), (2**63 - 1, -2)]


def test_floor_division_and_modulo_of_ints_are_pythons_and_polars(db: twofold.Database) -> None:
    t = db.create_table("t", {"a": int, "b": int}, nullable=False)
    t.insert(PAIRS)
    got = sorted(t.select("a", "b", (col("a") // col("b")).alias("q"),
                          (col("a") % col("b")).alias("r")).collect().rows)  # fmt: skip
    assert got == sorted((a, b, a // b, a % b) for a, b in PAIRS)
    frame = pl.DataFrame(PAIRS, schema={"a": pl.Int64, "b": pl.Int64}, orient="row")
    want = frame.select("a", "b", (pl.col("a") // pl.col("b")).alias("q"),
                        (pl.col("a") % pl.col("b")).alias("r"))  # fmt: skip
    assert got == sorted(want.rows())
    halves = t.filter(col("b") == 2).select((col("a") // 2).alias("q"), (col("a") % 2).alias("r"))
    assert sorted(halves.collect().rows) == [(-4, 1), (3, 1)]  # -7 and 7 by a literal 2
    assert (-7 // 2, -7 % 2) == (-4, 1)


def test_floor_division_and_modulo_of_floats_are_pythons(db: twofold.Database) -> None:
    t = db.create_table("t", {"a": float, "b": float}, nullable=False)
    pairs = [(-7.5, 2.0), (7.5, -2.0), (1.0, 0.1), (-0.5, 3.0), (5.0, 2.5)]
    t.insert(pairs)
    got = sorted(t.select("a", "b", (col("a") // col("b")).alias("q"),
                          (col("a") % col("b")).alias("r")).collect().rows)  # fmt: skip
    assert got == sorted((a, b, a // b, a % b) for a, b in pairs)


ROWS = [(3, "c", 1.5), (1, "a", -2.0), (2, "b", 0.0), (5, "e", 9.0), (4, "d", None)]


def test_sort_order_survives_select_filter_with_columns_like_polars(
    db: twofold.Database,
) -> None:
    t = db.create_table("t", {"id": int, "name": str, "x": float}, nullable=["x"])
    t.insert(ROWS)
    frame = pl.DataFrame(ROWS, schema={"id": pl.Int64, "name": pl.String, "x": pl.Float64},
                         orient="row")  # fmt: skip
    by_id = t.sort("id", descending=True)
    pf = frame.sort("id", descending=True)
    cases = [
        (by_id.select("name", "id"), pf.select("name", "id")),
        (by_id.filter(col("id") != 2), pf.filter(pl.col("id") != 2)),
        (by_id.with_columns((col("id") * 10).alias("y")),
         pf.with_columns((pl.col("id") * 10).alias("y"))),
        (by_id.with_columns((col("name") + "!").alias("name")),
         pf.with_columns((pl.col("name") + "!").alias("name"))),
        (by_id.rename({"name": "n"}).select("n", "id"),
         pf.rename({"name": "n"}).select("n", "id")),
        (by_id.filter(col("id") > 1).select("id", "x").limit(2),
         pf.filter(pl.col("id") > 1).select("id", "x").head(2)),
        (t.sort("x", nulls_last=True).select("x", (col("id") + 1).alias("j")),
         frame.sort("x", nulls_last=True).select("x", (pl.col("id") + 1).alias("j"))),
    ]  # fmt: skip
    for rel, want in cases:
        assert rel.collect().rows == want.rows()
    # Through an index: a map/filter/project of it is a peek, sorted the same way.
    idx = db.create_index("by_id", t, key="id")
    got = idx.sort("id").filter(col("x").is_not_null()).select("id", "x").collect().rows
    assert got == frame.sort("id").filter(pl.col("x").is_not_null()).select("id", "x").rows()


def test_an_operation_that_drops_a_sort_column_says_so(db: twofold.Database) -> None:
    t = db.create_table("t", {"id": int, "name": str}, nullable=False)
    by_id = t.sort("id")
    with pytest.raises(twofold.InvalidArgument, match=r"^select: .*sorted by 'id'"):
        by_id.select("name")
    with pytest.raises(twofold.InvalidArgument, match=r"^drop: .*sorted by 'id'"):
        by_id.drop("id")
    with pytest.raises(twofold.InvalidArgument, match=r"^with_columns: .*'id'.*replaces"):
        by_id.with_columns((col("id") + 1).alias("id"))
    assert by_id.select("name", "id").columns == ["name", "id"]  # kept: no error
    assert t.select("name").sort("name").columns == ["name"]  # sorting after is fine
