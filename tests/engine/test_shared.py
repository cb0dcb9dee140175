"""Shared subplans, single-time state and cached map/filter/project compilation (`render`).

A plan that repeats a subplan (SQL's decorrelated subqueries do) renders it once behind a
`SharedOp`, stepped once per time. Property: over random histories and random plans `P`
(`plangen`, stateful operators included), `UnionAll([P, P, Negate(P)])` equals `P` and
`Distinct(UnionAll([P, P]))` equals `Distinct(P)` at every time — a shared stateful operator
stepped twice per time, or a delta handed to one parent only, would break both. Without the
per-time memo of `SharedOp` the first property fails (checked by `test_memo_is_needed`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from plangen import Scenario, scenarios

from twofold.engine import dataflow, render
from twofold.engine.dataflow import Dataflow
from twofold.engine.expr import CompiledMfp
from twofold.engine.join import JoinOp
from twofold.engine.operator import UnionOp
from twofold.engine.reduce import KeyedOp
from twofold.engine.render import Renderer, SharedOp
from twofold.engine.state import WholeState
from twofold.engine.testing import run_plan_at_times
from twofold.protocol import (
    Aggregate,
    BuildDesc,
    Call,
    Column,
    ColumnType,
    DataflowDescription,
    Distinct,
    Frontier,
    Get,
    GlobalId,
    IndexDesc,
    Join,
    Literal,
    MapFilterProject,
    Mfp,
    Negate,
    Reduce,
    RelationDesc,
    SourceImport,
    UnionAll,
)
from twofold.testing.profiles import examples

SETTINGS = settings(max_examples=examples(30), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
INT = ColumnType("int", True)
A = GlobalId.user(1)
B = GlobalId.transient(2)
DESC = RelationDesc(["x", "y"], [INT, INT])


def _multiset(out: Any) -> Any:
    return out if isinstance(out, str) else Counter({repr(r): n for r, n in out})


@SETTINGS
@given(scenarios(max_depth=3))
def test_a_repeated_subplan_is_computed_once_and_read_by_each_parent(s: Scenario) -> None:
    p = s.plan
    want = run_plan_at_times(p, s.inputs, s.times)
    got = run_plan_at_times(UnionAll([p, p, Negate(p)]), s.inputs, s.times)
    assert {t: _multiset(v) for t, v in got.items()} == {t: _multiset(v) for t, v in want.items()}
    want = run_plan_at_times(Distinct(p), s.inputs, s.times)
    got = run_plan_at_times(Distinct(UnionAll([p, p])), s.inputs, s.times)
    assert got == want


def _stateful() -> Reduce:
    return Reduce(Get(A), [0], [Aggregate("count")])


def test_equal_subplans_share_one_operator() -> None:
    op = Renderer({A: DESC}, 0).top(UnionAll([_stateful(), _stateful()]))
    assert isinstance(op, UnionOp)
    first, second = op.children
    assert isinstance(first, SharedOp) and first is second


def test_subplans_differing_only_in_literal_types_are_not_shared() -> None:
    def plan(value: object) -> Mfp:
        return Mfp(Get(A), map=[Literal(value)], filter=[], project=[2])

    op = Renderer({A: DESC}, 0).top(Join(Distinct(plan(1)), Distinct(plan(1.0)), [], []))
    assert isinstance(op, JoinOp)
    assert op.left is not op.right and op.left.types != op.right.types


def test_memo_is_needed(monkeypatch: Any) -> None:
    """Mutation check: a SharedOp that steps its operator on every read double-counts."""
    inputs = {A: (DESC, [([1, 2], 0, 1), ([1, 3], 1, 1), ([1, 2], 2, -1)])}
    plan = UnionAll([_stateful(), _stateful(), Negate(_stateful())])
    right = run_plan_at_times(_stateful(), inputs, [0, 1, 2, 3])
    assert run_plan_at_times(plan, inputs, [0, 1, 2, 3]) == right
    monkeypatch.setattr(render.SharedOp, "step", lambda self, t, i: self.inner.step(t, i))
    assert run_plan_at_times(plan, inputs, [0, 1, 2, 3]) != right


def test_cached_mfp_compilation_keeps_literal_types_apart() -> None:
    frame = pl.DataFrame({"c0": [1, None], "c1": [2, 3]}, schema={"c0": pl.Int64,
                                                                  "c1": pl.Int64})
    outs = []
    for value in (1, 1.0, True, -0.0, 1, 1.0, True, -0.0):
        mfp = MapFilterProject(map=[Literal(value)], filter=[], project=[2])
        out, errs = CompiledMfp(mfp, [INT, INT]).apply(frame)
        assert errs is None
        outs.append((str(out.schema["c0"]), [repr(v) for v in out["c0"].to_list()]))
    assert outs[:4] == outs[4:]
    assert outs[:4] == [("Int64", ["1", "1"]), ("Float64", ["1.0", "1.0"]),
                        ("Boolean", ["True", "True"]), ("Float64", ["-0.0", "-0.0"])]


def _whole_state_renderer(known: Any, as_of: int, *, single_time: bool = False) -> Renderer:
    return Renderer(known, as_of, single_time=True)


@SETTINGS
@given(scenarios(max_depth=3))
def test_whole_state_operators_match_keyed_state_ones_at_every_time(s: Scenario,
                                                                    ) -> None:
    """A peek dataflow's operators keep `WholeState` (lookups answer with every row). That is
    correct at any number of times, only slower, so forcing it on multi-time histories must
    give exactly the keyed answers."""
    want = run_plan_at_times(s.plan, s.inputs, s.times)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dataflow, "Renderer", _whole_state_renderer)
        got = run_plan_at_times(s.plan, s.inputs, s.times)
    assert got == want


def test_a_peek_dataflow_renders_single_time_state() -> None:
    plan = Join(Distinct(Get(A)), Get(A), [0], [0])
    df = Dataflow(DataflowDescription(
        debug_name="peek", source_imports={A: SourceImport(shard="a", desc=DESC)},
        objects_to_build=[BuildDesc(B, plan)],
        index_exports={B: (IndexDesc(B, [0]), RelationDesc(["a", "b", "c", "d"], [INT] * 4))},
        as_of=Frontier.at(5), until=Frontier.at(6)))
    op = df._ops[0][1]
    assert isinstance(op, JoinOp) and isinstance(op.lstate, WholeState)
    assert isinstance(op.left, SharedOp) and isinstance(op.left.inner, KeyedOp)
    assert isinstance(op.left.inner.state, WholeState)
    df.push(A, [([1, 2], 3, 1), ([1, 2], 4, 1), ([None, 2], 5, 1), ([2, 7], 6, 1)])
    df.advance_source(A, Frontier.at(7))
    df.step()
    rows = sorted(df.export(B).snapshot().read_rows(5), key=repr)
    assert rows == [([1, 2, 1, 2], 2)]


@SETTINGS
@given(scenarios(max_depth=3))
def test_fused_map_filter_project_chains_match_unfused(s: Scenario) -> None:
    want = run_plan_at_times(s.plan, s.inputs, s.times)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(render, "fuse_mfps", lambda outer, inner, arity: None)
        unfused = run_plan_at_times(s.plan, s.inputs, s.times)
    assert want == unfused


def _div(a: int, b: int) -> Call:
    return Call("div", [Column(a), Column(b)])


@pytest.mark.parametrize("outer_filter", [False, True])
def test_fusion_keeps_errors_and_the_rows_they_drop(outer_filter: bool) -> None:
    """The inner map x / y errs where y = 0, the outer map x * 2^62 where |x| >= 2; an outer
    filter may follow. Fused or not: the same rows at every time, and where a row errs in both
    the inner error is the one reported."""
    inner = Mfp(Get(A), map=[_div(0, 1)], filter=[], project=[0, 1, 2])
    outer = Mfp(inner, map=[Call("mul", [Column(0), Literal(2**62)])],
                filter=[Call("gt", [Column(2), Literal(0)])] if outer_filter else [],
                project=[3, 2, 0])
    assert render.fuse_mfps(outer, inner, 2) is not None
    cases = [[([1, 1], 0, 1), ([-1, 2], 0, 1), ([1, 5], 1, 1)],
             [([1, 1], 0, 1), ([5, 0], 1, 1), ([5, 0], 2, -1)],
             [([1, 1], 0, 1), ([6, 3], 1, 1), ([6, 3], 2, -1)]]
    results = []
    for history in cases:
        inputs = {A: (DESC, history)}
        fused = run_plan_at_times(outer, inputs, [0, 1, 2, 3])
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(render, "fuse_mfps", lambda o, i, a: None)
            assert run_plan_at_times(outer, inputs, [0, 1, 2, 3]) == fused
        results.append(fused)
    assert not isinstance(results[0][1], str)
    assert results[1][1] == "division by zero" and results[1][2] == results[1][0]
    assert results[2][1] == "bigint out of range"


def test_an_inner_filter_stops_fusion_under_a_map() -> None:
    inner = Mfp(Get(A), map=[], filter=[Call("ne", [Column(1), Literal(0)])], project=None)
    assert render.fuse_mfps(Mfp(inner, map=[_div(0, 1)], filter=[], project=None),
                            inner, 2) is None
    assert render.fuse_mfps(Mfp(inner, map=[], filter=[], project=[1]), inner, 2) == Mfp(
        Get(A), map=[], filter=inner.filter, project=[1])
