"""Differential test: the incremental engine against DuckDB, at every time.

For random input histories and random well-typed plans (`plangen`), the collection the engine
maintains (`twofold.engine.testing.run_plan_at_times`) must equal, at every time `t`, DuckDB's
evaluation of the plan's SQL translation (`sqlgen`) over the inputs accumulated to `t`: the same
multiset of rows (floats to 12 significant digits), each value of its column's Python type, no
error. It runs once with the engine choosing its own steps and once with random step boundaries,
so steps spanning several times are exercised.

Skips only while `twofold.engine.testing` does not exist; any other import failure is an error.
Example counts follow the hypothesis profile (`twofold.testing.profiles`): `CI=true` or
`TWOFOLD_HYPOTHESIS=deep` search deeper, and the per-test timeout scales with them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from plangen import Scenario, Update, scenarios
from reference import (
    EvalError,
    Multiset,
    accumulate,
    canonical,
    evaluate,
    plan_types,
    type_mismatches,
)
from sqlgen import DuckOracle

from twofold.protocol import (
    Aggregate,
    ColumnType,
    Distinct,
    Get,
    GlobalId,
    Join,
    Mfp,
    Negate,
    OrderKey,
    Reduce,
    RelationDesc,
    ScalarType,
    Threshold,
    TopK,
    UnionAll,
)
from twofold.testing.profiles import examples

ENGINE_TESTING = "twofold.engine.testing"


def _engine_testing() -> ModuleType:
    # Stricter than `pytest.importorskip`: a missing module skips, but an engine that exists and
    # fails to import (a broken internal import) is a failure, not a silent skip.
    try:
        return importlib.import_module(ENGINE_TESTING)
    except ModuleNotFoundError as e:
        if e.name in ("twofold.engine", ENGINE_TESTING):
            pytest.skip(
                f"{ENGINE_TESTING} does not exist yet (the engine has not landed)",
                allow_module_level=True,
            )
        raise


engine_testing = _engine_testing()


DIFF_SETTINGS = settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _expected(s: Scenario) -> dict[int, Multiset]:
    """DuckDB's answer at every time; examples whose evaluation errors are discarded (errors
    are tested elsewhere: the SQL oracle cannot produce them)."""
    inputs = {g: ([t.scalar for t in d.types], u) for g, (d, u) in s.inputs.items()}
    for t in s.times:
        try:
            evaluate(s.plan, {g: (ty, accumulate(u, t)) for g, (ty, u) in inputs.items()})
        except EvalError:
            assume(False)
    types = plan_types(s.plan, s.env)
    oracle = DuckOracle(s.plan, inputs)
    try:
        return {t: canonical(oracle.at(t), types) for t in s.times}
    finally:
        oracle.close()


Runner = Callable[..., dict[int, list[tuple[list[Any], int]] | str]]


def check(s: Scenario, steps: list[int] | None, run: Runner | None = None) -> None:
    """Assert the engine's answer (`run`, by default `run_plan_at_times`) equals DuckDB's."""
    expected = _expected(s)
    types = plan_types(s.plan, s.env)
    run = run or engine_testing.run_plan_at_times
    got = run(s.plan, s.inputs, s.times, steps=steps)
    assert sorted(got) == sorted(s.times), f"engine answered times {sorted(got)}"
    for t in s.times:
        answer = got[t]
        assert not isinstance(answer, str), f"t={t}: engine reported error {answer!r}"
        rows = [(list(r), c) for r, c in answer]
        assert all(c != 0 for _, c in rows), f"t={t}: zero counts in {rows}"
        distinct = {repr(r) for r, _ in rows}
        assert len(distinct) == len(rows), f"t={t}: not consolidated: {rows}"
        bad = type_mismatches(rows, types)
        assert not bad, f"t={t}: wrong value types: {bad[:3]}"
        actual = canonical(rows, types)
        if actual != expected[t]:
            missing = {r: m for r, m in expected[t].items() if actual.get(r) != m}
            extra = {r: m for r, m in actual.items() if expected[t].get(r) != m}
            raise AssertionError(f"t={t}: expected (DuckDB) {missing}, engine has {extra}")


@DIFF_SETTINGS
@given(scenarios())
def test_engine_matches_duckdb_at_every_time(s: Scenario) -> None:
    check(s, steps=None)


@st.composite
def scenarios_with_steps(draw: Any) -> tuple[Scenario, list[int]]:
    """A scenario and strictly increasing step boundaries (frontier uppers) ending past the
    last time, so one step may cover several times."""
    s = draw(scenarios())
    end = max(s.times) + 1
    inner = draw(st.lists(st.integers(1, end - 1), unique=True)) if end > 1 else []
    return s, sorted({*inner, end})


@DIFF_SETTINGS
@given(scenarios_with_steps())
def test_engine_matches_duckdb_with_multi_time_steps(case: tuple[Scenario, list[int]]) -> None:
    check(*case)


def _desc(*scalars: ScalarType) -> RelationDesc:
    return RelationDesc([f"c{i}" for i in range(len(scalars))], [ColumnType(s) for s in scalars])


U1, U2 = GlobalId.user(1), GlobalId.user(2)
# Ints, then an int/str pair; both histories retract everything by time 3.
_INTS: tuple[RelationDesc, list[Update]] = (
    _desc("int"),
    [([1], 0, 2), ([None], 0, 1), ([2], 1, 3), ([1], 2, -2), ([None], 3, -1), ([2], 3, -3)],
)
_PAIRS: tuple[RelationDesc, list[Update]] = (
    _desc("int", "str"),
    [
        ([1, "a"], 0, 1),
        ([None, "b"], 0, 2),
        ([2, None], 1, 1),
        ([1, "a"], 2, 1),
        ([1, "a"], 3, -2),
        ([None, "b"], 3, -2),
        ([2, None], 3, -1),
    ],
)
CORNERS: dict[str, Scenario] = {
    "global aggregate appears and vanishes": Scenario(
        {U1: _INTS},
        Reduce(Get(U1), [], [Aggregate("count"), Aggregate("sum", 0), Aggregate("max", 0)]),
        [0, 1, 2, 3, 4],
    ),
    "topk page over multiplicities": Scenario(
        {U1: _INTS}, TopK(Get(U1), [], [OrderKey(0, desc=True)], limit=2, offset=1), [0, 1, 2, 3]
    ),
    "except all": Scenario(
        {U1: _INTS, U2: (_desc("int"), [([2], 0, 5), ([1], 2, 1), ([2], 2, -5)])},
        Threshold(UnionAll([Get(U1), Negate(Get(U2))])),
        [0, 1, 2, 3],
    ),
    "zero-column rows": Scenario(
        {U1: _INTS}, Reduce(Mfp(Get(U1), project=[]), [], [Aggregate("count")]), [0, 1, 2, 3]
    ),
    "null keys never join": Scenario(
        {U1: _INTS, U2: _PAIRS}, Join(Get(U1), Get(U2), [0], [0]), [0, 1, 2, 3]
    ),
    "distinct and count(col) by group": Scenario(
        {U2: _PAIRS},
        Reduce(Distinct(Get(U2)), [1], [Aggregate("count", 0), Aggregate("min", 0)]),
        [0, 1, 2, 3],
    ),
}


@pytest.mark.parametrize("name", sorted(CORNERS))
@pytest.mark.parametrize("steps", [None, [2, 4]])
def test_engine_matches_duckdb_on_corner_cases(name: str, steps: list[int] | None) -> None:
    check(CORNERS[name], steps)


def _tampered(change: Callable[[list[tuple[list[Any], int]]], Any]) -> Runner:
    """The engine's runner with its largest answer altered by `change`."""

    def run(*args: Any, **kwargs: Any) -> dict[int, list[tuple[list[Any], int]] | str]:
        out: dict[int, list[tuple[list[Any], int]] | str]
        out = engine_testing.run_plan_at_times(*args, **kwargs)
        t = max(out, key=lambda t: len(out[t]))
        answer = out[t]
        assert not isinstance(answer, str) and len(answer) >= 2
        out[t] = change([(list(r), c) for r, c in answer])
        return out

    return run


@pytest.mark.parametrize(
    "change",
    [
        lambda rows: [(r, c + 1) for r, c in rows],  # a wrong count
        lambda rows: rows[1:],  # a missing row
        lambda rows: [*rows, rows[0]],  # not consolidated
        lambda rows: "division by zero",  # a spurious error
        lambda rows: [([float(v) if type(v) is int else v for v in r], c) for r, c in rows],
    ],
)
def test_check_rejects_wrong_answers(change: Callable[[Any], Any]) -> None:
    scenario = CORNERS["distinct and count(col) by group"]
    check(scenario, None)  # the real answer passes
    with pytest.raises(AssertionError):
        check(scenario, None, run=_tampered(change))
