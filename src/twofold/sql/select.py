"""Planning one SELECT: WHERE, GROUP BY/HAVING and aggregates (`twofold.sql.aggregate`), the
SELECT list, DISTINCT and DISTINCT ON, ORDER BY, LIMIT/OFFSET.

Contract (PostgreSQL's rules): the SELECT list's output names are aliases, else a column's name,
else a function's name, else `?column?` (`twofold.sql.names`). `DISTINCT ON (exprs)` keeps the
first row per distinct value in ORDER BY order (a `TopK` of limit 1 per key; ties broken by
every column), its expressions the leading ORDER BY items (`42P10` otherwise).
`ORDER BY` takes positions, output names and expressions (computed as hidden columns, dropped
after the read); ASC sorts NULLs last and DESC first unless `NULLS FIRST|LAST` says otherwise.
`LIMIT`/`OFFSET` become a `TopK` (per correlation binding inside a subquery). An output
column has the PostgreSQL type of its expression (`Col.pg`, `twofold.sql.pgtypes`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from twofold.protocol import Column, Constant, Distinct, Mfp, OrderKey, TopK
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.aggregate import aggregate_calls, plan_aggregate
from twofold.sql.errors import (
    FeatureNotSupported,
    GroupingError,
    InvalidColumnReference,
    SqlSyntaxError,
)
from twofold.sql.exprs import AggContext, B, Binder
from twofold.sql.from_ import conjuncts, filtered, plan_from
from twofold.sql.names import output_name, position_of
from twofold.sql.pgtypes import col_pg
from twofold.sql.scope import Col, Outer, Rel, Scope

if TYPE_CHECKING:
    from twofold.sql.planner import Planned, Planner



def _select_items(scope: Scope, node: exp.Select) -> list[exp.Expr]:
    """The SELECT list with `*` and `t.*` expanded into column nodes."""
    items: list[exp.Expr] = []
    for e in node.expressions:
        if isinstance(e, exp.Star):
            items.extend(_col_nodes(scope, scope.star()))
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            items.extend(_col_nodes(scope, scope.star(e.table)))
        else:
            items.append(e)
    if not items:
        raise SqlSyntaxError("SELECT needs at least one output column")
    return items


def _col_nodes(scope: Scope, idx: list[int]) -> list[exp.Expr]:
    out: list[exp.Expr] = []
    for i in idx:
        c = scope.rel.cols[i]
        out.append(exp.Column(this=exp.to_identifier(c.name),
                              table=exp.to_identifier(c.qual) if c.qual else None))
    return out


def order_and_limit(planner: Planner, node: exp.Expr, rel: Rel, corr: Rel | None) -> Planned:
    """ORDER BY (output positions and names only) and LIMIT/OFFSET of a set operation."""
    ncorr = len(corr.cols) if corr is not None else 0
    names = [c.name for c in rel.cols[ncorr:]]
    return _order(planner, node, rel, ncorr, names, [], len(rel.cols))


def _count(planner: Planner, node: exp.Expr | None, what: str) -> int | None:
    if node is None:
        return None
    e = node.expression if isinstance(node, exp.Limit | exp.Offset) else node
    if e is None:
        return None
    b = Binder(planner, Scope(Rel(Constant(rows=[]), [])), clause=what).bind(e)
    if not isinstance(b[0], PLiteral) or (b[0].value is not None and type(b[0].value) is not int):
        raise FeatureNotSupported(f"{what} must be an integer constant")
    if b[0].value is None:
        return None
    if b[0].value < 0:
        raise SqlSyntaxError(f"{what} must not be negative")
    return int(b[0].value)


def plan_select(planner: Planner, node: exp.Select, outer: Outer | None,
                corr: Rel | None) -> Planned:
    """Plan a SELECT (module docstring); correlation columns come first in its output."""
    from twofold.sql.planner import Planned

    for unsupported, what in (("distinct_on", "DISTINCT ON"), ("qualify", "QUALIFY"),
                              ("windows", "WINDOW"), ("into", "SELECT INTO"),
                              ("locks", "FOR UPDATE")):
        if node.args.get(unsupported):
            raise FeatureNotSupported(f"{what} is not supported")
    distinct_node = node.args.get("distinct")
    on_node = distinct_node.args.get("on") if distinct_node is not None else None
    distinct_on: list[exp.Expr] = list(on_node.expressions) if on_node is not None else []
    where = node.args.get("where")
    rel, rest = plan_from(planner, node, outer, corr,
                          conjuncts(where.this if where is not None else None))
    rel = filtered(planner, rel, rest, outer)
    scope = Scope(rel, outer)
    items = _select_items(scope, node)
    having = node.args.get("having")
    onode = node.args.get("order")
    order_exprs = [o.this for o in onode.expressions] if onode is not None else []
    aggs = aggregate_calls([*items, *([having] if having is not None else []), *order_exprs,
                        *distinct_on])
    agg: AggContext | None = None
    if aggs or node.args.get("group") is not None or having is not None:
        rel, agg = plan_aggregate(planner, rel, node, items, aggs, outer, corr)
        scope = Scope(rel, outer)
    binder = Binder(planner, scope, agg, clause="SELECT")
    if having is not None:
        pred = binder.condition(having.this, "HAVING")
        rel = binder.scope.rel
        rel = Rel(Mfp(input=rel.plan, filter=[pred]), rel.cols, rel.inputs)
        binder.scope = Scope(rel, outer)
    corr_pos = [i for i, c in enumerate(binder.scope.rel.cols) if c.corr is not None]
    ncorr = len(corr.cols) if corr is not None else 0
    if len(corr_pos) < ncorr:
        raise GroupingError("a correlated subquery lost its outer columns")  # pragma: no cover
    bound = [binder.bind(i) for i in items]
    distinct = distinct_node is not None and not distinct_on
    # ORDER BY expressions that are not outputs are bound now, over the same relation.
    names = [output_name(i) for i in items]
    extras: list[B] = []
    order_targets = [_target(o.this, names, items) for o in (
        onode.expressions if onode is not None else [])]
    for t in order_targets:
        if isinstance(t, int):
            continue
        if distinct:
            raise SqlSyntaxError("for SELECT DISTINCT, ORDER BY expressions must appear "
                                 "in select list")
        extras.append(binder.bind(t))
    on_targets = [_target(e, names, items, "DISTINCT ON") for e in distinct_on]
    _check_distinct_on(on_targets, order_targets)
    on_extras: list[exp.Expr] = []  # DISTINCT ON expressions neither output nor ORDER BY
    for t in on_targets:
        if not isinstance(t, int) and t not in order_targets and t not in on_extras:
            on_extras.append(t)
            extras.append(binder.bind(t))
    rel = binder.scope.rel
    maps: list[PExpr] = []
    project: list[int] = list(corr_pos[:ncorr])
    for e, _, _ in [*bound, *extras]:
        if isinstance(e, Column):
            project.append(e.index)
        else:
            maps.append(e)
            project.append(len(rel.cols) + len(maps) - 1)
    out_cols = [replace(rel.cols[i], hidden=True) for i in corr_pos[:ncorr]]
    for name, b in zip(names, bound, strict=True):
        out_cols.append(Col(name, b[1], b[2], pg=col_pg(b)))
    for _, s, n in extras:
        out_cols.append(Col("?order?", s, n, hidden=True))
    plan: Any = rel.plan
    if maps or project != list(range(len(rel.cols))):
        plan = Mfp(input=rel.plan, map=maps, project=project)
    if distinct:
        plan = Distinct(input=plan)
    visible = ncorr + len(bound)
    if distinct_on:
        # Per distinct value of the DISTINCT ON expressions, the first row in ORDER BY order
        # (ties broken by every column, so the row kept is a function of the rows).
        order = _order_keys(onode, ncorr, names, items, visible)
        order_extras = [t for t in order_targets if not isinstance(t, int)]
        key = [ncorr + t if isinstance(t, int) else visible + (
            order_extras.index(t) if t in order_extras
            else len(order_extras) + on_extras.index(t)) for t in on_targets]
        plan = TopK(input=plan, group_key=[*range(ncorr), *dict.fromkeys(key)],
                    order_by=order, limit=1)
    out = Rel(plan, out_cols, rel.inputs)
    planned = _order(planner, node, out, ncorr, names, items, visible)
    return Planned(planned.rel, planned.order, visible)


def _target(e: exp.Expr, names: list[str], items: list[exp.Expr], what: str = "ORDER BY"
            ) -> int | exp.Expr:
    """What an ORDER BY or DISTINCT ON expression names: an output column (its index, from a
    position, an output name or an equal SELECT item), else the expression itself."""
    pos = position_of(e, len(names), what)
    if pos is not None:
        return pos
    if isinstance(e, exp.Column) and not e.table and e.name in names:
        return names.index(e.name)
    for j, i in enumerate(items):
        if i == e or (isinstance(i, exp.Alias) and i.this == e):
            return j
    return e


def _check_distinct_on(on: list[int | exp.Expr], order: list[int | exp.Expr]) -> None:
    """PostgreSQL's rule: the DISTINCT ON expressions must be the leading ORDER BY items (in
    any order; ones missing from ORDER BY are allowed only when every ORDER BY item is one)."""
    skipped = False
    for t in order:
        if t in on:
            if skipped:
                raise InvalidColumnReference("SELECT DISTINCT ON expressions must match "
                                             "initial ORDER BY expressions")
        else:
            skipped = True
    if skipped and any(t not in order for t in on):
        raise InvalidColumnReference("SELECT DISTINCT ON expressions must match initial "
                                     "ORDER BY expressions")


def _order_keys(onode: exp.Expr | None, ncorr: int, names: list[str], items: list[exp.Expr],
                visible: int) -> list[OrderKey]:
    """The ORDER BY keys over a relation of the outputs, then the non-output ORDER BY
    expressions (from `visible`, in order)."""
    order: list[OrderKey] = []
    next_extra = visible
    for o in (onode.expressions if onode is not None else []):
        e = o.this
        k = position_of(e, len(names), "ORDER BY")
        if k is not None:
            pos = ncorr + k
        elif isinstance(e, exp.Column) and not e.table and e.name in names:
            pos = ncorr + names.index(e.name)
        else:
            hit = [j for j, i in enumerate(items) if i == e or (
                isinstance(i, exp.Alias) and i.this == e)]
            if hit:
                pos = ncorr + hit[0]
            elif not items:
                raise SqlSyntaxError(f"ORDER BY {e.sql()!r}: only output columns can order a "
                                     "set operation")
            else:
                pos = next_extra
                next_extra += 1
        order.append(OrderKey(column=pos, desc=bool(o.args.get("desc")),
                              nulls_last=not o.args.get("nulls_first")))
    return order


def _order(planner: Planner, node: exp.Expr, rel: Rel, ncorr: int, names: list[str],
           items: list[exp.Expr], visible: int) -> Planned:
    from twofold.sql.planner import Planned

    order = _order_keys(node.args.get("order"), ncorr, names, items, visible)
    limit = _count(planner, node.args.get("limit"), "LIMIT")
    offset = _count(planner, node.args.get("offset"), "OFFSET") or 0
    if limit is not None or offset:
        rel = Rel(TopK(input=rel.plan, group_key=list(range(ncorr)), order_by=order,
                       limit=limit, offset=offset), rel.cols, rel.inputs)
    return Planned(rel, order if ncorr == 0 else [], visible)


__all__ = ["order_and_limit", "plan_select"]
