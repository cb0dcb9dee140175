"""DSL semantics a polars or Python user expects: `//` and `%` floor (the protocol's `div` and
`mod` keep truncating for SQL), and `sort` order survives later `select`/`filter`/
`with_columns`."""

from __future__ import annotations

import polars as pl

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
