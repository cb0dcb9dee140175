"""Objects built over an index that has never held a row: an empty arrangement snapshot is
falsy (`len 0`), and the engine once read that as "no snapshot yet", so a materialized view or a
query over an empty index never got past its `as_of` and every read of it timed out."""

from __future__ import annotations

from pathlib import Path

import pytest

import twofold
from twofold import col


@pytest.mark.parametrize("runtimes", ["one", "two"])
def test_views_over_an_empty_index_answer_and_follow_writes(tmp_path: Path,
                                                            runtimes: str) -> None:
    db = twofold.open(tmp_path / "db.sqlite", runtimes=runtimes, tick_interval=0.01, timeout=10)
    try:
        t = db.create_table("t", {"x": int, "y": int})
        db.create_index("i", t.filter(col("x") > 2), key="x")
        view = db.create_materialized_view("v", db.get("i").filter(col("x") >= 1))
        over = db.create_index("j", db.get("i").select("y"), key="y")
        assert db.get("v").collect().rows == []
        assert over.collect().rows == []
        assert db.get("i").filter(col("x") >= 1).collect().rows == []   # a one-off query
        t.insert([(3, 1), (1, 0)])
        assert view.collect().rows == [(3, 1)]
        assert over.collect().rows == [(1,)]
    finally:
        db.close()
