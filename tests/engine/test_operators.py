"""Every operator, maintained incrementally, equals the from-scratch answer at every time.

Random valid histories go through `run_plan_at_times` (the real Dataflow API) with one step per
time and with all times in one step; each time's result must equal the naive evaluator's
(`reference.py`) on the collections at that time, and also a single-time dataflow (as_of = t,
until = t + 1) computing the plan from scratch.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tests.engine.histories import DESC_A, A, B, inputs_ab
from tests.engine.reference import naive_at

from twofold.engine import Dataflow
from twofold.engine.testing import run_plan_at_times
from twofold.engine.typecheck import typecheck_plan
from twofold.protocol import (
    Aggregate,
    BuildDesc,
    Call,
    Column,
    DataflowDescription,
    Distinct,
    Frontier,
    Get,
    GlobalId,
    IndexDesc,
    Join,
    Literal,
    Mfp,
    Negate,
    OrderKey,
    Plan,
    Reduce,
    SourceImport,
    Threshold,
    TopK,
    UnionAll,
)
from twofold.testing.profiles import examples

PLANS: dict[str, Plan] = {
    "mfp": Mfp(
        Get(A),
        map=[Call("add", [Column(0), Column(1)])],
        filter=[Call("gt", [Column(2), Literal(-2)])],
        project=[2, 0],
    ),
    "mfp_error": Mfp(Get(A), map=[Call("div", [Literal(6), Column(1)])]),
    "negate_union": UnionAll(
        [Get(A), Negate(Mfp(Get(A), filter=[Call("eq", [Column(0), Literal(1)])]))]
    ),
    "join": Join(Get(A), Get(B), [0], [0]),
    "join_chain": Join(Join(Get(A), Get(B), [0], [0]), Get(B), [3], [1]),
    "join_two_keys": Join(Get(A), Get(A), [0, 1], [1, 0]),
    "reduce": Reduce(
        Get(A),
        [0],
        [
            Aggregate("count"),
            Aggregate("count", 1),
            Aggregate("sum", 1),
            Aggregate("min", 1),
            Aggregate("max", 1),
        ],
    ),
    "reduce_distinct": Reduce(
        Get(A), [1], [Aggregate("count", 0, distinct=True), Aggregate("sum", 0, distinct=True)]
    ),
    "reduce_global": Reduce(Get(A), [], [Aggregate("count"), Aggregate("sum", 0)]),
    "reduce_keys_only": Reduce(Get(A), [], []),
    "reduce_min_only": Reduce(Get(A), [], [Aggregate("min", 1)]),
    "reduce_strings": Reduce(Get(B), [1], [Aggregate("min", 0), Aggregate("max", 0)]),
    "distinct": Distinct(Mfp(Get(A), project=[0])),
    "threshold": Threshold(
        UnionAll([Get(A), Negate(Mfp(Get(A), filter=[Call("gt", [Column(1), Literal(0)])]))])
    ),
    "topk": TopK(Get(A), [0], [OrderKey(1, desc=True, nulls_last=False)], limit=2, offset=1),
    "topk_global": TopK(Get(B), [], [OrderKey(1)], limit=3),
    "topk_no_limit": TopK(Get(A), [1], [OrderKey(0)], offset=1),
    "join_reduce": Reduce(Join(Get(A), Get(B), [0], [0]), [3], [Aggregate("sum", 1)]),
}

TIMES = [0, 1, 2, 3, 4]


def from_scratch(plan: Plan, inputs: dict[GlobalId, Any], t: int) -> list[Any] | str:
    """The plan computed in one step at `t` by a single-time dataflow."""
    out = GlobalId.transient(9)
    rel = typecheck_plan(plan, {g: d for g, (d, _) in inputs.items()})
    desc = DataflowDescription(
        "scratch",
        source_imports={g: SourceImport(str(g), d) for g, (d, _) in inputs.items()},
        objects_to_build=[BuildDesc(out, plan)],
        index_exports={out: (IndexDesc(out, []), rel)},
        as_of=Frontier.at(t),
        until=Frontier.at(t + 1),
    )
    df = Dataflow(desc)
    for g, (_, ups) in inputs.items():
        df.push(g, [u for u in ups if u[1] <= t])
        df.advance_source(g, Frontier.at(t + 1))
    assert df.step()
    rows = run_snapshot(df, out, t)
    return rows


def run_snapshot(df: Dataflow, out: GlobalId, t: int) -> list[Any] | str:
    from twofold.engine import EvalError

    try:
        return df.export(out).snapshot().read_rows(t)
    except EvalError as e:
        return e.message


@pytest.mark.parametrize("name", sorted(PLANS))
@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=inputs_ab())
def test_incremental_equals_from_scratch(name: str, inputs: dict[GlobalId, Any]) -> None:
    plan = PLANS[name]
    stepped = run_plan_at_times(plan, inputs, TIMES)
    one_step = run_plan_at_times(plan, inputs, TIMES, steps=[5])
    for t in TIMES:
        expected = naive_at(plan, inputs, t)
        assert stepped[t] == expected, (name, t)
        assert one_step[t] == expected, (name, t)
    t = TIMES[-1]
    assert from_scratch(plan, inputs, t) == naive_at(plan, inputs, t)


def test_errors_appear_and_retract() -> None:
    inputs = {A: (DESC_A, [([1, 0], 1, 1), ([1, 0], 3, -1), ([1, 2], 0, 1)])}
    res = run_plan_at_times(PLANS["mfp_error"], inputs, [0, 1, 2, 3])
    assert res[0] == [([1, 2, 3], 1)]
    assert res[1] == res[2] == "division by zero"
    assert res[3] == [([1, 2, 3], 1)]


def test_sum_overflow_is_an_error_that_retracts() -> None:
    big = 2**62
    inputs = {A: (DESC_A, [([1, big], 0, 1), ([2, big], 1, 1), ([2, big], 2, -1)])}
    plan = Reduce(Get(A), [], [Aggregate("sum", 1)])
    res = run_plan_at_times(plan, inputs, [0, 1, 2])
    assert res == {0: [([big], 1)], 1: "bigint out of range", 2: [([big], 1)]}


def test_sum_overflow_in_recomputing_reduce() -> None:
    big = 2**62
    inputs = {A: (DESC_A, [([1, big], 0, 1), ([1, big], 1, 1), ([1, big], 2, -1)])}
    # `min` forces the recompute-touched-keys path rather than accumulation.
    plan = Reduce(Get(A), [0], [Aggregate("sum", 1), Aggregate("min", 1)])
    res = run_plan_at_times(plan, inputs, [0, 1, 2])
    assert res == {0: [([1, big, big], 1)], 1: "bigint out of range", 2: [([1, big, big], 1)]}


def test_multi_time_step_processes_times_in_order() -> None:
    inputs = {A: (DESC_A, [([1, 1], 0, 1), ([1, 2], 1, 1), ([1, 1], 2, -1)])}
    plan = Reduce(Get(A), [0], [Aggregate("min", 1)])
    res = run_plan_at_times(plan, inputs, [0, 1, 2], steps=[3])
    assert res == {0: [([1, 1], 1)], 1: [([1, 1], 1)], 2: [([1, 2], 1)]}


def test_join_of_int_and_float_keys_compares_numerically() -> None:
    from twofold.protocol import ColumnType, RelationDesc

    fdesc = RelationDesc(["f"], [ColumnType("float")])
    idesc = RelationDesc(["i"], [ColumnType("int")])
    f, i = GlobalId.user(5), GlobalId.user(6)
    inputs = {f: (fdesc, [([1.0], 0, 1), ([1.5], 0, 1)]), i: (idesc, [([1], 0, 1)])}
    res = run_plan_at_times(Join(Get(f), Get(i), [0], [0]), inputs, [0])
    assert res[0] == [([1.0, 1], 1)]


def test_negative_zero_joins_and_groups_with_zero() -> None:
    from twofold.protocol import ColumnType, RelationDesc

    fdesc = RelationDesc(["f"], [ColumnType("float")])
    f, g = GlobalId.user(5), GlobalId.user(6)
    inputs = {f: (fdesc, [([0.0], 0, 1)]), g: (fdesc, [([-0.0], 0, 1)])}
    joined = run_plan_at_times(Join(Get(f), Get(g), [0], [0]), inputs, [0])[0]
    assert isinstance(joined, list) and len(joined) == 1
    grouped = run_plan_at_times(Distinct(UnionAll([Get(f), Get(g)])), inputs, [0])[0]
    assert isinstance(grouped, list) and len(grouped) == 1
