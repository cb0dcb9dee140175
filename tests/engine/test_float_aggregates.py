"""Float aggregates maintained under churn equal one-off evaluation, bit for bit.

Histories insert and retract rows whose values are adversarial floats (1e16 + 1 - 1e16, 0.1
sums, -0.0, NaN with payloads and signs, ±inf, subnormals, the largest doubles) and NULLs. For
`sum`, `min`, `max`, `count` and `sum(distinct)`, grouped and global, through the accumulating
reduce and the recomputing one, the collection the engine maintains at every time must be
exactly the one a fresh dataflow computes from the rows live at that time (every row with
multiplicity 1, floats compared by their bits), and equal to the reference semantics of
`docs/semantics.md`: the exact sum rounded once (`math.fsum`; beyond the double range the
overflow error), NaN/±inf rules, zeros always 0.0 (never -0.0), min/max in the order
-inf < ... < 0.0 < ... < inf < NaN.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from fractions import Fraction
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twofold.engine import Arrangement, accumulate
from twofold.engine.frames import DIFF, TIME
from twofold.engine.functions import OVERFLOW
from twofold.engine.testing import run_plan_at_times
from twofold.protocol import (
    Aggregate,
    ColumnType,
    Frontier,
    Get,
    GlobalId,
    Reduce,
    RelationDesc,
)
from twofold.testing.profiles import examples

A = GlobalId.user(1)
DESC = RelationDesc(["k", "x"], [ColumnType("int"), ColumnType("float")])
NAN_NEG = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000001))[0]
ADVERSARIAL = [
    1e16, 1.0, -1e16, 0.1, 0.2, 0.3, -0.0, 0.0, math.nan, NAN_NEG, math.inf, -math.inf,
    5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308,
    1e308, 2.5, -7.25, 123.456, None,
]  # fmt: skip
values = st.one_of(
    st.sampled_from(ADVERSARIAL), st.floats(allow_nan=True, allow_infinity=True, width=64)
)
Update = tuple[list[Any], int, int]


@st.composite
def histories(draw: st.DrawFn) -> list[Update]:
    live: list[list[Any]] = []
    out: list[Update] = []
    for t in range(draw(st.integers(1, 6))):
        for _ in range(draw(st.integers(0, 6))):
            if live and draw(st.integers(0, 2)) == 0:
                row = live.pop(draw(st.integers(0, len(live) - 1)))
                out.append((row, t, -1))
            else:
                row = [draw(st.integers(0, 2)), draw(values)]
                n = draw(st.sampled_from([1, 1, 1, 2]))
                live.extend([row] * n)
                out.append((row, t, n))
    return out


def bits(v: Any) -> Any:
    return ("f", struct.pack("<d", v)) if isinstance(v, float) else v


def canon(rows: list[tuple[list[Any], int]] | str) -> Any:
    if isinstance(rows, str):
        return rows
    return sorted(((tuple(bits(v) for v in r), n) for r, n in rows), key=repr)


def ref_sum(xs: list[float]) -> float | str | None:
    if not xs:
        return None
    if any(math.isnan(x) for x in xs) or (math.inf in xs and -math.inf in xs):
        return math.nan
    if math.inf in xs or -math.inf in xs:
        return math.inf if math.inf in xs else -math.inf
    exact = sum((Fraction(x) for x in xs), Fraction(0))
    if exact == 0:
        # -0.0 when every value is -0.0 (PostgreSQL's sum adds them in order), else 0.0
        return -0.0 if all(math.copysign(1, x) < 0 for x in xs) else 0.0
    limit = Fraction(2) ** 1024 - Fraction(2) ** 970  # rounds to 2^1024: overflow
    if abs(exact) >= limit:
        return OVERFLOW  # an evaluation error, as PostgreSQL's float8 sum
    return float(exact)


def order(x: float) -> tuple[int, float]:
    return (1, 0.0) if math.isnan(x) else (0, x)


def reference(rows: list[tuple[tuple[Any, ...], int]], grouped: bool, aggs: list[Aggregate]
              ) -> Any:
    groups: dict[Any, list[tuple[Any, ...]]] = {}
    for r, n in rows:
        groups.setdefault(r[0] if grouped else (), []).extend([r] * n)
    if not grouped:
        groups.setdefault((), [])  # one row over no rows: counts 0, the rest NULL
    out = []
    for g, members in groups.items():
        xs = [r[1] for r in members if r[1] is not None]
        vals: list[Any] = [g] if grouped else []
        for a in aggs:
            if a.func == "count":
                vals.append(len(members) if a.column is None else len(xs))
            elif a.func == "sum" and a.distinct:
                # Values comparing equal are one: -0.0 and 0.0, every NaN.
                distinct = {x + 0.0 for x in xs if not math.isnan(x)}
                nans = [math.nan] if any(math.isnan(x) for x in xs) else []
                if distinct == {0.0} and not nans and ref_sum(xs) == 0:
                    distinct = {ref_sum(xs)}  # only -0.0: -0.0
                vals.append(ref_sum([*distinct, *nans]))
            elif a.func == "sum":
                vals.append(ref_sum(xs))
            else:
                best = (max if a.func == "max" else min)(xs, key=order) if xs else None
                if best is not None and not math.isnan(best):
                    # a zero extreme is -0.0 when every zero of the group is, else 0.0
                    positive = any(x == 0 and math.copysign(1, x) > 0 for x in xs)
                    best = best + 0.0 if best != 0 or positive else -0.0
                vals.append(None if best is None else math.nan if math.isnan(best) else best)
        out.append((vals, 1))
    if any(v == OVERFLOW for vals, _ in out for v in vals):
        return OVERFLOW  # the output has an error at this time: reads fail with it
    return canon(out)


PLANS = {
    "accumulated": [Aggregate("count"), Aggregate("sum", 1), Aggregate("count", 1)],
    "recomputed": [Aggregate("sum", 1), Aggregate("min", 1), Aggregate("max", 1)],
    "distinct": [Aggregate("sum", 1, distinct=True), Aggregate("count")],
}


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    histories(),
    st.sampled_from(sorted(PLANS)),
    st.booleans(),
    st.lists(st.integers(1, 6), max_size=3),
)
def test_maintained_float_aggregates_equal_one_off(
    history: list[Update], plan_name: str, grouped: bool, steps: list[int]
) -> None:
    aggs = PLANS[plan_name]
    plan = Reduce(input=Get(A), group_key=[0] if grouped else [], aggregates=aggs)
    times = sorted({t for _, t, _ in history} | {0})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(accumulate, "_MIN_RECLAIM", 0)  # reclaim dead groups after every step
        maintained = run_plan_at_times(plan, {A: (DESC, history)}, times)
        stepped = run_plan_at_times(plan, {A: (DESC, history)}, times, steps=sorted(set(steps)))
    for t in times:
        # Rows by stored value (a float's bits: -0.0 is not 0.0), as tables hold them.
        live: Counter[tuple[Any, ...]] = Counter()
        held: dict[tuple[Any, ...], list[Any]] = {}
        for r, time, d in history:
            if time <= t:
                key = tuple(bits(v) for v in r)
                live[key] += d
                held[key] = list(r)
        live = +live
        # The one-off query: a fresh dataflow over the rows live at t, all at one time.
        rows = [(held[k], 0, n) for k, n in live.items()]
        one_off = run_plan_at_times(plan, {A: (DESC, rows)}, [0])[0]
        assert canon(maintained[t]) == canon(one_off), t
        assert canon(stepped[t]) == canon(one_off), t
        assert canon(one_off) == reference([(tuple(held[k]), n) for k, n in live.items()],
                                           grouped, aggs), t


@pytest.mark.parametrize(
    "aggs", [[Aggregate("count"), Aggregate("sum", 0)], [Aggregate("count"), Aggregate("max", 0)]]
)
@settings(max_examples=examples(20), deadline=None, suppress_health_check=list(HealthCheck))
@given(history=histories())
def test_float_group_keys_are_canonical(history: list[Update], aggs: list[Aggregate]) -> None:
    """Grouping by a float column: -0.0 and 0.0 are one group, every NaN one group, and the
    group's key is output as the canonical NaN, and as 0.0 while a member is 0.0, else -0.0
    (PostgreSQL's key of a group of only -0.0), whichever member arrived first."""
    plan = Reduce(input=Get(A), group_key=[1], aggregates=aggs)
    times = sorted({t for _, t, _ in history} | {0})
    got = run_plan_at_times(plan, {A: (DESC, history)}, times)
    for t in times:
        groups: dict[Any, list[int]] = {}
        positive_zeros = 0  # live rows whose key is 0.0
        for r, time, d in history:
            if time <= t:
                key = "nan" if r[1] is not None and math.isnan(r[1]) else r[1]
                groups.setdefault(key, []).extend([r[0]] * d if d > 0 else [])
                for _ in range(-d):
                    groups[key].remove(r[0])
                if r[1] == 0 and math.copysign(1.0, r[1]) > 0:
                    positive_zeros += d
        zero = 0.0 if positive_zeros else -0.0
        want = [
            (
                [
                    math.nan if g == "nan" else None if g is None else zero if g == 0 else g,
                    len(ks),
                    sum(ks) if aggs[1].func == "sum" else max(ks),
                ],
                1,
            )
            for g, ks in groups.items()
            if ks
        ]
        assert canon(got[t]) == canon(want), t


def test_lookup_cancels_rows_holding_nan() -> None:
    """A row with a NaN and its retraction cancel in a key lookup as in a full read (Python's
    NaN != NaN once kept both, a stale row in `index.lookup`)."""
    arr = Arrangement(DESC, [0])
    rows = [([1, float("nan")], 0, 1), ([1, 2.5], 0, 1), ([1, float("nan")], 1, -1)]
    for t in (0, 1):
        frame = pl.DataFrame(
            {
                "c0": [r[0] for r, time, _ in rows if time == t],
                "c1": [r[1] for r, time, _ in rows if time == t],
                TIME: pl.Series([t for _, time, _ in rows if time == t], dtype=pl.UInt64),
                DIFF: [d for _, time, d in rows if time == t],
            }
        )
        arr.insert(frame, Frontier.at(t + 1))
    snap = arr.snapshot()
    assert snap.read_rows(1) == [([1, 2.5], 1)]
    assert snap.lookup_rows([[1]], 1) == [([1, 2.5], 1)]
    assert canon(snap.lookup_rows([[1]], 0)) == canon([([1, 2.5], 1), ([1, math.nan], 1)])


def test_lookup_rows_order_nan_after_numbers_whatever_the_batches() -> None:
    """A key's rows holding NaN and numbers come out of `lookup_rows` in one order however the
    arrangement's batches hold them (NaN compares false both ways, so sorting by the bare
    values left the order to the batches': the pgwire fast path and the session's path, reading
    before and after a merge, then differed): NULLs last, NaN after the numbers."""
    values = [float("nan"), 0.5, None, -1.0, float("inf"), 2.5]
    got = []
    for order in (values, values[::-1], values[2:] + values[:2]):
        arr = Arrangement(DESC, [0])
        for t, v in enumerate(order):  # one batch per row, in this order
            frame = pl.DataFrame({"c0": [1], "c1": pl.Series([v], dtype=pl.Float64),
                                  TIME: pl.Series([t], dtype=pl.UInt64), DIFF: [1]})
            arr.insert(frame, Frontier.at(t + 1))
        rows = arr.snapshot().lookup_rows([[1]], len(order) - 1)
        got.append([repr(r[1]) for r, _ in rows])
    assert got[0] == ["-1.0", "0.5", "2.5", "inf", "nan", "None"]
    assert got[1] == got[0] and got[2] == got[0]
