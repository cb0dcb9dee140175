"""Rendering plans into operator trees.

`render_plan` maps each `Plan` node to its operator (`operator`, `join`, `reduce`), with output
types from `typecheck`. A `Get` of a collection becomes a `GetOp` reading that collection's delta
at each time, so several plans may share one built collection.
"""

from __future__ import annotations

from collections.abc import Mapping

from twofold.engine.accumulate import AccumulateReduceOp, accumulable
from twofold.engine.join import JoinOp
from twofold.engine.operator import ConstantOp, GetOp, MfpOp, NegateOp, Operator, UnionOp
from twofold.engine.reduce import DistinctOp, GlobalReduceOp, ReduceOp, ThresholdOp, TopKOp
from twofold.engine.typecheck import typecheck_plan
from twofold.protocol import (
    Constant,
    Distinct,
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


def render_plan(plan: Plan, known: Mapping[GlobalId, RelationDesc], as_of: int) -> Operator:
    """The operator computing `plan` (which must already type-check against `known`)."""
    match plan:
        case Get(id=gid):
            return GetOp(gid, known[gid].types)
        case Constant(rows=rows):
            return ConstantOp(rows, typecheck_plan(plan, known).types, as_of)
        case Mfp(input=inp, map=maps, filter=filters, project=project):
            child = render_plan(inp, known, as_of)
            return MfpOp(child, MapFilterProject(map=maps, filter=filters, project=project))
        case Join(left=left, right=right, left_key=lk, right_key=rk):
            return JoinOp(
                render_plan(left, known, as_of),
                render_plan(right, known, as_of),
                list(lk),
                list(rk),
            )
        case Reduce(input=inp, group_key=gk, aggregates=aggs):
            types = typecheck_plan(plan, known).types
            child = render_plan(inp, known, as_of)
            op: Operator = (
                AccumulateReduceOp(child, gk, aggs, types)
                if accumulable(aggs, child.types)
                else ReduceOp(child, gk, aggs, types)
            )
            # No group key: one row even over no input rows (`docs/semantics.md`).
            return op if gk else GlobalReduceOp(op, aggs)
        case TopK(input=inp, group_key=gk, order_by=order, limit=limit, offset=offset):
            return TopKOp(render_plan(inp, known, as_of), gk, order, limit, offset)
        case UnionAll(inputs=parts):
            types = typecheck_plan(plan, known).types
            return UnionOp([render_plan(p, known, as_of) for p in parts], types)
        case Negate(input=inp):
            return NegateOp(render_plan(inp, known, as_of))
        case Threshold(input=inp):
            return ThresholdOp(render_plan(inp, known, as_of))
        case Distinct(input=inp):
            return DistinctOp(render_plan(inp, known, as_of))
    raise TypeError(f"not a plan: {plan!r}")
