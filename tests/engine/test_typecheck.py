"""Plan type checking: well-typed plans get their output desc; ill-typed ones a `PlanError`
naming the node and the column, before anything runs."""

from __future__ import annotations

import pytest

from twofold.engine import Dataflow, PlanError, typecheck_dataflow, typecheck_expr, typecheck_plan
from twofold.protocol import (
    Aggregate,
    BuildDesc,
    Call,
    Column,
    ColumnType,
    Constant,
    DataflowDescription,
    Get,
    GlobalId,
    IndexDesc,
    Join,
    Literal,
    Mfp,
    OrderKey,
    Plan,
    Reduce,
    RelationDesc,
    SourceImport,
    TopK,
    UnionAll,
)

INT, F, S, B = (ColumnType(s) for s in ("int", "float", "str", "bool"))
X = GlobalId.user(1)
DESC = RelationDesc(["k", "s", "f"], [ColumnType("int", False), S, F])
INPUTS = {X: DESC}


def test_output_types() -> None:
    plan = Reduce(
        Mfp(Get(X), map=[Call("add", [Column(0), Column(2)])]),
        [1],
        [Aggregate("count"), Aggregate("sum", 0), Aggregate("sum", 3), Aggregate("max", 1)],
    )
    out = typecheck_plan(plan, INPUTS)
    assert [t.scalar for t in out.types] == ["str", "int", "int", "float", "str"]
    assert out.types[1] == ColumnType("int", False)
    join = typecheck_plan(Join(Get(X), Get(X), [0], [0]), INPUTS)
    assert join.arity == 6
    assert typecheck_expr(Call("is_null", [Column(1)]), DESC.types) == ColumnType("bool", False)
    assert typecheck_expr(Call("coalesce", [Literal(None), Column(0)]), DESC.types).scalar == "int"
    assert typecheck_expr(Call("div", [Column(0), Literal(2)]), DESC.types).scalar == "int"
    assert (
        typecheck_expr(Call("if", [Literal(True), Column(0), Column(2)]), DESC.types).scalar
        == "float"
    )


@pytest.mark.parametrize(
    ("plan", "fragment"),
    [
        (Get(GlobalId.user(9)), "unknown collection u9"),
        (Mfp(Get(X), map=[Column(5)]), "Mfp.map[0]: column 5 does not exist"),
        (Mfp(Get(X), map=[Call("add", [Column(0), Column(1)])]), "argument 1 is str"),
        (Mfp(Get(X), filter=[Column(0)]), "filter[0]: predicate is int"),
        (Mfp(Get(X), project=[3]), "project column 3"),
        (Mfp(Get(X), map=[Call("eq", [Column(0), Column(1)])]), "need one type"),
        (Mfp(Get(X), map=[Call("concat", [Column(0), Column(1)])]), "argument 0 is int"),
        (Mfp(Get(X), map=[Call("cast_int", [Literal(b"x")])]), "argument 0 is bytes"),
        (Join(Get(X), Get(X), [1], [0]), "join keys"),
        (Join(Get(X), Get(X), [7], [0]), "left_key column 7"),
        (Reduce(Get(X), [0], [Aggregate("sum", 1)]), "sum of column 1 (s)"),
        (Reduce(Get(X), [4], []), "group_key column 4"),
        (TopK(Get(X), [], [OrderKey(8)]), "order_by column 8"),
        (UnionAll([Get(X), Mfp(Get(X), project=[0])]), "input 1 has 1 columns"),
        (UnionAll([Get(X), Mfp(Get(X), project=[1, 1, 2])]), "column 0 is int in input 0"),
        (Constant([([1], 1), (["a"], 1)]), "need one type"),
        (Mfp(Join(Get(X), Get(X), [0], [0]), map=[Column(6)]), "/Mfp.map[0]"),
    ],
)
def test_plan_errors_name_node_and_column(plan: Plan, fragment: str) -> None:
    with pytest.raises(PlanError) as info:
        typecheck_plan(plan, INPUTS)
    assert fragment in str(info.value)


def test_nested_error_path_names_the_node() -> None:
    plan = Reduce(Join(Get(X), Mfp(Get(X), map=[Column(9)]), [0], [0]), [0], [])
    with pytest.raises(PlanError, match=r"Reduce\.input/Join\.right/Mfp\.map\[0\]"):
        typecheck_plan(plan, INPUTS)


def _dataflow(plan: Plan) -> DataflowDescription:
    out = GlobalId.user(2)
    return DataflowDescription(
        "df",
        source_imports={X: SourceImport("s", DESC)},
        objects_to_build=[BuildDesc(out, plan)],
        index_exports={out: (IndexDesc(out, [0]), DESC)},
    )


def test_dataflow_is_checked_before_it_runs() -> None:
    assert typecheck_dataflow(_dataflow(Get(X)))[GlobalId.user(2)] == DESC
    bad = _dataflow(Mfp(Get(X), map=[Column(9)]))
    with pytest.raises(PlanError, match=r"objects_to_build\[0\] u2"):
        Dataflow(bad)
    wrong_arity = DataflowDescription(
        "df",
        source_imports={X: SourceImport("s", DESC)},
        objects_to_build=[BuildDesc(GlobalId.user(2), Mfp(Get(X), project=[0]))],
        index_exports={GlobalId.user(2): (IndexDesc(GlobalId.user(2), [0]), DESC)},
    )
    with pytest.raises(PlanError, match="index_exports"):
        typecheck_dataflow(wrong_arity)
