"""Differential test: the incremental engine against DuckDB, at every time.

For random input histories and random well-typed plans (`plangen`), the collection the engine
maintains (`twofold.engine.testing.run_plan_at_times`) must equal, at every time `t`, DuckDB's
evaluation of the plan's SQL translation (`sqlgen`) over the inputs accumulated to `t`: the same
multiset of rows (floats to 12 significant digits), each value of its column's Python type, no
error. It runs once with the engine choosing its own steps and once with random step boundaries,
so steps spanning several times are exercised.

Skips only while `twofold.engine.testing` does not exist; any other import failure is an error.
`TWOFOLD_DIFF_EXAMPLES` raises the number of examples per test for deeper local runs.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from plangen import Scenario, scenarios
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

EXAMPLES = int(os.environ.get("TWOFOLD_DIFF_EXAMPLES", "100"))
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


# pyproject's 120 s per-test timeout fits the default example count; deep runs get more.
DEEP_TIMEOUT = pytest.mark.timeout(max(120, 2 * EXAMPLES))
DIFF_SETTINGS = settings(
    max_examples=EXAMPLES,
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


def check(s: Scenario, steps: list[int] | None) -> None:
    expected = _expected(s)
    types = plan_types(s.plan, s.env)
    got = engine_testing.run_plan_at_times(s.plan, s.inputs, s.times, steps=steps)
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
            pytest.fail(f"t={t}: expected (DuckDB) {missing}, engine has {extra}")


@DEEP_TIMEOUT
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


@DEEP_TIMEOUT
@DIFF_SETTINGS
@given(scenarios_with_steps())
def test_engine_matches_duckdb_with_multi_time_steps(case: tuple[Scenario, list[int]]) -> None:
    check(*case)
