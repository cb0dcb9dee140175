"""The DuckDB translation (`sqlgen`) agrees with the pure-Python reference (`reference`).

Two independent readings of docs/semantics.md: hand-written corner cases pin both to the
document, and a property test checks them against each other on random plans and histories at
every time, so the DuckDB oracle is trusted before the engine is compared to it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from plangen import Scenario, input_sets, plans, scenarios
from reference import EvalError, PlanTypeError, accumulate, canonical, evaluate, plan_types
from sqlgen import DuckOracle

from twofold.protocol import (
    Aggregate,
    Call,
    Column,
    Constant,
    Distinct,
    Expr,
    Get,
    GlobalId,
    Join,
    Literal,
    Mfp,
    Negate,
    OrderKey,
    Plan,
    Reduce,
    Threshold,
    TopK,
    UnionAll,
)
from twofold.testing.profiles import examples

U1, U2 = GlobalId.user(1), GlobalId.user(2)


def both(plan: Plan, inputs: dict[GlobalId, tuple[list[str], list[Any]]], time: int = 0) -> Any:
    """Evaluate with both oracles, assert they agree, return the reference's multiset."""
    types = plan_types(plan, {g: t for g, (t, _) in inputs.items()})
    ref = evaluate(plan, {g: (t, accumulate(u, time)) for g, (t, u) in inputs.items()})
    oracle = DuckOracle(plan, inputs)
    try:
        duck = oracle.at(time)
    finally:
        oracle.close()
    assert canonical(duck, types) == canonical(ref.items(), types), oracle.sql
    return ref


def one_col(typ: str, values: list[Any]) -> dict[GlobalId, tuple[list[str], list[Any]]]:
    return {U1: ([typ], [([v], 0, 1) for v in values])}


def scalar(expr: Expr, typ: str, value: Any) -> Any:
    """`expr` evaluated on the one-row input `[value]` by both oracles."""
    got = both(Mfp(Get(U1), map=[expr], project=[1]), one_col(typ, [value]))
    ((row, count),) = got.items()
    assert count == 1
    return row[0]


def call(func: str, *args: Expr) -> Call:
    return Call(func, list(args))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expr", "typ", "value", "expected"),
    [
        (call("div", Column(0), Literal(2)), "int", -7, -3),
        (call("div", Column(0), Literal(-2)), "int", 7, -3),
        (call("mod", Column(0), Literal(2)), "int", -7, -1),
        (call("mod", Column(0), Literal(-2)), "int", 7, 1),
        (call("mod", Column(0), Literal(2.0)), "float", -7.5, -1.5),
        (call("div", Column(0), Literal(2.0)), "int", 7, 3.5),
        (call("cast_int", Column(0)), "float", -2.75, -2),
        (call("cast_int", Column(0)), "float", 2.5, 2),
        (call("cast_int", Column(0)), "str", " +12 ", 12),
        (call("cast_int", Column(0)), "bool", True, 1),
        (call("cast_float", Column(0)), "str", "3e2", 300.0),
        (call("cast_str", Column(0)), "bool", False, "false"),
        (call("cast_str", Column(0)), "int", -5, "-5"),
        (call("concat", Column(0), Literal("x")), "str", None, None),
        (call("like", Column(0), Literal("a_c%")), "str", "abcd", True),
        (call("like", Column(0), Literal("a_c")), "str", "abcd", False),
        (call("like", Column(0), Literal("A%")), "str", "abc", False),
        (call("like", Column(0), Literal("a\\%")), "str", "a\\bc", True),
        (call("length", Column(0)), "str", "héé", 3),
        (call("and", Column(0), Literal(False)), "bool", None, False),
        (call("or", Column(0), Literal(True)), "bool", None, True),
        (call("and", Column(0), Literal(True)), "bool", None, None),
        (call("if", Column(0), Literal(1), Literal(2.5)), "bool", None, 2.5),
        (call("coalesce", Column(0), Literal(2.5)), "int", 3, 3.0),
        (call("lt", Column(0), Literal("a")), "str", "B", True),
        (call("lt", Column(0), Literal(1.5)), "int", 1, True),
        (call("is_null", Column(0)), "int", None, True),
        (call("neg", Column(0)), "int", None, None),
    ],
)
def test_scalar_functions_follow_the_semantics(
    expr: Expr, typ: str, value: Any, expected: Any
) -> None:
    got = scalar(expr, typ, value)
    assert got == expected
    assert type(got) is type(expected)


def test_evaluation_errors_are_reported_by_the_reference() -> None:
    plan = Mfp(Get(U1), map=[call("div", Column(0), Literal(0))])
    with pytest.raises(EvalError, match="division by zero"):
        evaluate(plan, {U1: (["int"], {(1,): 1})})
    plan = Mfp(Get(U1), map=[call("cast_int", Column(0))])
    with pytest.raises(EvalError, match="invalid input for int"):
        evaluate(plan, {U1: (["str"], {("1.5",): 1})})
    plan = Mfp(Get(U1), map=[call("mul", Column(0), Literal(2**62))])
    with pytest.raises(EvalError, match="bigint out of range"):
        evaluate(plan, {U1: (["int"], {(4,): 1})})


def test_ill_typed_plans_are_refused() -> None:
    with pytest.raises(PlanTypeError):
        plan_types(Mfp(Get(U1), map=[call("add", Column(0), Literal("a"))]), {U1: ["int"]})
    with pytest.raises(PlanTypeError):
        plan_types(UnionAll([Get(U1), Get(U2)]), {U1: ["int"], U2: ["str"]})
    with pytest.raises(PlanTypeError):
        plan_types(Constant([([None], 1)]), {})


def test_reduce_with_empty_key_gives_one_row_on_empty_input() -> None:
    plan = Reduce(Get(U1), [], [Aggregate("count"), Aggregate("sum", 0)])
    assert both(plan, one_col("int", [])) == {(0, None): 1}
    assert both(Reduce(Get(U1), [], []), one_col("int", [])) == {(): 1}
    assert both(plan, one_col("int", [None, None])) == {(2, None): 1}


def test_reduce_counts_with_multiplicity_and_distinct_ignores_it() -> None:
    inputs = {U1: (["str", "int"], [(["a", 1], 0, 2), (["a", None], 0, 1), ([None, 1], 0, 1)])}
    aggs = [
        Aggregate("count"),
        Aggregate("count", 1),
        Aggregate("count", 1, distinct=True),
        Aggregate("sum", 1),
        Aggregate("sum", 1, distinct=True),
        Aggregate("min", 1),
    ]
    got = both(Reduce(Get(U1), [0], aggs), inputs)
    assert got == {("a", 3, 2, 1, 2, 1, 1): 1, (None, 1, 1, 1, 1, 1, 1): 1}


def test_topk_ranks_multiplicities_and_breaks_ties_by_all_columns() -> None:
    inputs = {U1: (["int", "str"], [([1, "b"], 0, 2), ([1, "a"], 0, 1), ([None, "c"], 0, 3)])}
    # Order by column 0 descending, NULLs first: c c c, then (1, a) before (1, b) (tie-break).
    plan = TopK(Get(U1), [], [OrderKey(0, desc=True, nulls_last=False)], limit=2, offset=2)
    assert both(plan, inputs) == {(None, "c"): 1, (1, "a"): 1}
    grouped = TopK(Get(U1), [0], [OrderKey(1, desc=True)], limit=1)
    assert both(grouped, inputs) == {(1, "b"): 1, (None, "c"): 1}


def test_join_never_matches_null_keys_and_multiplies() -> None:
    inputs = {
        U1: (["int"], [([1], 0, 2), ([None], 0, 1)]),
        U2: (["int", "str"], [([1, "x"], 0, 3), ([None, "y"], 0, 1)]),
    }
    assert both(Join(Get(U1), Get(U2), [0], [0]), inputs) == {(1, 1, "x"): 6}


def test_threshold_of_difference_is_except_all_and_distinct_dedupes() -> None:
    inputs = {
        U1: (["int"], [([1], 0, 3), ([2], 0, 1), ([None], 0, 2)]),
        U2: (["int"], [([1], 0, 1), ([2], 0, 2), ([None], 0, 1)]),
    }
    diff = Threshold(UnionAll([Get(U1), Negate(Get(U2))]))
    assert both(diff, inputs) == {(1,): 2, (None,): 1}
    assert both(Distinct(Get(U1)), inputs) == {(1,): 1, (2,): 1, (None,): 1}


def test_constants_and_zero_column_relations() -> None:
    const = Constant([([1, "a"], 2), ([None, "b"], 1)])
    assert both(const, {}) == {(1, "a"): 2, (None, "b"): 1}
    # Projecting every column away leaves one empty row per input row (with multiplicity).
    assert both(Mfp(const, project=[]), {}) == {(): 3}
    assert both(Reduce(Mfp(const, project=[]), [], []), {}) == {(): 1}


def test_inputs_accumulate_to_the_read_time() -> None:
    desc = {U1: (["int"], [([1], 0, 1), ([1], 2, -1), ([2], 1, 2)])}
    assert both(Get(U1), desc, time=0) == {(1,): 1}
    assert both(Get(U1), desc, time=1) == {(1,): 1, (2,): 2}
    assert both(Get(U1), desc, time=2) == {(2,): 2}


def _env_inputs(s: Scenario) -> dict[GlobalId, tuple[list[str], list[Any]]]:
    return {g: ([t.scalar for t in d.types], u) for g, (d, u) in s.inputs.items()}


@settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_duckdb_translation_matches_the_reference(s: Scenario) -> None:
    inputs = _env_inputs(s)
    types = plan_types(s.plan, s.env)
    expected = {}
    for t in s.times:
        try:
            expected[t] = evaluate(
                s.plan, {g: (ty, accumulate(u, t)) for g, (ty, u) in inputs.items()}
            )
        except EvalError:
            assume(False)
    oracle = DuckOracle(s.plan, inputs)
    try:
        for t in s.times:
            got = canonical(oracle.at(t), types)
            assert got == canonical(expected[t].items(), types), (t, oracle.sql)
    finally:
        oracle.close()


@settings(max_examples=examples(50), deadline=None)
@given(input_sets())
def test_generated_histories_are_never_negative(inputs: Any) -> None:
    for desc, updates in inputs.values():
        times = sorted({t for _, t, _ in updates})
        for t in times:
            assert all(m > 0 for m in accumulate(updates, t).values())
        for row, _, d in updates:
            assert d != 0
            assert len(row) == desc.arity
            for v, ct in zip(row, desc.types, strict=True):
                assert v is not None or ct.nullable


@settings(max_examples=examples(100), deadline=None)
@given(st.data())
def test_generated_plans_are_well_typed(data: st.DataObject) -> None:
    env = {U1: ["int", "str"], U2: ["float", "bool", "int"]}
    plan = data.draw(plans(env))
    plan_types(plan, env)  # raises PlanTypeError if not
