"""Flattening deep expressions into chains of map columns before a plan is run.

Why: the engine compiles an expression into one polars expression in which a checked integer
operation uses its operand more than once, so a chain like `(a+b+c+d+e)/5` grows exponentially
with its depth (about a second for that one over 30 rows). Here every `Mfp` of a plan is
rewritten so that the operands of each strictly evaluated call are computed by earlier map
columns (the `Mfp` contract lets a map read the maps before it), which the engine evaluates once
each. Operands the engine evaluates lazily — the branches of `if`, the later arguments of
`coalesce`, both sides of `and`/`or` (whose errors the other side may mask) — stay inline, so a
guarded `CASE WHEN b <> 0 THEN a / b END` still never reports a division by zero. The rewrite
changes no result: the same expressions are evaluated, with the same errors, and every `Mfp`
keeps its output columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from twofold.api.relation import Input
from twofold.protocol import (
    Call,
    Column,
    Constant,
    Expr,
    Get,
    GlobalId,
    Join,
    Mfp,
    Plan,
    Reduce,
    UnionAll,
    plan_children,
)

_LAZY_AFTER_FIRST = frozenset({"if", "coalesce"})
_LAZY_ALL = frozenset({"and", "or"})


def _is_call(e: Expr) -> bool:
    return isinstance(e, Call)


class _Flattener:
    def __init__(self, width: int) -> None:
        self.width = width  # input arity
        self.maps: list[Expr] = []

    def hoist(self, e: Expr) -> Expr:
        """`e` computed into a map column (its own operands hoisted first)."""
        e = self.operands(e)
        self.maps.append(e)
        return Column(index=self.width + len(self.maps) - 1)

    def operands(self, e: Expr) -> Expr:
        """`e` with its strictly evaluated call operands hoisted."""
        if not isinstance(e, Call):
            return e
        if e.func in _LAZY_ALL:
            return e
        args = list(e.args)
        strict = range(1) if e.func in _LAZY_AFTER_FIRST else range(len(args))
        for j in strict:
            if _is_call(args[j]):
                args[j] = self.hoist(args[j])
        return Call(func=e.func, args=args)


def _remap(e: Expr, where: list[int]) -> Expr:
    if isinstance(e, Column):
        return Column(index=where[e.index])
    if isinstance(e, Call):
        return Call(func=e.func, args=[_remap(a, where) for a in e.args])
    return e


def flatten_mfp(mfp: Mfp, width: int) -> Mfp:
    """`mfp` (over an input of `width` columns) with deep expressions flattened."""
    if not any(isinstance(a, Call) for m in [*mfp.map, *mfp.filter]
               if isinstance(m, Call) for a in m.args):
        return mfp
    f = _Flattener(width)
    where = list(range(width))
    for m in mfp.map:
        e = f.operands(_remap(m, where))
        f.maps.append(e)
        where.append(width + len(f.maps) - 1)
    filters = [f.operands(_remap(p, where)) for p in mfp.filter]
    project = [where[c] for c in mfp.project] if mfp.project is not None else where
    return Mfp(input=mfp.input, map=f.maps, filter=filters, project=project)


def flatten_plan(plan: Plan, inputs: Mapping[GlobalId, Input]) -> Plan:
    """Every `Mfp` of `plan` flattened (module docstring)."""
    memo: dict[int, tuple[Plan, int]] = {}

    def walk(p: Plan) -> tuple[Plan, int]:
        key = id(p)
        if key in memo:
            return memo[key]
        kids = [walk(c) for c in plan_children(p)]
        out: Any
        match p:
            case Get(id=gid):
                out, width = p, len(inputs[gid].schema) if gid in inputs else 0
            case Constant(rows=rows):
                out, width = p, len(rows[0][0]) if rows else 0
            case Mfp():
                child, n = kids[0]
                out = flatten_mfp(msgspec.structs.replace(p, input=child), n)
                width = len(out.project) if out.project is not None else n + len(out.map)
            case Join():
                out = msgspec.structs.replace(p, left=kids[0][0], right=kids[1][0])
                width = kids[0][1] + kids[1][1]
            case Reduce(group_key=gk, aggregates=aggs):
                out, width = msgspec.structs.replace(p, input=kids[0][0]), len(gk) + len(aggs)
            case UnionAll():
                out = msgspec.structs.replace(p, inputs=[k for k, _ in kids])
                width = kids[0][1]
            case _:
                out, width = msgspec.structs.replace(p, input=kids[0][0]), kids[0][1]
        memo[key] = (out, width)
        return out, width

    return walk(plan)[0]
