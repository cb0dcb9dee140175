"""The FROM clause: tables, derived tables, CTEs, and joins ordered to avoid cross products.

Contract: `plan_from(planner, select, outer, corr, conjuncts)` returns the relation of the FROM
clause and the WHERE conjuncts it did not use. Runs of inner and comma joins are planned
together with their ON and WHERE conjuncts: a conjunct over one item filters that item before
any join; an equality between an expression of one item and one of another is a join key; the
join order is greedy — start from the first item, then always join an item connected to what is
joined by at least one equality (in FROM order), and take a cross product only when no item is
connected. Other conjuncts apply as soon as every item they name is joined. `LEFT`/`RIGHT`/
`FULL` joins are planned in syntactic order with `twofold.api.joins` (equality conjuncts of ON as
keys, the rest as a residual, conjuncts over only the NULL-supplying side pushed into it); with
an outer join in the FROM clause, WHERE is applied after the whole clause. `USING` and `NATURAL`
merge the named columns (`COALESCE` of both for `FULL`).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from twofold.api.joins import outer_join
from twofold.protocol import ColumnType, Distinct, Join, Mfp
from twofold.protocol import Expr as PExpr
from twofold.sql.errors import FeatureNotSupported, UndefinedColumn
from twofold.sql.exprs import Binder, call, unify
from twofold.sql.scope import Col, Outer, Rel, Scope
from twofold.sql.types import unify_declared

if TYPE_CHECKING:
    from twofold.sql.planner import Planner

_ITEMS = itertools.count(1)


def conjuncts(node: exp.Expr | None) -> list[exp.Expr]:
    """The AND-ed parts of a condition."""
    if node is None:
        return []
    if isinstance(node, exp.And):
        return conjuncts(node.this) + conjuncts(node.expression)
    if isinstance(node, exp.Paren):
        return conjuncts(node.this)
    if isinstance(node, exp.Between) and not node.args.get("symmetric"):
        # PostgreSQL's `x BETWEEN a AND b` is `x >= a AND x <= b`, two quals of the scan: the
        # second is not evaluated where the first is not true (NULL included).
        return [exp.GTE(this=node.this, expression=node.args["low"]),
                exp.LTE(this=node.this.copy(), expression=node.args["high"])]
    return [node]


def cross(a: Rel, b: Rel) -> Rel:
    return Rel(Join(left=a.plan, right=b.plan, left_key=[], right_key=[]), a.cols + b.cols,
               {**a.inputs, **b.inputs})


def filtered(planner: Planner, rel: Rel, conds: list[exp.Expr], outer: Outer | None) -> Rel:
    """`rel` filtered by `conds` (bound over it; subqueries may extend it first)."""
    if not conds:
        return rel
    binder = Binder(planner, Scope(rel, outer), clause="WHERE")
    preds = [binder.condition(c, "WHERE") for c in conds]
    rel = binder.scope.rel
    return Rel(Mfp(input=rel.plan, filter=preds), rel.cols, rel.inputs)


def _key_column(planner: Planner, rel: Rel, node: exp.Expr, outer: Outer | None
                ) -> tuple[Rel, int, str]:
    binder = Binder(planner, Scope(rel, outer), clause="JOIN")
    e, scalar, nullable = binder.bind(node)
    from twofold.protocol import Column

    if isinstance(e, Column):
        return rel, e.index, scalar
    cols = [*rel.cols, Col("?key?", scalar, nullable, hidden=True)]
    return Rel(Mfp(input=rel.plan, map=[e]), cols, rel.inputs), len(rel.cols), scalar


def keyed_join(planner: Planner, left: Rel, right: Rel, pairs: list[tuple[exp.Expr, exp.Expr]],
               outer: Outer | None) -> Rel:
    """Inner equi-join of `left` and `right` on `(left expr, right expr)` pairs."""
    nl, nr = len(left.cols), len(right.cols)
    lk: list[int] = []
    rk: list[int] = []
    for a, b in pairs:
        left, i, sa = _key_column(planner, left, a, outer)
        right, j, sb = _key_column(planner, right, b, outer)
        unify(None, [sa, sb], "=")
        lk.append(i)
        rk.append(j)
    plan: Any = Join(left=left.plan, right=right.plan, left_key=lk, right_key=rk)
    if len(left.cols) != nl or len(right.cols) != nr:
        nl2 = len(left.cols)
        plan = Mfp(input=plan, project=[*range(nl), *range(nl2, nl2 + nr)])
    return Rel(plan, left.cols[:nl] + right.cols[:nr], {**left.inputs, **right.inputs})


def _matches(col: Col, qual: str | None, name: str) -> bool:
    if col.name != name:
        return False
    if col.corr is not None:
        return qual is None or col.qual == qual
    return col.qual == qual if qual else not col.hidden


def _refs(node: exp.Expr, items: list[Rel]) -> set[int] | None:
    """Which items a conjunct reads; None if it has a subquery or a name no item has."""
    if node.find(exp.Subquery, exp.Exists, exp.Select) is not None:
        return None
    out: set[int] = set()
    for c in node.find_all(exp.Column):
        qual = c.table or None
        hits = [k for k, it in enumerate(items) if any(_matches(col, qual, c.name)
                                                        for col in it.cols)]
        if len(hits) != 1:
            return None
        out.add(hits[0])
    return out


def order_group(planner: Planner, items: list[Rel], conds: list[exp.Expr],
                outer: Outer | None) -> tuple[Rel, list[exp.Expr]]:
    """Join `items` with `conds` (see the module docstring); returns the unused conds."""
    rest: list[exp.Expr] = []
    single: dict[int, list[exp.Expr]] = {}
    edges: list[tuple[int, exp.Expr, int, exp.Expr, exp.Expr]] = []
    multi: list[tuple[set[int], exp.Expr]] = []
    for c in conds:
        refs = _refs(c, items)
        if not refs:
            rest.append(c)
        elif len(refs) == 1:
            single.setdefault(refs.pop(), []).append(c)
        else:
            lhs = _refs(c.this, items) if isinstance(c, exp.EQ) else None
            rhs = _refs(c.expression, items) if isinstance(c, exp.EQ) else None
            if lhs and rhs and len(lhs) == 1 and len(rhs) == 1 and lhs != rhs:
                edges.append((min(lhs), c.this, min(rhs), c.expression, c))
            else:
                multi.append((refs, c))
    items = [filtered(planner, it, single.get(k, []), outer) for k, it in enumerate(items)]
    joined = {0}
    rel = items[0]
    while len(joined) < len(items):
        linked = [j for j in range(len(items)) if j not in joined and any(
            (a in joined and b == j) or (b in joined and a == j) for a, _, b, _, _ in edges)]
        j = linked[0] if linked else min(set(range(len(items))) - joined)
        pairs: list[tuple[exp.Expr, exp.Expr]] = []
        for a, ea, b, eb, _ in edges:
            if a in joined and b == j:
                pairs.append((ea, eb))
            elif b in joined and a == j:
                pairs.append((eb, ea))
        rel = keyed_join(planner, rel, items[j], pairs, outer) if pairs else cross(rel, items[j])
        joined.add(j)
        ready = [c for refs, c in multi if refs <= joined]
        multi = [(refs, c) for refs, c in multi if not refs <= joined]
        closing = [c for a, _, b, _, c in edges if a in joined and b in joined and j not in (a, b)]
        edges = [e for e in edges if not (e[0] in joined and e[2] in joined)]
        rel = filtered(planner, rel, ready + closing, outer)
    for _, _, _, _, c in edges:
        rest.append(c)
    rest.extend(c for _, c in multi)
    return rel, rest


def plan_item(planner: Planner, node: exp.Expr, outer: Outer | None) -> Rel:
    """One FROM item: a table, view, CTE or derived table, under its alias."""
    item = next(_ITEMS)
    alias = node.args.get("alias")
    names = [c.name for c in alias.columns] if alias is not None and alias.columns else None
    if isinstance(node, exp.Table):
        if node.args.get("joins") or isinstance(node.this, exp.Func):
            raise FeatureNotSupported(f"table functions ({node.sql()[:40]}) are not supported")
        rel = planner.relation(node.name)
        return rel.with_qual(node.alias or node.name, names, item)
    if isinstance(node, exp.Subquery | exp.Values):
        if node.args.get("lateral") or isinstance(node, exp.Lateral):
            raise FeatureNotSupported("LATERAL is not supported")
        inner = node.this if isinstance(node, exp.Subquery) else node
        if isinstance(node, exp.Subquery) and (node.args.get("order") or node.args.get("limit")):
            inner = node
        rel = planner.plan_query(inner, None, None)
        return rel.with_qual(node.alias or None, names, item)
    if isinstance(node, exp.Lateral):
        raise FeatureNotSupported("LATERAL is not supported")
    raise FeatureNotSupported(f"{type(node).__name__} in FROM is not supported")


def _using(left: Rel, right: Rel, names: list[str], how: str) -> tuple[list[tuple[int, int]],
                                                                        list[str]]:
    pairs = []
    for n in names:
        li = [i for i, c in enumerate(left.cols) if c.name == n and not c.hidden]
        ri = [i for i, c in enumerate(right.cols) if c.name == n and not c.hidden]
        if len(li) != 1 or len(ri) != 1:
            side = "left" if len(li) != 1 else "right"
            what = "does not exist in" if not (li if side == "left" else ri) else \
                "appears more than once in"
            raise UndefinedColumn(f'column "{n}" specified in USING clause {what} {side} table')
        pairs.append((li[0], ri[0]))
    return pairs, names


def join_step(planner: Planner, left: Rel, right: Rel, join: exp.Join,
              outer: Outer | None, base: Rel | None = None) -> Rel:
    """`left <side> JOIN right ON/USING ...` for LEFT, RIGHT and FULL joins. `base` is the
    relation the chain of outer joins started from (a prefix of `left`'s columns)."""
    how = (join.side or "").lower()
    on = join.args.get("on")
    using = [u.name for u in join.args.get("using") or []]
    if join.method and join.method.upper() == "NATURAL":
        lnames = {c.name for c in left.cols if not c.hidden}
        using = [c.name for c in right.cols if not c.hidden and c.name in lnames]
    nl, nr = len(left.cols), len(right.cols)
    lk: list[int] = []
    rk: list[int] = []
    residual: list[PExpr] = []
    if using:
        pairs, _ = _using(left, right, using, how)
        lk, rk = [a for a, _ in pairs], [b for _, b in pairs]
    for c in conjuncts(on):
        refs = _refs(c, [left, right])
        if refs is None:
            raise FeatureNotSupported("subqueries in an outer join's ON are not supported")
        if (refs == {1} and how == "left") or (refs == {0} and how == "right"):
            side = 1 if how == "left" else 0
            if side:
                right = filtered(planner, right, [c], outer)
            else:
                left = filtered(planner, left, [c], outer)
            continue
        sides = (_refs(c.this, [left, right]), _refs(c.expression, [left, right])) if isinstance(
            c, exp.EQ) else (None, None)
        if sides[0] in ({0}, {1}) and sides[1] in ({0}, {1}) and sides[0] != sides[1]:
            a, b = (c.this, c.expression) if sides[0] == {0} else (c.expression, c.this)
            left, i, sa = _key_column(planner, left, a, outer)
            right, j, sb = _key_column(planner, right, b, outer)
            unify(None, [sa, sb], "=")
            lk.append(i)
            rk.append(j)
            continue
        # Over the columns both sides had before any key helper (an expression key adds
        # one at the end of its side, also before a later conjunct): shifted below.
        both = Rel(left.plan, left.cols[:nl] + right.cols[:nr])
        residual.append(Binder(planner, Scope(both, outer), clause="JOIN/ON").condition(c, "ON"))
    if len(left.cols) != nl:
        # Residuals were bound over the original left columns; key helpers came after them.
        residual = [_shift_right(e, nl, len(left.cols) - nl) for e in residual]
    if how == "left" and not residual and lk:
        plan = _left_join_by_bindings(left, right, lk, rk, base)
    else:
        plan = outer_join(left.plan, left.types, right.plan, right.types, lk, rk, how, residual)
    lcols = [replace(c, nullable=c.nullable or how in ("right", "full")) for c in left.cols]
    rcols = [replace(c, nullable=c.nullable or how in ("left", "full")) for c in right.cols]
    rel = Rel(plan, lcols + rcols, {**left.inputs, **right.inputs})
    if using:
        rel = _merge_using(rel, len(left.cols), lk, rk, how)
    return rel


def _left_join_by_bindings(left: Rel, right: Rel, lk: list[int], rk: list[int],
                           base: Rel | None) -> Any:
    """`left LEFT JOIN right ON lk = rk` as `left ⋈ T` with `T = D LEFT JOIN right` and `D` the
    distinct left keys: per key, its matches or one padded row, so `left` is read once. When the
    keys are columns of `base`, `D` reads `base`: a chain of left joins then grows linearly
    (plans are trees; the textbook lowering reads `left` three times, tripling per join)."""
    from twofold.api.joins import left_join_on, nullsafe_key

    src = base if base is not None and all(i < len(base.cols) for i in lk) else left
    k = len(lk)
    d: Any = Distinct(input=Mfp(input=src.plan, project=list(lk)))
    dtypes = [left.types[i] for i in lk]
    t = left_join_on(d, dtypes, right.plan, right.types, list(range(k)), rk)
    ttypes = [*dtypes, *[ColumnType(c.scalar, True) for c in right.types]]
    lplan, lkey, ltypes = nullsafe_key(left.plan, left.types, lk)
    tplan, tkey, _ = nullsafe_key(t, ttypes, range(k))
    nl, nr = len(left.cols), len(right.cols)
    joined = Join(left=lplan, right=tplan, left_key=lkey, right_key=tkey)
    return Mfp(input=joined, project=[*range(nl), *range(len(ltypes) + k,
                                                         len(ltypes) + k + nr)])


def _shift_right(e: PExpr, nl: int, by: int) -> PExpr:
    from twofold.protocol import Call, Column

    if isinstance(e, Column):
        return Column(index=e.index + by) if e.index >= nl else e
    if isinstance(e, Call):
        return Call(func=e.func, args=[_shift_right(a, nl, by) for a in e.args])
    return e


def _merge_using(rel: Rel, nl: int, lk: list[int], rk: list[int], how: str) -> Rel:
    cols = list(rel.cols)
    maps: list[PExpr] = []
    from twofold.protocol import Column

    for a, b in zip(lk, rk, strict=True):
        la, rb = cols[a], cols[nl + b]
        # The merged column's declared type is PostgreSQL's of the pair (int2 and int4: int4).
        pg = unify_declared([la.pg, rb.pg], [la.scalar, rb.scalar])
        if how == "full":
            maps.append(call("coalesce", Column(index=a), Column(index=nl + b)))
            cols.append(replace(la, qual=None, nullable=la.nullable and rb.nullable, pg=pg))
            cols[a] = replace(la, hidden=True)
            cols[nl + b] = replace(rb, hidden=True)
        elif how == "right":
            cols[a] = replace(la, hidden=True)
            cols[nl + b] = replace(rb, pg=pg)
        else:
            cols[a] = replace(la, pg=pg)
            cols[nl + b] = replace(rb, hidden=True)
    if not maps:
        return Rel(rel.plan, cols, rel.inputs)
    return Rel(Mfp(input=rel.plan, map=maps), cols, rel.inputs)


def plan_from(planner: Planner, select: exp.Select, outer: Outer | None, corr: Rel | None,
              where: list[exp.Expr]) -> tuple[Rel, list[exp.Expr]]:
    """The FROM clause's relation and the WHERE conjuncts left to apply."""
    from_ = select.args.get("from_") or select.args.get("from")
    group: list[Rel] = [corr] if corr is not None else []
    conds: list[exp.Expr] = []
    had_outer = False
    chain_base: Rel | None = None
    if from_ is not None:
        group.append(plan_item(planner, from_.this, outer))
    for join in select.args.get("joins") or []:
        right = plan_item(planner, join.this, outer)
        side = (join.side or "").upper()
        kind = (join.kind or "").upper()
        if kind in ("SEMI", "ANTI", "ASOF") or join.args.get("method") in ("ASOF",):
            raise FeatureNotSupported(f"{kind or 'this'} join is not supported")
        if side in ("LEFT", "RIGHT", "FULL"):
            left, unused = order_group(planner, group, conds, outer)
            left = filtered(planner, left, unused, outer)
            chain_base = chain_base if chain_base is not None else left
            group, conds = [join_step(planner, left, right, join, outer, chain_base)], []
            had_outer = True
            continue
        using = [u.name for u in join.args.get("using") or []]
        natural = join.method and join.method.upper() == "NATURAL"
        if using or natural:
            left, unused = order_group(planner, group, conds, outer)
            left = filtered(planner, left, unused, outer)
            join_inner = join.copy()
            group = [_inner_using(planner, left, right, join_inner, outer)]
            conds = []
            continue
        group.append(right)
        conds.extend(conjuncts(join.args.get("on")))
    if not group:
        from twofold.sql.planner import one_row

        group = [one_row()]
    if had_outer:
        rel, unused = order_group(planner, group, conds, outer)
        return filtered(planner, rel, unused, outer), list(where)
    return order_group(planner, group, conds + list(where), outer)


def _inner_using(planner: Planner, left: Rel, right: Rel, join: exp.Join,
                 outer: Outer | None) -> Rel:
    using = [u.name for u in join.args.get("using") or []]
    if join.method and join.method.upper() == "NATURAL":
        lnames = {c.name for c in left.cols if not c.hidden}
        using = [c.name for c in right.cols if not c.hidden and c.name in lnames]
    pairs, _ = _using(left, right, using, "inner")
    nl = len(left.cols)
    plan: Any = Join(left=left.plan, right=right.plan, left_key=[a for a, _ in pairs],
                     right_key=[b for _, b in pairs])
    cols = left.cols + right.cols
    for _, b in pairs:
        cols[nl + b] = replace(cols[nl + b], hidden=True)
    rel = Rel(plan, cols, {**left.inputs, **right.inputs})
    return filtered(planner, rel, conjuncts(join.args.get("on")), outer)
