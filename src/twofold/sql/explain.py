"""`EXPLAIN`: a protocol plan as an indented operator tree, readable by people.

Contract: `explain(plan, inputs)` returns one line per operator, children indented under their
parent, naming what each does — the collection a `Get` reads (table, view or index by name, and
for an index its key: reading it uses that arrangement), `Join` keys, filters and maps as
expressions over `#n` columns, `Reduce` keys and aggregates, `TopK` order/limit/offset.
"""

from __future__ import annotations

from collections.abc import Mapping

from twofold.api.relation import Input
from twofold.protocol import (
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
    Plan,
    Reduce,
    Threshold,
    TopK,
    UnionAll,
)

_INFIX = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "and": "AND",
          "or": "OR", "add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%",
          "concat": "||", "like": "LIKE"}


def expr_text(e: Expr) -> str:
    if isinstance(e, Column):
        return f"#{e.index}"
    if isinstance(e, Literal):
        return "NULL" if e.value is None else repr(e.value)
    assert isinstance(e, Call)
    args = [expr_text(a) for a in e.args]
    if e.func in _INFIX and len(args) == 2:
        return f"({args[0]} {_INFIX[e.func]} {args[1]})"
    if e.func == "not":
        return f"NOT {args[0]}"
    return f"{e.func}({', '.join(args)})"


def _line(plan: Plan, inputs: Mapping[GlobalId, Input]) -> str:
    match plan:
        case Get(id=gid):
            inp = inputs.get(gid)
            if inp is None:
                return f"Get {gid}"
            if inp.kind == "index" and inp.index is not None:
                key = [inp.schema.names[k] for k in inp.index.key]
                return f"Get index {inp.name!r} (arrangement keyed by {', '.join(key)})"
            label = "materialized view" if inp.kind == "view" else inp.kind
            return f"Get {label} {inp.name!r} ({', '.join(inp.schema.names)})"
        case Constant(rows=rows):
            return f"Constant {len(rows)} row(s)"
        case Mfp(map=maps, filter=filters, project=project):
            parts = []
            if maps:
                parts.append("map " + ", ".join(expr_text(m) for m in maps))
            if filters:
                parts.append("filter " + " AND ".join(expr_text(f) for f in filters))
            if project is not None:
                parts.append("project (" + ", ".join(f"#{c}" for c in project) + ")")
            return "Map/Filter/Project " + "; ".join(parts) if parts else "Map/Filter/Project"
        case Join(left_key=lk, right_key=rk):
            if not lk:
                return "CrossJoin"
            keys = ", ".join(f"left #{a} = right #{b}" for a, b in zip(lk, rk, strict=True))
            return f"Join on {keys} (both sides arranged by key)"
        case Reduce(group_key=gk, aggregates=aggs):
            a = ", ".join(f"{x.func}({'DISTINCT ' if x.distinct else ''}"
                          f"{'*' if x.column is None else f'#{x.column}'})" for x in aggs)
            return f"Reduce group by ({', '.join(f'#{k}' for k in gk)}) aggregates [{a}]"
        case TopK(group_key=gk, order_by=order, limit=limit, offset=offset):
            o = ", ".join(f"#{k.column}{' DESC' if k.desc else ''}" for k in order)
            return (f"TopK group by ({', '.join(f'#{k}' for k in gk)}) order by ({o}) "
                    f"limit {limit} offset {offset}")
        case UnionAll(inputs=parts):
            return f"Union ({len(parts)} inputs)"
        case Negate():
            return "Negate"
        case Threshold():
            return "Threshold"
        case Distinct():
            return "Distinct"
    return type(plan).__name__


def explain(plan: Plan, inputs: Mapping[GlobalId, Input]) -> list[str]:
    """The plan's operator tree, one line per operator (module docstring)."""
    from twofold.protocol import plan_children

    lines: list[str] = []

    def walk(p: Plan, depth: int) -> None:
        lines.append("  " * depth + _line(p, inputs))
        for c in plan_children(p):
            walk(c, depth + 1)

    walk(plan, 0)
    return lines
