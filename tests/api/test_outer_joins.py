"""The DSL's outer, semi and anti joins and INTERSECT ALL, against DuckDB over random tables
with NULL keys and duplicate rows — read once, and maintained as an index through random
writes."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import duckdb
import pytest

import twofold
from twofold.testing.helpers import churn


def _rows(rng: random.Random, n: int) -> list[tuple[Any, ...]]:
    rows = [(rng.choice([None, 0, 1, 2, 3]), rng.choice(["a", "b", None])) for _ in range(n)]
    return rows + rows[: n // 3]


def _duck(left: list[tuple[Any, ...]], right: list[tuple[Any, ...]], sql: str) -> Counter[Any]:
    con = duckdb.connect()
    con.execute("CREATE TABLE l (k INTEGER, v TEXT)")
    con.execute("CREATE TABLE r (k INTEGER, w TEXT)")
    if left:
        con.executemany("INSERT INTO l VALUES (?, ?)", left)
    if right:
        con.executemany("INSERT INTO r VALUES (?, ?)", right)
    return Counter(tuple(r) for r in con.execute(sql).fetchall())


CASES = {
    "inner": "SELECT l.k, v, r.k, w FROM l JOIN r ON l.k = r.k",
    "left": "SELECT l.k, v, r.k, w FROM l LEFT JOIN r ON l.k = r.k",
    "right": "SELECT l.k, v, r.k, w FROM l RIGHT JOIN r ON l.k = r.k",
    "full": "SELECT l.k, v, r.k, w FROM l FULL JOIN r ON l.k = r.k",
    "semi": "SELECT * FROM l SEMI JOIN r ON l.k = r.k",
    "anti": "SELECT * FROM l ANTI JOIN r ON l.k = r.k",
}


@pytest.mark.parametrize("how", list(CASES))
def test_join_how_against_duckdb(how: str) -> None:
    with twofold.open(tick_interval=0.01) as db:
        lt = db.create_table("l", {"k": int, "v": str})
        rt = db.create_table("r", {"k": int, "w": str})
        rel = lt.join(rt, left_on="k", right_on="k", how=how)
        index = db.create_index("j", rel, key=rel.columns[0])
        rng = random.Random(how)
        left: list[tuple[Any, ...]] = []
        right: list[tuple[Any, ...]] = []
        for _ in range(4):
            for table, rows in ((lt, left), (rt, right)):
                churn(table, rows, rng, _rows(rng, rng.randint(0, 5)))
            expected = _duck(left, right, CASES[how])
            assert Counter(rel.collect().rows) == expected
            assert Counter(index.collect().rows) == expected


def test_on_keys_of_right_and_full_joins_are_the_present_side() -> None:
    with twofold.open(tick_interval=0.01) as db:
        lt = db.create_table("l", {"k": int, "v": str})
        rt = db.create_table("r", {"k": int, "w": str})
        lt.insert([(1, "a"), (2, "b")])
        rt.insert([(2, "x"), (3, "y")])
        full = lt.join(rt, on="k", how="full")
        assert full.columns == ["k", "v", "w"]
        assert sorted(full.collect().rows, key=repr) == sorted(
            [(1, "a", None), (2, "b", "x"), (3, None, "y")], key=repr)
        assert sorted(lt.join(rt, on="k", how="right").collect().rows, key=repr) == sorted(
            [(2, "b", "x"), (3, None, "y")], key=repr)
        assert full.schema.types[1].nullable and lt.join(rt, on="k", how="left").schema.types[
            2].nullable
        with pytest.raises(twofold.InvalidArgument, match="how='outer'"):
            lt.join(rt, on="k", how="outer")


def test_intersect_all_against_duckdb() -> None:
    with twofold.open(tick_interval=0.01) as db:
        a = db.create_table("a", {"x": int})
        b = db.create_table("b", {"x": int})
        rng = random.Random(7)
        ra = [(rng.choice([None, 1, 2, 3]),) for _ in range(12)]
        rb = [(rng.choice([None, 1, 2, 4]),) for _ in range(9)]
        a.insert(ra)
        b.insert(rb)
        con = duckdb.connect()
        con.execute("CREATE TABLE a (x INTEGER)")
        con.execute("CREATE TABLE b (x INTEGER)")
        con.executemany("INSERT INTO a VALUES (?)", ra)
        con.executemany("INSERT INTO b VALUES (?)", rb)
        for sql, rel in (("SELECT x FROM a INTERSECT ALL SELECT x FROM b", a.intersect_all(b)),
                         ("SELECT x FROM a INTERSECT SELECT x FROM b",
                          a.intersect_all(b).distinct())):
            assert Counter(rel.collect().rows) == Counter(
                tuple(r) for r in con.execute(sql).fetchall())
