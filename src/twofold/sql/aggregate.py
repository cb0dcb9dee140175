"""Planning GROUP BY, HAVING's and the SELECT list's aggregates into a `Reduce` (part of
`twofold.sql.select`).

Contract (PostgreSQL's rules): a column used outside an aggregate must be grouped
(`GroupingError`); `GROUP BY` takes expressions, output positions or output names. A query with
aggregates and no GROUP BY returns exactly one row even over no input (`count` 0, the others
NULL): the engine's Reduce gives that row; inside a correlated subquery the aggregate is
left-joined to the distinct outer bindings, so `(SELECT count(*) ... WHERE t.a = outer.a)` is
0 where nothing matches. `avg` is `sum / count` as a double; `bool_and`/`bool_or` are
`min`/`max` of booleans; `var_samp`/`variance`, `var_pop` and the `stddev` forms are the
engine's variances (the square root taken after). `string_agg(x, sep)` joins the non-NULL
values in ascending order (a valid order for PostgreSQL's unspecified one); `ORDER BY x [DESC]`
inside it is honoured, an order by anything else is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from twofold.api.joins import left_join_on, nullsafe_key, typed_null
from twofold.protocol import Aggregate, Column, Mfp, Reduce
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.errors import FeatureNotSupported, SqlSyntaxError
from twofold.sql.exprs import AGGREGATES, AggContext, B, Binder, call, node_key
from twofold.sql.names import output_name, position_of
from twofold.sql.pgtypes import base, col_pg, is_numeric, narrow
from twofold.sql.scope import NULL, Col, Outer, Rel, Scope

if TYPE_CHECKING:
    from twofold.sql.planner import Planner

_VARIANCES: dict[type[exp.Expr], str] = {
    exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp", exp.StddevPop: "stddev_pop",
    exp.Variance: "var_samp", exp.VariancePop: "var_pop"}
_AGGREGATE_FUNCS: dict[type[exp.Expr], str] = {
    exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Min: "min", exp.Max: "max",
    exp.LogicalAnd: "min", exp.LogicalOr: "max", exp.GroupConcat: "string_agg", **_VARIANCES}
_VARIANCE_NODES = (exp.Stddev, exp.StddevSamp, exp.StddevPop, exp.Variance, exp.VariancePop)
_VARIANCE_FUNCS = {"stddev_samp": "var_samp", "stddev_pop": "var_pop", "var_samp": "var_samp",
                   "var_pop": "var_pop"}  # SQL aggregate -> the engine's


def aggregate_calls(nodes: list[exp.Expr]) -> list[exp.Expr]:
    """Aggregate calls in `nodes`, outside subqueries, by first appearance."""
    out: dict[Any, exp.Expr] = {}

    def walk(n: exp.Expr) -> None:
        if isinstance(n, exp.Subquery | exp.Exists | exp.Select):
            return
        if isinstance(n, exp.Window):
            # `sum(x) OVER (...)` holds an aggregate call but is no aggregate of the query:
            # refused here, before the grouping checks would misreport it.
            raise FeatureNotSupported("window functions are not supported")
        if isinstance(n, exp.Filter) and isinstance(n.this, AGGREGATES):
            out.setdefault(node_key(n), n)
            return
        if isinstance(n, AGGREGATES):
            out.setdefault(node_key(n), n)
            return
        for child in n.iter_expressions():
            walk(child)

    for n in nodes:
        walk(n)
    return list(out.values())


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
        k = position_of(g, len(items), "GROUP BY")
        if k is not None:
            g = items[k].this if isinstance(items[k], exp.Alias) else items[k]
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
        cols.append(Col("?expr?", s, n, hidden=True, pg=col_pg(b)))
        return len(cols) - 1

    key_pos = list(corr_pos)
    key_nodes: list[exp.Expr | None] = [None] * len(corr_pos)
    for g in group_nodes:
        key_pos.append(position(binder.bind(g)))
        key_nodes.append(g)
    agg_specs: list[tuple[str, int | None, bool, str, bool]] = []
    extra: dict[int, tuple[str, bool]] = {}  # string_agg's (separator, descending)
    numeric_avgs: set[int] = set()  # the avgs PostgreSQL types numeric (of integers)
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
        if isinstance(a, exp.Avg) and (s == "int" or is_numeric(b)):
            numeric_avgs.add(len(agg_specs))  # PostgreSQL's avg of them is numeric
        if isinstance(a, exp.Avg) and s == "int" and not distinct:
            # PostgreSQL averages integers in numeric, so no sum is out of range: average
            # them as doubles (exact sums; each value exact below 2^53). DISTINCT keeps the
            # integers, whose distinctness a double could lose.
            b, s = (call("cast_float", b[0]), "float", b[2]), "float"
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
    for i, ((func, src_pos, _, s, _), slot, a) in enumerate(zip(agg_specs, slots, aggs,
                                                               strict=True)):
        src_pg = cols[src_pos].pg if src_pos is not None else None
        if func == "avg":
            total = call("cast_float", Column(index=nk + slot[0]))
            n: PExpr = Column(index=nk + slot[1])
            # PostgreSQL's avg adds the values to 0.0, so it is never -0.0 (a sum can be).
            total = call("if", call("eq", total, PLiteral(value=0.0)), PLiteral(value=0.0), total)
            finish.append(call("if", call("eq", n, PLiteral(value=0)), PLiteral(value=None),
                               call("fdiv", total, call("cast_float", n))))
            # numeric only inside this query's expressions (round(avg(k)) rounds as numeric);
            # the result column is a double (`pgtypes.col_pg`)
            out_cols.append(Col(output_name(a), "float", True, hidden=True,
                                pg="numeric" if i in numeric_avgs else None))
        elif func in _VARIANCE_FUNCS:
            v: PExpr = Column(index=nk + slot[0])
            finish.append(call("sqrt", v) if func.startswith("stddev") else v)
            out_cols.append(Col(output_name(a), "float", True, hidden=True))
        elif func == "count":
            c: PExpr = Column(index=nk + slot[0])
            finish.append(call("coalesce", c, PLiteral(value=0)) if padded else c)
            out_cols.append(Col(output_name(a), "int", False, hidden=True))
        else:
            # min/max of an int2/int4/real is of its type (of varchar: text, as PostgreSQL's
            # min(text)); sum of int2/int4 is int8 (as in PostgreSQL), of real real: the
            # exact sum rounded to single precision (22003 when that overflows).
            pg = src_pg if func in ("min", "max") or (func == "sum" and src_pg == "float4") \
                else None
            pg = pg if pg in ("int2", "int4", "float4") or (
                func in ("min", "max") and base(pg) == "bpchar") else None  # padded when sent
            result: PExpr = Column(index=nk + slot[0])
            finish.append(narrow(result, pg) if func == "sum" else result)
            # NULL only where a group has no non-NULL value: a global aggregate over no rows,
            # or a nullable input.
            nullable = not group_nodes or src_pos is None or cols[src_pos].nullable
            out_cols.append(Col(output_name(a), "int" if s == NULL else s, nullable,
                                hidden=True, pg=pg))
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
