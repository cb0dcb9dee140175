"""One-off statement latency paths: the parse cache, point queries at the index's time, and the
index's row path for a point query that reads every column in order.

The answers of these paths are checked against the filter path and DuckDB by
`test_index_lookup` and `test_differential` (floats, NULLs, duplicates); these tests pin what
the fast paths promise on top: a cached parse is a fresh tree, a point query still sees every
write that returned before it (read-your-writes) and matches the filter path at the time its
result carries.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator

import pytest

import twofold
from twofold.sql import compile_query, parse
from twofold.sql.lookup import find_lookup


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open("memory://oneoff", tick_interval=0.005, timeout=60) as database:
        database.sql("CREATE TABLE t (k bigint, j text, v double precision)")
        database.sql("CREATE INDEX t_k ON t (k)")
        yield database


def test_a_cached_parse_is_a_fresh_tree() -> None:
    text = "SELECT a, b FROM T WHERE k = $1"
    first = parse(text)
    first.set("where", None)  # a caller changing its tree changes no later parse
    again = parse(text)
    assert again is not first and again == parse(text)
    assert again.args.get("where") is not None and "WHERE" in again.sql()


@pytest.mark.parametrize(("query", "identity"), [
    ("SELECT * FROM t WHERE k = 1", True),
    ("SELECT k, j, v FROM t WHERE k = 1", True),
    ("SELECT v, k FROM t WHERE k = 1", False),
    ("SELECT * FROM t WHERE k = 1 AND v > 0", False),
])
def test_a_point_query_of_every_column_in_order_takes_the_row_path(
        db: twofold.Database, query: str, identity: bool) -> None:
    relation, _ = compile_query(db.core, parse(query))
    found = find_lookup(db.core, relation)
    assert found is not None
    assert found.mfp.is_identity is identity


def test_point_queries_see_every_write_before_them_and_match_the_filter_path(
        db: twofold.Database) -> None:
    rng = random.Random(7)
    t = db.table("t")
    for step in range(30):
        k = rng.randint(0, 3)
        row = (k, rng.choice(["x", None]), rng.choice([1.5, -0.0, None, float("nan")]))
        ts = t.insert([row, row] if rng.random() < 0.3 else [row]).timestamp
        got = db.sql("SELECT * FROM t WHERE k = $1", [k])
        assert got.timestamp >= ts, step  # read-your-writes holds on the index's time
        filtered = db.sql(f"SELECT * FROM t WHERE k + 0 = {k} AS OF {got.timestamp}")
        assert Counter(map(repr, got.rows)) == Counter(map(repr, filtered.rows)), step
        assert sum(r == row or repr(r) == repr(row) for r in got.rows) >= 1
