"""The accumulating reduce (count, sum of ints) under churn equals a from-scratch model.

Histories insert and retract rows of many keys so groups are born, die (their count returns
to 0) and come back; dead group ids are reclaimed after every step here (the reclaim threshold
is patched to 0). Values include NULL and int64 extremes, so sums leave the 64-bit range
(an error while they are out) and come back. Keys are one Int64 column with NULLs (exact codes),
a string column and an (int, string) pair (hashed codes, also under forced code collisions), or
none (one global group).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine import accumulate
from twofold.engine.accumulate import AccumulateReduceOp
from twofold.engine.groups import GroupTable
from twofold.engine.render import render_plan
from twofold.engine.testing import run_plan_at_times
from twofold.protocol import Aggregate, ColumnType, Get, GlobalId, Reduce, RelationDesc
from twofold.testing.profiles import examples

A = GlobalId.user(1)
INT, STR = ColumnType("int"), ColumnType("str")
DESC = RelationDesc(["i", "s", "v"], [INT, STR, INT])
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
VALUES = [None, 0, 1, -7, 2**62, -(2**62), I64_MAX, I64_MIN, 1000]
AGGS = [Aggregate("count"), Aggregate("count", 2), Aggregate("sum", 2), Aggregate("sum", 0)]
KEYS = {"int": [0], "str": [1], "int_str": [0, 1], "none": []}

Update = tuple[list[Any], int, int]


def churn_history(seed: int, times: int = 6) -> list[Update]:
    rnd = random.Random(seed)
    live: list[list[Any]] = []
    out: list[Update] = []
    for t in range(times):
        for _ in range(rnd.randint(0, 25)):
            if live and rnd.random() < 0.45:
                row = live.pop(rnd.randrange(len(live)))
                out.append((row, t, -1))
            else:
                i = rnd.choice([None, *range(-4, 8)])
                row = [i, rnd.choice([None, "a", "b", "é", ""]), rnd.choice(VALUES)]
                live.append(row)
                out.append((row, t, 1))
    return out


def model(updates: list[Update], t: int, key: list[int]) -> list[tuple[list[Any], int]] | str:
    rows: Counter[tuple[Any, ...]] = Counter()
    for r, time, d in updates:
        if time <= t:
            rows[tuple(r)] += d
    groups: dict[tuple[Any, ...], list[tuple[tuple[Any, ...], int]]] = {}
    for row, m in rows.items():
        if m:
            groups.setdefault(tuple(row[k] for k in key), []).append((row, m))
    if not key and not groups:
        return [([0, 0, None, None], 1)]  # no group key: one row over no rows
    out = []
    for g, members in groups.items():
        n = sum(m for _, m in members)
        if n <= 0:
            continue
        aggs: list[Any] = [n]
        for col in (2, 2, 0):
            nonnull = [(r[col], m) for r, m in members if r[col] is not None]
            aggs.append(sum(m for _, m in nonnull))
        for col in (2, 0):
            nonnull = [(r[col], m) for r, m in members if r[col] is not None]
            total = sum(v * m for v, m in nonnull)
            if not I64_MIN <= total <= I64_MAX:
                return "bigint out of range"
            aggs.append(total if nonnull else None)
        # count(*), count(v), sum(v), sum(i): drop the helper counts.
        out.append(([*g, aggs[0], aggs[1], aggs[4], aggs[5]], 1))
    return sorted(out, key=repr)


@pytest.fixture(autouse=True)
def reclaim_every_step(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(accumulate, "_MIN_RECLAIM", 0)
    yield


def check(seed: int, name: str) -> None:
    key = KEYS[name]
    plan = Reduce(Get(A), key, AGGS)
    updates = churn_history(seed)
    times = list(range(7))
    got = run_plan_at_times(plan, {A: (DESC, updates)}, times)
    for t in times:
        result = got[t]
        assert (result if isinstance(result, str) else sorted(result, key=repr)) == model(
            updates, t, key
        ), (name, t)


def test_the_plan_renders_as_accumulation() -> None:
    op = render_plan(Reduce(Get(A), [0], AGGS), {A: DESC}, 0)
    assert isinstance(op, AccumulateReduceOp)


@pytest.mark.parametrize("name", sorted(KEYS))
@settings(max_examples=examples(12), deadline=None)
@given(seed=st.integers(0, 2**32))
def test_accumulated_reduce_under_churn_matches_model(name: str, seed: int) -> None:
    check(seed, name)


@settings(max_examples=examples(12), deadline=None)
@given(seed=st.integers(0, 2**32))
def test_accumulated_reduce_exact_under_code_collisions(seed: int) -> None:
    orig = GroupTable.key_codes

    def two_bits(self: GroupTable, keys: pl.DataFrame) -> np.ndarray:
        out: np.ndarray = orig(self, keys) & np.uint64(3)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(GroupTable, "key_codes", two_bits)
        check(seed, "int_str")
        check(seed, "str")


def test_dead_groups_are_reclaimed() -> None:
    updates: list[Update] = []
    for t in range(5):
        updates += [([i, "x", 1], t, 1) for i in range(t * 100, t * 100 + 100)]
        if t:
            updates += [([i, "x", 1], t, -1) for i in range((t - 1) * 100, t * 100)]
    plan = Reduce(Get(A), [0], AGGS)
    got = run_plan_at_times(plan, {A: (DESC, updates)}, [4])
    assert got[4] == [([i, 1, 1, 1, i], 1) for i in range(400, 500)]
    op = AccumulateReduceOp(render_plan(Get(A), {A: DESC}, 0), [0], AGGS, [INT] * 5)
    for t in range(5):
        frame = pl.DataFrame(
            [[*r, d] for r, time, d in updates if time == t],
            schema={"c0": pl.Int64, "c1": pl.String, "c2": pl.Int64, "diff": pl.Int64},
            orient="row",
        )
        op.step(t, {A: (frame, pl.DataFrame(schema={"error": pl.String, "diff": pl.Int64}))})
    # Each step kills the previous 100 groups; dead ids outnumber live ones (and are
    # reclaimed) after steps 2 and 4.
    assert op.live == 100 and len(op.table) == 100


@pytest.mark.parametrize(
    "aggs",
    [AGGS, [Aggregate("count"), Aggregate("max", 2)]],
    ids=["accumulated", "recomputed"],
)
def test_global_aggregate_has_one_row_at_every_time(aggs: list[Aggregate]) -> None:
    """No group key: the default row (counts 0, the rest NULL) while the input is empty —
    from the first time — retracted when rows arrive, back when they are all gone."""
    updates: list[Update] = [([1, "a", 5], 1, 1), ([2, "b", 7], 2, 1), ([1, "a", 5], 3, -1)]
    updates += [([2, "b", 7], 3, -1), ([3, "c", None], 4, 1)]
    got = run_plan_at_times(Reduce(Get(A), [], aggs), {A: (DESC, updates)}, list(range(5)))
    default = [0 if a.func == "count" else None for a in aggs]
    if aggs == AGGS:  # count(*), count(v), sum(v), sum(i)
        want = [default, [1, 1, 5, 1], [2, 2, 12, 3], default, [1, 0, None, 3]]
    else:  # count(*), max(v)
        want = [default, [1, 5], [2, 7], default, [1, None]]
    assert got == {t: [(row, 1)] for t, row in enumerate(want)}
