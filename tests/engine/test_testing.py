"""`run_plan_at_times`: the differential tests' entry point returns sorted, consolidated rows
per requested time (or the error message), with or without explicit step boundaries."""

from __future__ import annotations

from tests.engine.histories import DESC_A, A

from twofold.engine.testing import run_plan_at_times
from twofold.protocol import Call, Column, Get, Literal, Mfp


def test_rows_sorted_and_consolidated_per_time() -> None:
    inputs = {A: (DESC_A, [([2, 1], 0, 1), ([1, None], 0, 1), ([2, 1], 1, 1), ([1, None], 2, -1)])}
    got = run_plan_at_times(Get(A), inputs, [0, 1, 2])
    assert got == {
        0: [([1, None], 1), ([2, 1], 1)],
        1: [([1, None], 1), ([2, 1], 2)],
        2: [([2, 1], 2)],
    }
    assert run_plan_at_times(Get(A), inputs, [0, 1, 2], steps=[2, 3]) == got


def test_errors_are_reported_as_messages() -> None:
    inputs = {A: (DESC_A, [([1, 0], 1, 1)])}
    plan = Mfp(
        Get(A),
        map=[Call("mod", [Column(0), Column(1)])],
        filter=[Call("gt", [Column(2), Literal(5)])],
    )
    assert run_plan_at_times(plan, inputs, [0, 1]) == {0: [], 1: "division by zero"}
