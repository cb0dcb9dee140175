"""Peeks over snapshots: key lookups, MapFilterProject, RowSetFinishing, size limit, errors."""

from __future__ import annotations

import polars as pl
import pytest

from twofold.engine import (
    Arrangement,
    ArrangementSnapshot,
    EvalError,
    NotReadableError,
    PlanError,
    ResultTooLarge,
    peek,
)
from twofold.protocol import (
    Call,
    Column,
    ColumnType,
    Frontier,
    Literal,
    MapFilterProject,
    OrderKey,
    RelationDesc,
    RowSetFinishing,
)

DESC = RelationDesc(
    ["k", "name", "score"], [ColumnType("int"), ColumnType("str"), ColumnType("float")]
)
ROWS = [([1, "a", 0.5], 2), ([2, "b", None], 1), ([3, "c", 2.0], 1), ([None, "n", 1.0], 1)]


@pytest.fixture
def snap() -> ArrangementSnapshot:
    arr = Arrangement(DESC, [0])
    arr.insert([(r, 0, d) for r, d in ROWS], Frontier.at(1))
    arr.insert([([3, "c", 2.0], 1, -1)], Frontier.at(2))
    return arr.snapshot()


def test_full_read_and_time(snap: ArrangementSnapshot) -> None:
    assert len(peek(snap, 0)) == 4
    assert len(peek(snap, 1)) == 3
    with pytest.raises(NotReadableError):
        peek(snap, 2)


def test_literal_constraints_are_key_lookups(snap: ArrangementSnapshot) -> None:
    got = peek(snap, 0, literal_constraints=[[1], [3], [9], [None]])
    assert got == [([1, "a", 0.5], 2), ([3, "c", 2.0], 1)]


def test_mfp_then_finishing(snap: ArrangementSnapshot) -> None:
    mfp = MapFilterProject(
        map=[Call("concat", [Column(1), Literal("!")])],
        filter=[Call("ne", [Column(1), Literal("n")])],
        project=[3, 2],
    )
    finishing = RowSetFinishing(order_by=[OrderKey(1, desc=True, nulls_last=False)])
    got = peek(snap, 0, mfp=mfp, finishing=finishing)
    assert got == [(["b!", None], 1), (["c!", 2.0], 1), (["a!", 0.5], 2)]


def test_finishing_offset_limit_counts_multiplicity(snap: ArrangementSnapshot) -> None:
    f = RowSetFinishing(order_by=[OrderKey(0)], offset=1, limit=2, project=[1])
    assert peek(snap, 0, finishing=f) == [(["a"], 1), (["b"], 1)]
    f = RowSetFinishing(order_by=[OrderKey(0, nulls_last=False)], limit=1)
    assert peek(snap, 0, finishing=f) == [([None, "n", 1.0], 1)]


def test_result_size_limit(snap: ArrangementSnapshot) -> None:
    with pytest.raises(ResultTooLarge):
        peek(snap, 0, max_result_size=10)
    assert peek(snap, 0, max_result_size=10_000)


def test_mfp_errors_and_collection_errors_fail_the_peek(snap: ArrangementSnapshot) -> None:
    mfp = MapFilterProject(map=[Call("div", [Column(0), Literal(0)])])
    with pytest.raises(EvalError, match="division by zero"):
        peek(snap, 0, mfp=mfp)
    arr = Arrangement(DESC, [0])
    errs = pl.DataFrame({"error": ["boom"], "time": pl.Series([0], dtype=pl.UInt64), "diff": [1]})
    arr.insert([([1, "a", 0.5], 0, 1)], Frontier.at(1), errors=errs)
    with pytest.raises(EvalError, match="boom"):
        peek(arr.snapshot(), 0, literal_constraints=[[1]])


def test_ill_typed_mfp_is_a_plan_error(snap: ArrangementSnapshot) -> None:
    with pytest.raises(PlanError):
        peek(snap, 0, mfp=MapFilterProject(filter=[Column(1)]))
    with pytest.raises(PlanError):
        peek(snap, 0, finishing=RowSetFinishing(project=[5]))
