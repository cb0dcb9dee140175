"""Planning SQL queries into protocol plans: the entry points, set operations, VALUES, CTEs.

Contract: `Planner(db, params).plan_top(node)` turns a bound query tree into a `Planned` — a
`Rel` (plan + columns + the stored inputs it reads), the `OrderKey`s its read is ordered by and
how many leading columns are visible (the rest are ORDER BY helpers). Every plan is built from
the same protocol nodes the Python DSL builds (`Get`, `Mfp`, `Join`, `Reduce`, `TopK`,
`UnionAll`, `Negate`, `Threshold`, `Distinct`, `Constant`), so a SQL query and the DSL query
it spells run identically. `UNION`/`INTERSECT`/`EXCEPT` without `ALL` remove duplicates;
`INTERSECT ALL` keeps each row `min(m, n)` times and `EXCEPT ALL` `max(m - n, 0)` times.
Column types of set operations and VALUES unify as PostgreSQL's do (int with float makes
float; a NULL-only column takes the other side's type), declared types too (int2 with int4
makes int4, int4 with real makes real: `types.unify_declared`). `declared_of(db, name, n)` is
an object's recorded declared column types.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from twofold.api.joins import intersect_all, typed_null
from twofold.protocol import (
    Constant,
    Distinct,
    GlobalId,
    Mfp,
    Negate,
    OrderKey,
    Threshold,
    UnionAll,
)
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.errors import FeatureNotSupported, SqlSyntaxError, UndefinedTable
from twofold.sql.exprs import B, Binder, call, parameter_value, unify
from twofold.sql.pgtypes import narrow, pg_of
from twofold.sql.scope import NULL, Col, Outer, Rel, Scope
from twofold.sql.types import check_declared, type_name, unify_declared


@dataclass
class Planned:
    """A planned query: `rel` (visible columns first), its read order, visible width."""

    rel: Rel
    order: list[OrderKey]
    visible: int


def one_row() -> Rel:
    """A relation of one row and one hidden column (the FROM of `SELECT 1`)."""
    return Rel(Constant(rows=[([True], 1)]), [Col("?one?", "bool", False, hidden=True)])


class Planner:
    """Plans queries for one statement against `db`'s catalog (see the module docstring)."""

    def __init__(self, db: Any, params: Any = None) -> None:
        self.db = db
        self.params = params
        self.ctes: dict[str, Rel] = {}
        self.views_read: dict[str, GlobalId] = {}
        """Every view (kind "view") the statement read, by name and id: inlined, but what
        an object defined by the statement depends on (`Relation.views`)."""
        self._objects: dict[str, Any] = {}  # catalog lookups of this statement

    # -- helpers the binder uses ------------------------------------------------------------

    def parameter(self, name: str) -> B:
        return parameter_value(self.params, name)

    def cast_expr(self, e: PExpr, src: str, target: str, numeric: bool = False) -> PExpr:
        """`CAST(e AS target)` from scalar `src`, with PostgreSQL's conversions (a double to
        an integer: the nearest, ties to even as rint does, or away from zero for a
        `numeric` one, as PostgreSQL's numeric cast does)."""
        if src == target:
            return e
        if src == NULL:
            return typed_null(target)
        if target == "int":
            if src == "float":
                nearest = call("round", e, PLiteral(value=0)) if numeric else call("rint", e)
                return call("cast_int", nearest)
            if src in ("bool", "str"):
                return call("cast_int", e)
        if target == "float" and src in ("int", "str", "bool"):
            return call("cast_float", e)
        if target == "str" and src in ("int", "bool"):
            return call("cast_str", e)
        if target == "str" and src == "float":
            return call("float8_text", e)  # float8out's text: 1, 0.1, 1e+15
        if target == "bool" and src == "int":
            return call("ne", e, PLiteral(value=0))
        raise FeatureNotSupported(f"cast from {type_name(src)} to {type_name(target)} is not "
                                  "supported")

    def coerce(self, b: B, scalar: str) -> PExpr:
        """`b`'s expression as `scalar` (int widened to float, NULL typed)."""
        e, s, _ = b
        if s == scalar or scalar == NULL:
            return e
        if s == NULL:
            return typed_null(scalar)
        if s == "int" and scalar == "float":
            return call("cast_float", e)
        return e

    # -- entry points -----------------------------------------------------------------------

    def plan_top(self, node: exp.Expr) -> Planned:
        return self._with_ctes(node, lambda: self._planned(node, None, None))

    def plan_query(self, node: exp.Expr, outer: Outer | None = None,
                   corr: Rel | None = None) -> Rel:
        """A subquery, view body or CTE: visible columns only (correlation columns first)."""
        p = self._with_ctes(node, lambda: self._planned(node, outer, corr))
        if p.visible == len(p.rel.cols):
            return p.rel
        rel = p.rel
        return Rel(Mfp(input=rel.plan, project=list(range(p.visible))),
                   rel.cols[: p.visible], rel.inputs)

    def _with_ctes(self, node: exp.Expr, body: Any) -> Planned:
        with_ = node.args.get("with_") or node.args.get("with")
        if with_ is None:
            return body()  # type: ignore[no-any-return]
        if with_.args.get("recursive"):
            raise FeatureNotSupported("WITH RECURSIVE is not supported")
        saved = dict(self.ctes)
        try:
            for cte in with_.expressions:
                name = cte.alias_or_name
                rel = self.plan_query(cte.this)
                names = [c.name for c in cte.args["alias"].columns] if cte.args.get(
                    "alias") is not None and cte.args["alias"].columns else None
                self.ctes[name] = rel.with_qual(name, names)
            return body()  # type: ignore[no-any-return]
        finally:
            self.ctes = saved

    def _planned(self, node: exp.Expr, outer: Outer | None, corr: Rel | None) -> Planned:
        from twofold.sql.select import plan_select

        if isinstance(node, exp.Select):
            return plan_select(self, node, outer, corr)
        if isinstance(node, exp.Subquery):
            if node.args.get("order") or node.args.get("limit"):
                return plan_select(self, exp.select("*").from_(node), outer, corr)
            return self._planned(node.this, outer, corr)
        if isinstance(node, exp.SetOperation):
            return self._setop(node, outer, corr)
        if isinstance(node, exp.Values):
            return Planned(*self._values(node, outer, corr))
        raise FeatureNotSupported(f"{type(node).__name__} is not supported as a query")

    # -- set operations ---------------------------------------------------------------------

    def _setop(self, node: exp.SetOperation, outer: Outer | None, corr: Rel | None) -> Planned:
        left = self.plan_query(node.this, outer, corr)
        right = self.plan_query(node.expression, outer, corr)
        kind = {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}[type(node)]
        if len(left.cols) != len(right.cols):
            raise SqlSyntaxError(f"each {kind} query must have the same number of columns "
                                 f"({len(left.cols)} and {len(right.cols)})")
        scalars = [unify(None, [a.scalar, b.scalar], kind) for a, b in
                   zip(left.cols, right.cols, strict=True)]
        pgs = [unify_declared([a.pg, b.pg], [a.scalar, b.scalar])
               for a, b in zip(left.cols, right.cols, strict=True)]
        lplan = self._coerce_rel(left, scalars, pgs)
        rplan = self._coerce_rel(right, scalars, pgs)
        distinct = node.args.get("distinct", True) is not False
        if kind == "UNION":
            plan: Any = UnionAll(inputs=[lplan, rplan])
            if distinct:
                plan = Distinct(input=plan)
        elif kind == "EXCEPT":
            if distinct:
                lplan, rplan = Distinct(input=lplan), Distinct(input=rplan)
            plan = Threshold(input=UnionAll(inputs=[lplan, Negate(input=rplan)]))
        else:
            if distinct:
                lplan, rplan = Distinct(input=lplan), Distinct(input=rplan)
            plan = intersect_all(lplan, rplan)
        cols = [replace(a, scalar=s, nullable=a.nullable or b.nullable, qual=None, hidden=False,
                        pg=pg) for a, b, s, pg in zip(left.cols, right.cols, scalars, pgs,
                                                      strict=True)]
        rel = Rel(plan, cols, {**left.inputs, **right.inputs})
        if node.args.get("order") or node.args.get("limit") or node.args.get("offset"):
            from twofold.sql.select import order_and_limit

            return order_and_limit(self, node, rel, corr)
        return Planned(rel, [], len(cols))

    def _coerce_rel(self, rel: Rel, scalars: list[str], pgs: list[str | None]) -> Any:
        """`rel`'s plan with its columns as `scalars` and PostgreSQL types `pgs` (a column
        made real is rounded to single precision, as PostgreSQL's conversion)."""
        maps: list[PExpr] = []
        project: list[int] = []
        n = len(rel.cols)
        for j, (c, s, pg) in enumerate(zip(rel.cols, scalars, pgs, strict=True)):
            to_real = pg == "float4" and c.pg != "float4" and c.scalar != NULL
            if (c.scalar == s or s == NULL) and not to_real:
                project.append(j)
            elif to_real:
                maps.append(narrow(Column_(j), pg))
                project.append(n + len(maps) - 1)
            else:
                maps.append(self.coerce((Column_(j), c.scalar, c.nullable), s))
                project.append(n + len(maps) - 1)
        if not maps:
            return rel.plan
        return Mfp(input=rel.plan, map=maps, project=project)

    # -- VALUES -----------------------------------------------------------------------------

    def _values(self, node: exp.Values, outer: Outer | None, corr: Rel | None
                ) -> tuple[Rel, list[OrderKey], int]:
        rows = [r.expressions if isinstance(r, exp.Tuple) else [r] for r in node.expressions]
        width = len(rows[0])
        if any(len(r) != width for r in rows):
            raise SqlSyntaxError("VALUES lists must all be the same length")
        base = one_row()
        binder = Binder(self, Scope(base, outer), clause="VALUES")
        bound = [[binder.bind(v) for v in r] for r in rows]
        if binder.scope.rel is not base:
            raise FeatureNotSupported("subqueries in VALUES are not supported")
        scalars = [unify(None, [r[j][1] for r in bound], "VALUES") for j in range(width)]
        names = [f"column{j + 1}" for j in range(width)]
        alias = node.args.get("alias")
        if alias is not None and alias.columns:
            names = [c.name for c in alias.columns] + names[len(alias.columns):]
        # PostgreSQL's column types (integer if every value is one, ...: unify_declared).
        pgs = [unify_declared([pg_of(r[j]) if r[j][1] != NULL else None for r in bound],
                              [r[j][1] for r in bound]) for j in range(width)]
        cols = [Col(names[j], scalars[j], any(r[j][2] for r in bound), pg=pgs[j])
                for j in range(width)]
        if all(isinstance(b[0], PLiteral) for r in bound for b in r):
            data = []
            for r in bound:
                row = [b[0].value for b in r]  # type: ignore[union-attr]
                for j, s in enumerate(scalars):
                    if s == "float" and type(row[j]) is int:
                        row[j] = float(row[j])
                    if pgs[j] == "float4":  # an integer among reals is made one
                        row[j] = check_declared([row[j]], "float4")[0]
                data.append((row, 1))
            plan: Any = Constant(rows=data)
        else:
            parts = [Mfp(input=base.plan, map=[self._as_column(b, s, pg) for b, s, pg in
                                                zip(r, scalars, pgs, strict=True)],
                         project=list(range(1, width + 1))) for r in bound]
            plan = parts[0] if len(parts) == 1 else UnionAll(inputs=list(parts))
        rel = Rel(plan, cols)
        if corr is not None:
            from twofold.sql.from_ import cross

            rel = cross(corr, rel)
        return rel, [], len(rel.cols)

    def _as_column(self, b: B, scalar: str, pg: str | None) -> PExpr:
        if pg == "float4" and b[1] != NULL and pg_of(b) != "float4":
            return narrow(b[0] if b[1] == "int" else self.coerce(b, scalar), pg)
        return self.coerce(b, scalar)

    # -- catalog ----------------------------------------------------------------------------

    def relation(self, name: str) -> Rel:
        """The table, view, materialized view, index or CTE called `name`."""
        if name in self.ctes:
            return self.ctes[name]
        from twofold.api.errors import UnknownObject

        obj = self._objects.get(name)
        if obj is None:
            try:
                obj = self._objects[name] = self.db.get(name)
            except UnknownObject:
                raise UndefinedTable(f'relation "{name}" does not exist') from None
        self.views_read.update(obj.views)
        declared = declared_of(self.db, name, len(obj.schema))
        cols = [Col(n, t.scalar, t.nullable, qual=name, pg=pg)
                for (n, t), pg in zip(obj.schema, declared, strict=True)]
        return Rel(obj.plan, cols, dict(obj.inputs))


def declared_of(db: Any, name: str, width: int) -> list[str | None]:
    """The declared PostgreSQL types of object `name`'s columns (`Entry.pg_types`: a SQL
    table's, or what a SQL view, materialized view or index recorded of its query's); None
    for each where none was recorded (Python API objects, older catalogs)."""
    entry = getattr(db, "_entries", {}).get(name)
    pgs = list(getattr(entry, "pg_types", None) or [])
    if len(pgs) != width:
        return [None] * width
    return [p or None for p in pgs]


def Column_(i: int) -> PExpr:
    from twofold.protocol import Column

    return Column(index=i)
