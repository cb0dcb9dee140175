"""Rendering plans into operator trees.

`render_plan` maps each `Plan` node to its operator (`operator`, `join`, `reduce`), with output
types from `typecheck`. A `Get` of a collection becomes a `GetOp` reading that collection's delta
at each time, so several plans may share one built collection.

Common subplans are rendered once: structurally equal subtrees of a dataflow's plans (SQL's
decorrelated subqueries repeat the outer relation several times) share one operator behind a
`SharedOp`, which steps it once per time and hands every parent the same (immutable) delta.
An operator's output at `t` depends only on its inputs' history, so sharing changes no result.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from twofold.engine.accumulate import AccumulateReduceOp, accumulable
from twofold.engine.join import JoinOp
from twofold.engine.operator import (
    ConstantOp,
    Delta,
    GetOp,
    MfpOp,
    NegateOp,
    Operator,
    UnionOp,
)
from twofold.engine.reduce import (
    DistinctOp,
    GlobalReduceOp,
    KeyedOp,
    ReduceOp,
    ThresholdOp,
    TopKOp,
)
from twofold.engine.state import KeyedState, WholeState
from twofold.engine.typecheck import typecheck_plan
from twofold.protocol import (
    Call,
    Column,
    ColumnType,
    Constant,
    Distinct,
    Expr,
    Get,
    GlobalId,
    Join,
    MapFilterProject,
    Mfp,
    Negate,
    Plan,
    Reduce,
    RelationDesc,
    Threshold,
    TopK,
    UnionAll,
)
from twofold.protocol.codec import encode


class SharedOp(Operator):
    """One operator read by several parents: stepped once per time, its delta handed to each
    (frames are never mutated in place, so sharing them is safe)."""

    def __init__(self, inner: Operator) -> None:
        self.inner = inner
        self.types = inner.types
        self._t: int | None = None
        self._out: Delta | None = None

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        if self._t != t or self._out is None:
            self._out = self.inner.step(t, inputs)
            self._t = t
        return self._out


class Renderer:
    """Renders the plans of one dataflow, sharing structurally equal subplans (module
    docstring). `render` may be called for several plans; they share subplans too."""

    def __init__(self, known: Mapping[GlobalId, RelationDesc], as_of: int, *,
                 single_time: bool = False) -> None:
        """`single_time`: the dataflow steps `as_of` only (a peek dataflow), so stateful
        operators keep their input as the frames seen (`WholeState`) instead of arranging it
        by key for later steps that never come. Correct either way; only cost differs."""
        self.known = known
        self.as_of = as_of
        self.single_time = single_time
        self._shared: dict[bytes, Operator] = {}

    def top(self, plan: Plan) -> Operator:
        """The operator of a dataflow's object (its subplans shared, itself not wrapped)."""
        return self.render(plan) if isinstance(plan, Get) else self._render(plan)

    def render(self, plan: Plan) -> Operator:
        if isinstance(plan, Get):
            return GetOp(plan.id, self.known[plan.id].types)
        key = encode(plan)  # structural: 1, 1.0, True and -0.0 encode differently
        op = self._shared.get(key)
        if op is None:
            op = self._shared[key] = SharedOp(self._render(plan))
        return op

    def _render(self, plan: Plan) -> Operator:
        op = self._operator(plan)
        if self.single_time:
            for keyed in (op, getattr(op, "inner", None)):  # GlobalReduceOp wraps its reduce
                if isinstance(keyed, KeyedOp) and isinstance(keyed.state, KeyedState):
                    keyed.state = WholeState.like(keyed.state)  # type: ignore[assignment]
        return op

    def _operator(self, plan: Plan) -> Operator:
        known, as_of, render = self.known, self.as_of, self.render
        match plan:
            case Constant(rows=rows):
                return ConstantOp(rows, typecheck_plan(plan, known).types, as_of)
            case Mfp(input=inp, map=maps, filter=filters, project=project):
                while isinstance(inp, Mfp):  # one operator for a chain, where that is exact
                    fused = fuse_mfps(plan, inp, len(self.render(inp.input).types))
                    if fused is None:
                        break
                    plan, inp = fused, fused.input
                    maps, filters, project = fused.map, fused.filter, fused.project
                child = render(inp)
                return MfpOp(child, MapFilterProject(map=maps, filter=filters, project=project))
            case Join(left=left, right=right, left_key=lk, right_key=rk):
                return JoinOp(render(left), render(right), list(lk), list(rk),
                              single_time=self.single_time)
            case Reduce(input=inp, group_key=gk, aggregates=aggs):
                child = render(inp)
                types = _types_over(plan, [child])
                op: Operator = (
                    AccumulateReduceOp(child, gk, aggs, types)
                    if accumulable(aggs, child.types)
                    else ReduceOp(child, gk, aggs, types)
                )
                # No group key: one row even over no input rows (`docs/semantics.md`).
                return op if gk else GlobalReduceOp(op, aggs)
            case TopK(input=inp, group_key=gk, order_by=order, limit=limit, offset=offset):
                return TopKOp(render(inp), gk, order, limit, offset)
            case UnionAll(inputs=parts):
                children = [render(p) for p in parts]
                types = _types_over(plan, children)
                return UnionOp(children, types)
            case Negate(input=inp):
                return NegateOp(render(inp))
            case Threshold(input=inp):
                return ThresholdOp(render(inp))
            case Distinct(input=inp):
                return DistinctOp(render(inp))
        raise TypeError(f"not a plan: {plan!r}")


def _hole(j: int) -> GlobalId:
    return GlobalId.transient(2**62 + j)


def _types_over(plan: UnionAll | Reduce, children: list[Operator]) -> list[ColumnType]:
    """`plan`'s output types with its inputs replaced by Gets of its rendered children's
    types, so typing a node costs O(its own size), not its subtree's."""
    known = {_hole(j): RelationDesc([f"c{i}" for i in range(len(c.types))], c.types)
             for j, c in enumerate(children)}
    if isinstance(plan, UnionAll):
        shell: Plan = msgspec.structs.replace(
            plan, inputs=[Get(_hole(j)) for j in range(len(children))])
    else:
        shell = msgspec.structs.replace(plan, input=Get(_hole(0)))
    return typecheck_plan(shell, known).types


def _remap(e: Expr, columns: list[int]) -> Expr:
    if isinstance(e, Column):
        return Column(index=columns[e.index])
    if isinstance(e, Call):
        return Call(func=e.func, args=[_remap(a, columns) for a in e.args])
    return e


def fuse_mfps(outer: Mfp, inner: Mfp, arity: int) -> Mfp | None:
    """`outer` over `inner` as one `Mfp` over inner's input (of `arity` columns), when that
    evaluates the same expressions on the same rows — inner has no filter (outer sees all its
    rows anyway), or outer only projects — else None. A row's error is the first one it
    reaches in evaluation order, inner's before outer's (`expr._compile_mfp`): fused, an inner
    map that only outer's output reads is reached only by rows outer's filters keep, as in
    PostgreSQL, where unfused it was evaluated on every row."""
    if inner.filter and (outer.map or outer.filter):
        return None
    cols = list(inner.project) if inner.project is not None else list(
        range(arity + len(inner.map)))
    maps = list(inner.map)
    for e in outer.map:
        maps.append(_remap(e, cols))
        cols.append(arity + len(maps) - 1)
    filters = [*inner.filter, *(_remap(f, cols) for f in outer.filter)]
    project = [cols[j] for j in outer.project] if outer.project is not None else cols
    return Mfp(input=inner.input, map=maps, filter=filters, project=project)


def render_plan(plan: Plan, known: Mapping[GlobalId, RelationDesc], as_of: int) -> Operator:
    """The operator computing `plan` (which must already type-check against `known`)."""
    return Renderer(known, as_of).top(plan)
