"""-0.0 and 0.0 through the API: a table and its indexes read back the value stored, by bits,
after any history of writes; joins, grouping and filters still treat -0.0 = 0.0 (SQL)."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import twofold
from twofold import col, count
from twofold.testing.profiles import examples

_ODD_NAN = float(np.array([0x7FF8DEADBEEF0001], dtype=np.uint64).view(np.float64)[0])
FLOATS = [-0.0, 0.0, math.nan, _ODD_NAN, math.inf, -math.inf, 1.5, None]


def bits(v: Any) -> Any:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else struct.pack("<d", v)
    return v


def by_bits(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(bits(v) for v in r) for r in rows), key=repr)


def test_delete_then_insert_of_the_other_zero(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int, "x": float})
    by_k = db.create_index("by_k", t, key="k")
    by_x = db.create_index("by_x", t, key="x")
    t.insert([(0, -0.0)])
    t.delete([(0, -0.0)])
    t.insert([(0, 0.0)])
    for rows in (t.collect().rows, by_k.lookup(0).rows, by_x.lookup(0.0).rows,
                 by_x.lookup(-0.0).rows):
        assert by_bits(rows) == by_bits([(0, 0.0)])


@settings(max_examples=examples(15), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(FLOATS)), max_size=12))
def test_maintained_indexes_keep_float_bits(writes: list[tuple[int, float | None]]) -> None:
    # Primary key `id`: each write replaces or deletes one row, so the expected table is exact.
    with twofold.open("memory://", tick_interval=0.01, timeout=20) as db:
        t = db.create_table("t", {"id": int, "x": float}, primary_key="id", nullable=["x"])
        by_id = db.create_index("by_id", t, key="id")
        by_x = db.create_index("by_x", t, key="x")
        groups = db.create_index("groups", t.group_by("x").agg(count()), key="x")
        want: dict[int, float | None] = {}
        for i, x in writes:
            if i in want and want[i] is x:  # the same float object: delete it
                w = t.delete(keys=[i])
                del want[i]
            else:
                if i in want:
                    t.delete(keys=[i])
                w = t.insert([(i, x)])
                want[i] = x
            ts = w.timestamp
            expected = by_bits(list(want.items()))
            assert by_bits(t.collect(as_of=ts).rows) == expected
            assert by_bits(by_id.lookup(*want, as_of=ts).rows if want else []) == expected
            # NaN keys are left out: a point lookup of NaN finds nothing today (a separate
            # defect: PostgreSQL's NaN = NaN), so only non-NaN, non-NULL keys are probed.
            probe = {x for x in want.values() if x is not None and not math.isnan(x)}
            held = [r for r in want.items() if r[1] in probe]
            found = by_x.lookup(*probe, as_of=ts).rows if probe else []
            assert by_bits(found) == by_bits(held)
            # Groups by SQL equality: the two zeros are one group.
            sizes = sorted(n for _, n in groups.lookup(*probe, as_of=ts).rows) if probe else []
            classes: dict[Any, int] = {}
            for _, x in held:
                classes[x] = classes.get(x, 0) + 1  # -0.0 and 0.0 are one dict key
            assert sizes == sorted(classes.values())


def test_joins_groups_and_filters_match_both_zeros(db: twofold.Database) -> None:
    a = db.create_table("a", {"x": float, "tag": str})
    b = db.create_table("b", {"x": float, "name": str})
    a.insert([(-0.0, "neg"), (0.0, "pos")])
    b.insert([(0.0, "zero"), (-0.0, "negzero")])
    joined = a.join(b, on="x").collect().rows
    assert len(joined) == 4  # each zero matches each zero
    (grouped,) = a.group_by("x").agg(count()).collect().rows
    assert grouped[0] == 0.0 and grouped[1] == 2
    assert sorted(r[1] for r in a.filter(col("x") == 0.0).collect().rows) == ["neg", "pos"]
    assert sorted(r[1] for r in a.filter(col("x") == -0.0).collect().rows) == ["neg", "pos"]
    idx = db.create_index("a_by_x", a, key="x")
    assert sorted(r[1] for r in idx.lookup(0.0).rows) == ["neg", "pos"]
    assert sorted(r[1] for r in idx.lookup(-0.0).rows) == ["neg", "pos"]


def test_distinct_of_zeros_is_one_row_and_a_function_of_the_multiset(
    db: twofold.Database,
) -> None:
    t = db.create_table("t", {"x": float})
    view = t.distinct()
    idx = db.create_index("d", view, key="x")

    def signs(rows: list[tuple[Any, ...]]) -> list[float]:
        return sorted(math.copysign(1.0, r[0]) for r in rows)

    t.insert([(-0.0,)])
    assert signs(idx.lookup(0.0).rows) == signs(view.collect().rows) == [-1.0]  # only -0.0
    t.insert([(0.0,)])
    assert signs(idx.lookup(0.0).rows) == signs(view.collect().rows) == [1.0]  # one row, 0.0
    t.insert([(-0.0,)])
    assert signs(idx.lookup(0.0).rows) == signs(view.collect().rows) == [1.0]
