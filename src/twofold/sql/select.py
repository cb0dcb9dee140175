"""Planning one SELECT: WHERE, GROUP BY/HAVING and aggregates, the SELECT list, DISTINCT,
ORDER BY, LIMIT/OFFSET.

Contract (PostgreSQL's rules): the SELECT list's output names are aliases, else a column's name,
else a function's name, else `?column?`. `GROUP BY` takes expressions, output positions or
output names; a column used outside an aggregate must be grouped (`GroupingError`). A query with
aggregates and no GROUP BY returns exactly one row even over no input (`count` 0, the others
NULL): the engine's Reduce gives that row; inside a correlated subquery the aggregate is
left-joined to the distinct outer bindings, so `(SELECT count(*) ... WHERE t.a = outer.a)` is
0 where nothing matches. `avg` is `sum / count` as a double; `bool_and`/`bool_or` are
`min`/`max` of booleans. `string_agg(x, sep)` joins the non-NULL values in ascending order (a
valid order for PostgreSQL's unspecified one); `ORDER BY x [DESC]` inside it is honoured, an
order by anything else is refused.
`ORDER BY` takes positions, output names and expressions (computed as hidden columns, dropped
after the read); ASC sorts NULLs last and DESC first unless `NULLS FIRST|LAST` says otherwise.
`LIMIT`/`OFFSET` become a `TopK` (per correlation binding inside a subquery).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from twofold.api.joins import left_join_on, nullsafe_key, typed_null
from twofold.protocol import Aggregate, Column, Constant, Distinct, Mfp, OrderKey, Reduce, TopK
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.errors import (
    FeatureNotSupported,
    GroupingError,
    InvalidColumnReference,
    SqlSyntaxError,
)
from twofold.sql.exprs import AGGREGATES, AggContext, B, Binder, call, node_key
from twofold.sql.from_ import conjuncts, filtered, plan_from
from twofold.sql.scope import NULL, Col, Outer, Rel, Scope

if TYPE_CHECKING:
    from twofold.sql.planner import Planned, Planner


_VARIANCES: dict[type[exp.Expr], str] = {
    exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop",
    exp.Variance: "var_samp", exp.VariancePop: "var_pop"}
_AGGREGATE_FUNCS: dict[type[exp.Expr], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
    exp.LogicalAnd: "min", exp.LogicalOr: "max", exp.GroupConcat: "string_agg", **_VARIANCES}
_VARIANCE_NODES = (exp.Stddev, exp.StddevSamp, exp.StddevPop, exp.Variance, exp.VariancePop)
_VARIANCE_FUNCS = {"stddev_samp": "var_samp", "stddev_pop": "var_pop", "var_samp": "var_samp",
                   "var_pop": "var_pop"}  # SQL aggregate -> the engine's


def output_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Alias):
        return node.alias
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Paren):
        return output_name(node.this)
    if isinstance(node, exp.Cast | exp.TryCast):
        inner = output_name(node.this)
        return inner if inner != "?column?" else sql_name_of(node.args["to"])
    if isinstance(node, exp.Case):
        return "case"
    if isinstance(node, exp.Exists):
        return "exists"
    if isinstance(node, exp.Subquery):
        sel = node.this
        if isinstance(sel, exp.Select) and len(sel.expressions) == 1:
            return output_name(sel.expressions[0])
    if isinstance(node, exp.Filter):
        return output_name(node.this)
    if isinstance(node, exp.GroupConcat):
        return "string_agg"
    if isinstance(node, exp.Variance | exp.VariancePop):
        return node.meta.get("name", "variance") if isinstance(node, exp.Variance) else "var_pop"
    if isinstance(node, exp.Func) and not isinstance(node, exp.Anonymous):
        name = node.sql_name().lower()
        return {"logical_and": "bool_and", "logical_or": "bool_or"}.get(name, name)
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    return "?column?"


def sql_name_of(dt: exp.Expr) -> str:
    return dt.sql(dialect="postgres").lower().split("(")[0]


def _aggregates(nodes: list[exp.Expr]) -> list[exp.Expr]:
    """Aggregate calls in `nodes`, outside subqueries, by first appearance."""
    out: dict[Any, exp.Expr] = {}

    def walk(n: exp.Expr) -> None:
        if isinstance(n, exp.Subquery | exp.Exists | exp.Select):
            return
        if isinstance(n, exp.Filter) and isinstance(n.this, AGGREGATES):
            out.setdefault(node_key(n), n)
            return
        if isinstance(n, AGGREGATES) and not isinstance(n, exp.Window):
            out.setdefault(node_key(n), n)
            return
        for child in n.iter_expressions():
            walk(child)

    for n in nodes:
        walk(n)
    return list(out.values())


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


def _agg_input(binder: Binder, node: exp.Expr) -> tuple[exp.Expr | None, bool]:
    arg = node.this
    if isinstance(arg, exp.Order):
        arg = arg.this
    distinct = False
    if isinstance(arg, exp.Distinct):
        distinct = True
        if len(arg.expressions) != 1:
            raise FeatureNotSupported("aggregates over several DISTINCT columns are not supported")
        arg = arg.expressions[0]
    if isinstance(arg, exp.Star):
        return None, distinct
    return arg, distinct


def _fold_filter(node: exp.Expr) -> exp.Expr:
    """`agg(x) FILTER (WHERE p)` as `agg(CASE WHEN p THEN x END)` — every aggregate ignores
    NULLs, so this is PostgreSQL's meaning (`count(*)` counts `CASE WHEN p THEN 1 END`)."""
    if not isinstance(node, exp.Filter):
        return node
    where = node.expression
    cond = where.this if isinstance(where, exp.Where) else where
    agg: exp.Expr = node.this.copy()
    arg = agg.this
    order = arg if isinstance(arg, exp.Order) else None
    if order is not None:
        arg = order.this
    distinct = isinstance(arg, exp.Distinct)
    inner = arg.expressions[0] if distinct and len(arg.expressions) == 1 else arg
    if isinstance(inner, exp.Star):
        inner = exp.Literal.number(1)
    if inner is None or (distinct and len(arg.expressions) != 1):
        return agg  # refused where the aggregate is planned
    guarded: exp.Expr = exp.Case(ifs=[exp.If(this=cond.copy(), true=inner.copy())])
    new_arg: exp.Expr = exp.Distinct(expressions=[guarded]) if distinct else guarded
    if order is not None:
        keys = [k.copy() for k in order.expressions]
        for k in keys:
            if node_key(k.this) == node_key(inner):
                k.set("this", guarded.copy())
        new_arg = exp.Order(this=new_arg, expressions=keys)
    agg.set("this", new_arg)
    return agg


def _string_agg_options(binder: Binder, node: exp.GroupConcat, arg: exp.Expr
                        ) -> tuple[str, bool]:
    """`string_agg`'s separator (a text constant or parameter) and whether its ORDER BY is
    descending (it may only order by the aggregated value itself)."""
    sep_node = node.args.get("separator")
    if sep_node is None:
        raise SqlSyntaxError("string_agg takes two arguments: string_agg(value, separator)")
    sep, scalar, _ = binder.bind(sep_node)
    if not isinstance(sep, PLiteral) or scalar not in ("str", NULL):
        raise FeatureNotSupported("string_agg's separator must be a text constant")
    desc = False
    order = node.this
    if isinstance(order, exp.Order):
        keys = order.expressions
        if len(keys) != 1 or node_key(keys[0].this) != node_key(arg):
            raise FeatureNotSupported("string_agg(... ORDER BY ...) is only supported ordered "
                                      "by the aggregated value itself")
        desc = bool(keys[0].args.get("desc"))
    return ("" if sep.value is None else str(sep.value)), desc


def plan_aggregate(planner: Planner, rel: Rel, node: exp.Select, items: list[exp.Expr],
                   aggs: list[exp.Expr], outer: Outer | None, corr: Rel | None
                   ) -> tuple[Rel, AggContext]:
    """Group `rel`; the result has the correlation columns, the group keys, then one column
    per aggregate."""
    pre = Scope(rel, outer)
    binder = Binder(planner, pre, clause="GROUP BY")
    ncorr = len(corr.cols) if corr is not None else 0
    corr_pos = [i for i, c in enumerate(rel.cols) if c.corr is not None][:ncorr]
    group_nodes: list[exp.Expr] = []
    group = node.args.get("group")
    for g in (group.expressions if group is not None else []):
        if isinstance(g, exp.Literal) and not g.is_string:
            k = int(g.this)
            if not 1 <= k <= len(items):
                raise SqlSyntaxError(f"GROUP BY position {k} is not in select list")
            g = items[k - 1].this if isinstance(items[k - 1], exp.Alias) else items[k - 1]
        elif isinstance(g, exp.Column) and not g.table:
            aliased = [i.this for i in items if isinstance(i, exp.Alias) and i.alias == g.name]
            if aliased and pre.find(None, g.name) is None:
                g = aliased[0]
        group_nodes.append(g)
    maps: list[PExpr] = []
    cols = list(rel.cols)

    def position(b: B) -> int:
        e, s, n = b
        if isinstance(e, Column):
            return e.index
        maps.append(e)
        cols.append(Col("?expr?", s, n, hidden=True))
        return len(cols) - 1

    key_pos = list(corr_pos)
    key_nodes: list[exp.Expr | None] = [None] * len(corr_pos)
    for g in group_nodes:
        key_pos.append(position(binder.bind(g)))
        key_nodes.append(g)
    agg_specs: list[tuple[str, int | None, bool, str, bool]] = []
    extra: dict[int, tuple[str, bool]] = {}  # string_agg's (separator, descending)
    for a0 in aggs:
        a = _fold_filter(a0)
        arg, distinct = _agg_input(binder, a)
        name = output_name(a0)
        if isinstance(a, exp.GroupConcat) and arg is not None:
            extra[len(agg_specs)] = _string_agg_options(binder, a, arg)
        if arg is None:
            if not isinstance(a, exp.Count):
                raise FeatureNotSupported(f"{name}(*) is not supported")
            agg_specs.append(("count", None, False, "int", False))
            continue
        b = binder.bind(arg)
        s = b[1]
        if isinstance(a, (exp.Sum, exp.Avg, *_VARIANCE_NODES)) and s not in ("int", "float", NULL):
            from twofold.sql.errors import UndefinedFunction
            from twofold.sql.types import type_name

            raise UndefinedFunction(f"function {name}({type_name(s)}) does not exist")
        if isinstance(a, exp.GroupConcat) and s not in ("str", NULL):
            from twofold.sql.errors import UndefinedFunction
            from twofold.sql.types import type_name

            raise UndefinedFunction(f"function string_agg({type_name(s)}, text) does not "
                                    "exist")
        if isinstance(a, exp.LogicalAnd | exp.LogicalOr) and s not in ("bool", NULL):
            from twofold.sql.errors import UndefinedFunction
            from twofold.sql.types import type_name

            raise UndefinedFunction(f"function {name}({type_name(s)}) does not exist")
        pos = position(b)
        func = _AGGREGATE_FUNCS.get(type(a))
        if func is None:
            raise FeatureNotSupported(f"aggregate {name}() is not supported")
        if func == "string_agg" and s == NULL:
            # string_agg(NULL, ...) is NULL: aggregate a text NULL.
            maps.append(typed_null("str"))
            cols.append(Col("?expr?", "str", True, hidden=True))
            pos, s = len(cols) - 1, "str"
        scalar = "int" if func == "count" else "float" if func in _VARIANCE_FUNCS else s
        agg_specs.append((func, pos, distinct, scalar, True))
    if binder.scope.rel is not rel:
        raise FeatureNotSupported("subqueries in GROUP BY or aggregate arguments are not "
                                  "supported")
    plan: Any = Mfp(input=rel.plan, map=maps) if maps else rel.plan
    aggregates: list[Aggregate] = []
    slots: list[tuple[int, ...]] = []
    for i, (func, col_pos, distinct, _, _) in enumerate(agg_specs):
        if func == "string_agg":
            sep, desc = extra[i]
            slots.append((len(aggregates),))
            aggregates.append(Aggregate(func="string_agg", column=col_pos, distinct=distinct,
                                        separator=sep, desc=desc))
        elif func == "avg":
            slots.append((len(aggregates), len(aggregates) + 1))
            aggregates.append(Aggregate(func="sum", column=col_pos, distinct=distinct))
            aggregates.append(Aggregate(func="count", column=col_pos, distinct=distinct))
        else:
            slots.append((len(aggregates),))
            engine_func = _VARIANCE_FUNCS.get(func, func)
            aggregates.append(Aggregate(func=engine_func, column=col_pos, distinct=distinct))  # type: ignore[arg-type]
    nk = len(key_pos)
    plan = Reduce(input=plan, group_key=key_pos, aggregates=aggregates)
    reduced_types = [cols[k].column_type for k in key_pos]
    for ag in aggregates:
        src = cols[ag.column] if ag.column is not None else None
        if ag.func == "count":
            reduced_types.append(Col("n", "int", False).column_type)
        elif ag.func in ("var_samp", "var_pop"):
            reduced_types.append(Col("v", "float", True).column_type)
        else:
            assert src is not None
            reduced_types.append(replace(src, nullable=True).column_type)
    if not group_nodes and corr is not None:
        # The engine gives a global aggregate its one row over no input; per correlation
        # binding that row must come from the bindings themselves.
        plan, reduced_types = _one_row_per_binding(plan, reduced_types, corr, ncorr)
    # Finish: counts of a padded (empty) group are 0; avg = sum / count.
    padded = not group_nodes and corr is not None  # rows where a binding had no input
    finish: list[PExpr] = []
    out_cols = [replace(cols[k], hidden=cols[k].hidden) for k in key_pos]
    for (func, src_pos, _, s, _), slot, a in zip(agg_specs, slots, aggs, strict=True):
        if func == "avg":
            total = call("cast_float", Column(index=nk + slot[0]))
            n: PExpr = Column(index=nk + slot[1])
            finish.append(call("if", call("eq", n, PLiteral(value=0)), PLiteral(value=None),
                               call("div", total, call("cast_float", n))))
            out_cols.append(Col(output_name(a), "float", True, hidden=True))
        elif func in _VARIANCE_FUNCS:
            v: PExpr = Column(index=nk + slot[0])
            finish.append(call("sqrt", v) if func.startswith("stddev") else v)
            out_cols.append(Col(output_name(a), "float", True, hidden=True))
        elif func == "count":
            c: PExpr = Column(index=nk + slot[0])
            finish.append(call("coalesce", c, PLiteral(value=0)) if padded else c)
            out_cols.append(Col(output_name(a), "int", False, hidden=True))
        else:
            finish.append(Column(index=nk + slot[0]))
            # NULL only where a group has no non-NULL value: a global aggregate over no rows,
            # or a nullable input.
            nullable = not group_nodes or src_pos is None or cols[src_pos].nullable
            out_cols.append(Col(output_name(a), "int" if s == NULL else s, nullable,
                                hidden=True))
    width = nk + len(aggregates)
    if all(isinstance(f, Column) for f in finish):
        # Nothing to compute (no avg, no padding): keep the Reduce's columns as they are.
        project = [*range(nk), *(f.index for f in finish if isinstance(f, Column))]
        if project != list(range(width)):
            plan = Mfp(input=plan, project=project)
    else:
        plan = Mfp(input=plan, map=finish,
                   project=[*range(nk), *range(width, width + len(finish))])
    post = Rel(plan, out_cols, rel.inputs)
    ctx = AggContext(pre=pre)
    for j, (k, g) in enumerate(zip(key_pos, key_nodes, strict=True)):
        if k < len(rel.cols):
            ctx.cols[k] = j
        if g is not None:
            ctx.exprs[node_key(g)] = j
    for j, a in enumerate(aggs):
        ctx.exprs[node_key(a)] = nk + j
    return post, ctx


def _one_row_per_binding(plan: Any, types: list[Any], corr: Rel, ncorr: int
                         ) -> tuple[Any, list[Any]]:
    """A correlated global aggregate's result left-joined to its bindings: one row per
    binding even where no input row exists (the aggregates NULL there, counts 0 after)."""
    nagg = len(types) - ncorr
    bplan, bkey, btypes = nullsafe_key(corr.plan, corr.types, range(ncorr))
    rplan, rkey, rtypes = nullsafe_key(plan, types, range(ncorr))
    joined = left_join_on(bplan, btypes, rplan, rtypes, bkey, rkey)
    nb = len(btypes)
    project = [*range(ncorr), *range(nb + ncorr, nb + ncorr + nagg)]
    return Mfp(input=joined, project=project), types


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
    aggs = _aggregates([*items, *([having] if having is not None else []), *order_exprs,
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
    for name, (_, s, n) in zip(names, bound, strict=True):
        out_cols.append(Col(name, s, n))
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
    if isinstance(e, exp.Literal) and not e.is_string:
        k = int(e.this)
        if not 1 <= k <= len(names):
            raise SqlSyntaxError(f"{what} position {k} is not in select list")
        return k - 1
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
        if isinstance(e, exp.Literal) and not e.is_string:
            k = int(e.this)
            if not 1 <= k <= len(names):
                raise SqlSyntaxError(f"ORDER BY position {k} is not in select list")
            pos = ncorr + k - 1
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
