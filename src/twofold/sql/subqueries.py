"""Subqueries in expressions, decorrelated into joins (never evaluated per row).

Contract: a subquery is planned once per *distinct binding* of the outer columns it references,
the way Materialize lowers them: its correlated references are found by planning it once
against a recording scope (`Outer`), then it is planned again with the distinct outer bindings
`D = distinct(π_refs outer)` as an extra FROM item, so its result carries those columns first.
The result is then left-joined back to the outer relation on them (NULL-safely), appending one
column; the outer rows' multiplicities are unchanged.

- scalar `(SELECT v ...)`: each binding's rows are counted; a binding with more than one row
  makes `error('more than one row returned by a subquery used as an expression')` (an
  evaluation error at that time, SQLSTATE 21000); no row gives NULL.
- `EXISTS (...)`: `true` where the binding has a row, else `false`.
- `x IN (SELECT y ...)`: `true` if some `y = x`; else NULL if the subquery has rows and `x` is
  NULL or some `y` is NULL; else `false` — so `NOT IN` with a NULL in the subquery keeps no
  rows, as in PostgreSQL.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlglot import exp

from twofold.api.joins import left_join_on, nullsafe_key, typed_null
from twofold.engine.expr import columns_of
from twofold.protocol import Aggregate, Column, ColumnType, Constant, Distinct, Join, Mfp, Reduce
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.errors import SUBQUERY_ROWS, SqlSyntaxError
from twofold.sql.exprs import B, Binder, call, unify
from twofold.sql.pgtypes import Typed
from twofold.sql.scope import Col, Outer, Rel

TRUE = PLiteral(value=True)


def plan_correlated(binder: Binder, node: exp.Expr) -> tuple[Rel, list[int]]:
    """The subquery's relation (correlation columns first) and the outer columns they are."""
    planner = binder.planner
    outer = Outer(binder.scope)
    sub = planner.plan_query(node, outer=outer)
    used = list(outer.used)
    if not used or -1 in used:
        # Uncorrelated — or nested inside a subquery whose own correlation is still being
        # found, where this plan is only a draft and is discarded.
        return sub, []
    orel = _source(binder, used)
    d_cols = [replace(orel.cols[i], corr=i, hidden=True) for i in used]
    d = Rel(Distinct(input=Mfp(input=orel.plan, project=used)), d_cols, dict(orel.inputs))
    sub = planner.plan_query(node, outer=Outer(binder.scope), corr=d)
    return sub, used


def _source(binder: Binder, cols: list[int]) -> Rel:
    """Where the distinct bindings of `cols` are read from: the relation as it was before
    this expression's first subquery was attached, when `cols` are all its columns — so each
    further subquery adds a copy of that relation, not of everything attached so far (plans
    are trees: reading the attached relation would double the plan per subquery)."""
    base = binder.base
    if base is None:
        base = binder.base = binder.scope.rel
    return base if all(i < len(base.cols) for i in cols) else binder.scope.rel


def _attach(binder: Binder, right: Any, rtypes: list[Any], k: int, used: list[int],
            width: int, lextra: tuple[int, ...] = (), rextra: tuple[int, ...] = (),
            start: int | None = None, lextra_exprs: tuple[PExpr, ...] = (),
            total: bool = False) -> int:
    """Extend the scope's relation with `right[start : start + width]` (`start` defaults to
    `k`), matching `used ↔ right[0..k)` NULL-safely plus `lextra ↔ rextra` as plain keys;
    NULL where `right` has no row (it has at most one per key). Returns the index of the first
    appended column.

    The outer relation is read once: the distinct keys `D` are left-joined to `right` (one
    row per key, padded), and the outer relation inner-joins that NULL-safely on the keys.
    With `total`, `right` already has exactly one row per key of the outer relation."""
    start = k if start is None else start
    orel = binder.scope.rel
    n = len(orel.cols)
    bool_t = Col("?", "bool", False).column_type
    keys = [*used, *lextra]
    if total:
        tot: Any = Mfp(input=right, project=[*range(len(keys)), *range(start, start + width)])
        ttypes = [*rtypes[:len(keys)], *rtypes[start:start + width]]
        lplan, lk, _ = nullsafe_key(orel.plan, orel.types, keys)
        tplan, tk, _ = nullsafe_key(tot, ttypes, range(len(keys)))
        n_left = n + _added(orel.types, keys)
        joined: Any = Mfp(input=Join(left=lplan, right=tplan, left_key=lk, right_key=tk),
                          project=[*range(n), *range(n_left + len(keys),
                                                     n_left + len(keys) + width)])
    elif not keys:
        total_: Any = left_join_on(Constant(rows=[([True], 1)]), [bool_t],
                                  Mfp(input=right, map=[TRUE]), [*rtypes, bool_t],
                                  [0], [len(rtypes)])
        total_ = Mfp(input=total_, project=list(range(1 + start, 1 + start + width)))
        joined = Join(left=orel.plan, right=total_, left_key=[], right_key=[])
    else:
        src = _source(binder, [*used, *columns_of(*lextra_exprs)])
        if src is binder.scope.rel or not lextra_exprs:
            d = Distinct(input=Mfp(input=src.plan, project=keys))
        else:
            # The extra keys' expressions read only the base's columns: compute them there.
            ns = len(src.cols)
            d = Distinct(input=Mfp(input=src.plan, map=list(lextra_exprs),
                                   project=[*used, *range(ns, ns + len(lextra_exprs))]))
        dtypes = [orel.types[i] for i in keys]
        dplan, dk, dt = nullsafe_key(d, dtypes, range(k))
        rplan, rk, rt = nullsafe_key(right, rtypes, range(k))
        dk, rk = dk + list(range(k, len(keys))), rk + list(rextra)
        padded = left_join_on(dplan, dt, rplan, rt, dk, rk)
        nd = len(dt)
        total_ = Mfp(input=padded, project=[*range(len(keys)),
                                            *range(nd + start, nd + start + width)])
        ttypes = [*dtypes, *[ColumnType(t.scalar, True) for t in rtypes[start:start + width]]]
        lplan, lk, _ = nullsafe_key(orel.plan, orel.types, keys)
        tplan, tk, _ = nullsafe_key(total_, ttypes, range(len(keys)))
        joined = Join(left=lplan, right=tplan, left_key=lk, right_key=tk)
        n_left = n + _added(orel.types, keys)
        joined = Mfp(input=joined, project=[*range(n), *range(n_left + len(keys),
                                                              n_left + len(keys) + width)])
    new_cols = [Col("?subquery?", t.scalar, True, hidden=True)
                for t in rtypes[start:start + width]]
    binder.scope.rel = Rel(joined, orel.cols + new_cols, {**orel.inputs})
    return n


def _added(types: list[Any], cols: list[int]) -> int:
    """How many helper columns `nullsafe_key` appends for `cols`."""
    return 2 * sum(1 for c in cols if types[c].nullable)


def _merge_inputs(binder: Binder, sub: Rel) -> None:
    binder.scope.rel.inputs.update(sub.inputs)


def _one_column(sub: Rel, k: int, what: str) -> None:
    if len(sub.cols) - k != 1:
        raise SqlSyntaxError(f"subquery {what} must return only one column, got "
                             f"{len(sub.cols) - k}")


def scalar_subquery(binder: Binder, node: exp.Expr) -> B:
    sub, used = plan_correlated(binder, node)
    k = len(used)
    _one_column(sub, k, "used as an expression")
    value = sub.cols[k]
    if _one_row_per_binding(node):
        # A global aggregate: exactly one row per binding already, nothing to check or pad.
        at = _attach(binder, sub.plan, sub.types, k, used, 1, total=True)
        _merge_inputs(binder, sub)
        return Typed(Column(index=at), value.scalar, value.nullable, value.pg)
    counts = Reduce(input=sub.plan, group_key=list(range(k)),
                    aggregates=[Aggregate(func="count")])
    ctypes = [*sub.types[:k], Col("n", "int", False).column_type]
    if k == 0:
        splan: Any = Mfp(input=sub.plan, map=[TRUE])
        stypes = [*sub.types, Col("?", "bool", False).column_type]
        cplan: Any = Mfp(input=counts, map=[TRUE])
        cwidth, skey, ckey = 2, [len(sub.types)], [1]
    else:
        splan, skey, stypes = nullsafe_key(sub.plan, sub.types, range(k))
        cplan, ckey, ctypes_all = nullsafe_key(counts, ctypes, range(k))
        cwidth = len(ctypes_all)
    joined = Join(left=splan, right=cplan, left_key=skey, right_key=ckey)
    n = Column(index=len(stypes) + k)
    checked = call("if", call("gt", n, PLiteral(value=1)), call("error", PLiteral(
        value=SUBQUERY_ROWS)), Column(index=k))
    right = Mfp(input=joined, map=[checked], project=[*range(k), len(stypes) + cwidth])
    rtypes = [*sub.types[:k], value.column_type]
    at = _attach(binder, right, rtypes, k, used, 1)
    _merge_inputs(binder, sub)
    return Typed(Column(index=at), value.scalar, True, value.pg)


def _one_row_per_binding(node: exp.Expr) -> bool:
    """Whether a subquery is a global aggregate (one row per binding, `select.py`)."""
    from twofold.sql.aggregate import aggregate_calls

    if isinstance(node, exp.Subquery):
        node = node.this
    if not isinstance(node, exp.Select):
        return False
    if any(node.args.get(a) for a in ("group", "having", "limit", "offset", "distinct")):
        return False
    return bool(aggregate_calls(list(node.expressions)))


def _marker(sub: Rel, k: int, filter: list[PExpr] | None = None,
            extra: tuple[int, ...] = ()) -> tuple[Any, list[Any]]:
    """`distinct(π_{corr, extra, true} σ sub)`: one marker row per binding (and extra)."""
    keep = [*range(k), *extra]
    n = len(sub.cols)
    base = Mfp(input=sub.plan, filter=filter or [], map=[TRUE], project=[*keep, n])
    types = [sub.types[i] for i in keep] + [Col("?", "bool", False).column_type]
    return Distinct(input=base), types


def exists_subquery(binder: Binder, node: exp.Expr) -> B:
    sub, used = plan_correlated(binder, node)
    k = len(used)
    plan, types = _marker(sub, k)
    at = _attach(binder, plan, types, k, used, 1)
    _merge_inputs(binder, sub)
    return call("coalesce", Column(index=at), PLiteral(value=False)), "bool", False


def in_subquery(binder: Binder, left: exp.Expr, query: exp.Expr) -> B:
    ex, sx, nx = binder.bind(left)
    if binder.base is None:
        binder.base = binder.scope.rel
    if isinstance(ex, Column):
        xcol = ex.index
    else:
        orel = binder.scope.rel
        binder.scope.rel = Rel(Mfp(input=orel.plan, map=[ex]),
                               [*orel.cols, Col("?in?", sx, nx, hidden=True)], orel.inputs)
        xcol = len(orel.cols)
    sub, used = plan_correlated(binder, query)
    k = len(used)
    _one_column(sub, k, "in IN")
    y = sub.cols[k]
    unify(None, [sx, y.scalar], "=")
    not_null: list[PExpr] = [call("not", call("is_null", Column(index=k)))]
    match_plan, match_types = _marker(sub, k, not_null, (k,))
    # The match join: correlation columns NULL-safely, then x = y (NULLs never match).
    m1 = _attach(binder, match_plan, match_types, k, used, 1, (xcol,), (k,), start=k + 1,
                 lextra_exprs=(ex,))
    _merge_inputs(binder, sub)
    found = call("coalesce", Column(index=m1), PLiteral(value=False))
    if not y.nullable and not nx:
        return found, "bool", False
    ne_plan, ne_types = _marker(sub, k)
    m3 = _attach(binder, ne_plan, ne_types, k, used, 1)
    nonempty = call("coalesce", Column(index=m3), PLiteral(value=False))
    unknown: PExpr = call("is_null", Column(index=xcol))
    if y.nullable:
        is_null: list[PExpr] = [call("is_null", Column(index=k))]
        null_plan, null_types = _marker(sub, k, is_null)
        m2 = _attach(binder, null_plan, null_types, k, used, 1)
        has_null = call("coalesce", Column(index=m2), PLiteral(value=False))
        unknown = call("or", unknown, has_null)
    maybe = call("if", call("and", nonempty, unknown), typed_null("bool"), PLiteral(value=False))
    return call("if", found, TRUE, maybe), "bool", True
