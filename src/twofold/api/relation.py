"""Relations: immutable query values built with a polars-like API, compiled to protocol plans.

Contract: every method returns a new `Relation` whose `schema` is already known and whose `plan`
is a `twofold.protocol.Plan` over the `Get`s of the tables, views and indexes it reads (`inputs`).
Names and types are checked when the relation is built: an unknown column is `ColumnNotFound`,
an ill-typed expression or incompatible union/join is `TypeMismatch`, a clash of output names is
`DuplicateColumn` — each naming the column and the operation. Nothing runs until the relation is
read (`collect`, `db.query`), indexed, materialized, subscribed to or copied out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from twofold.api.binding import Bound, bind
from twofold.api.errors import DuplicateColumn, InvalidArgument, TypeMismatch
from twofold.api.expr import Agg, IntoExpr, into_expr
from twofold.api.grouping import GroupBy as GroupBy  # re-exported: it lived here
from twofold.api.joins import anti_join, intersect_all, outer_join, semi_join
from twofold.api.schema import Schema, _unique, flat_args
from twofold.protocol import (
    Call,
    Column,
    ColumnType,
    Distinct,
    GlobalId,
    IndexDesc,
    Join,
    Mfp,
    Negate,
    OrderKey,
    Plan,
    Threshold,
    TopK,
    UnionAll,
)
from twofold.protocol import Expr as PExpr

if TYPE_CHECKING:
    from twofold.api.results import Result
    from twofold.api.session import AsyncDatabase

InputKind = Literal["table", "view", "index"]


@dataclass(frozen=True)
class Input:
    """A stored collection a relation reads: a table or materialized view (a storage shard) or
    an index (an arrangement maintained on the replicas)."""

    name: str
    kind: InputKind
    id: GlobalId
    schema: Schema
    shard: str | None = None
    index: IndexDesc | None = None

    @property
    def label(self) -> str:
        """How errors name it: `table 'orders'`."""
        kind = "materialized view" if self.kind == "view" else self.kind
        return f"{kind} {self.name!r}"


def _names(values: Sequence[str] | str, what: str) -> list[str]:
    if isinstance(values, str):
        return [values]
    out = list(values)
    if not all(isinstance(v, str) for v in out):
        raise InvalidArgument(f"{what}: expected column names, got {values!r}")
    return out


class Relation:
    """An immutable query over tables, views and indexes of one database."""

    def __init__(self, db: AsyncDatabase | None, plan: Plan, schema: Schema,
                 inputs: Mapping[GlobalId, Input],
                 views: Mapping[str, GlobalId] | None = None) -> None:
        self._db = db
        self.plan = plan
        """The protocol plan computing this relation."""
        self.schema = schema
        self.inputs = dict(inputs)
        """The stored collections this relation reads, by id."""
        self.views = dict(views or {})
        """The (non-materialized) views this relation is built over, by name and catalog id:
        their plans are inlined in `plan`; an object defined over it depends on them."""
        self.order: list[OrderKey] = []
        """How reads of this relation order their rows (set by `sort`). `select`, `filter`,
        `with_columns`, `rename` and `limit` keep it (as polars does; one that drops or replaces
        a sort column raises `InvalidArgument`); other operations (joins, aggregates, unions,
        `distinct`) make a new, unordered collection, as a SQL subquery would."""

    # -- introspection ----------------------------------------------------------------------

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def __repr__(self) -> str:
        reads = ", ".join(sorted(i.label for i in self.inputs.values()))
        return f"<Relation {self.schema.as_dict()} reading {reads or 'nothing'}>"

    def _derive(self, plan: Plan, schema: Schema,
                inputs: Mapping[GlobalId, Input] | None = None,
                views: Mapping[str, GlobalId] | None = None) -> Relation:
        return Relation(self._db, plan, schema, self.inputs if inputs is None else inputs,
                        self.views if views is None else views)

    def _bind_all(self, exprs: Sequence[IntoExpr], operation: str) -> list[Bound]:
        if not exprs:
            raise InvalidArgument(f"{operation}: needs at least one expression")
        flat: list[IntoExpr] = flat_args(exprs)  # select(["a", "b"]) as select("a", "b")
        return [bind(into_expr(e), self.schema, operation) for e in flat]

    # -- map / filter / project -------------------------------------------------------------

    def _mfp(self, map: list[Bound], project: list[int] | None, names: list[str],
             types: list[ColumnType], operation: str,
             filter: list[Bound] | None = None) -> Relation:
        plan = Mfp(input=self.plan, map=[b.expr for b in map],
                   filter=[b.expr for b in filter or []], project=project)
        out = self._derive(plan, Schema(tuple(names), tuple(types)))
        out.order = self._carried_order(project, operation)
        return out

    def _carried_order(self, project: list[int] | None, operation: str) -> list[OrderKey]:
        """This relation's sort order after a projection (output column `j` is input column
        `project[j]`), as polars keeps it; a projection that drops or replaces a sort column
        cannot keep it and says so."""
        if project is None or not self.order:
            return list(self.order)
        out = []
        for o in self.order:
            if o.column not in project:
                name = self.schema.names[o.column]
                raise InvalidArgument(
                    f"{operation}: the relation is sorted by {name!r}, which this "
                    f"{'replaces' if operation == 'with_columns' else 'drops'}, so its order "
                    f"would be lost; keep {name!r} unchanged, or sort after {operation}")
            out.append(OrderKey(column=project.index(o.column), desc=o.desc,
                                nulls_last=o.nulls_last))
        return out

    def select(self, *exprs: IntoExpr | Sequence[IntoExpr]) -> Relation:
        """Exactly the given columns/expressions, in order: `select("id", col("a") * 2)`."""
        bound = self._bind_all(exprs, "select")  # type: ignore[arg-type]
        _unique([b.name for b in bound], "select")
        project: list[int] = []
        maps: list[Bound] = []
        for b in bound:
            if isinstance(b.expr, Column):
                project.append(b.expr.index)
            else:
                project.append(len(self.schema) + len(maps))
                maps.append(b)
        return self._mfp(maps, project, [b.name for b in bound],
                         [b.column_type for b in bound], "select")

    def with_columns(self, *exprs: IntoExpr | Sequence[IntoExpr]) -> Relation:
        """Add columns, or replace those of the same name: `with_columns((col("a") + 1)
        .alias("b"))`."""
        bound = self._bind_all(exprs, "with_columns")  # type: ignore[arg-type]
        _unique([b.name for b in bound], "with_columns")
        names = list(self.schema.names)
        types = list(self.schema.types)
        project = list(range(len(names)))
        for j, b in enumerate(bound):
            pos = len(self.schema) + j
            if b.name in names:
                i = names.index(b.name)
                project[i], types[i] = pos, b.column_type
            else:
                project.append(pos)
                names.append(b.name)
                types.append(b.column_type)
        return self._mfp(bound, project, names, types, "with_columns")

    def filter(self, *predicates: IntoExpr) -> Relation:
        """Rows where every predicate is true (NULL counts as false)."""
        bound = self._bind_all(predicates, "filter")
        for b in bound:
            if b.ty[0] not in ("bool", "null"):
                raise TypeMismatch("filter", f"a predicate must be bool, got {b.ty[0]} "
                                   f"({b.name})", b.name)
        return self._mfp([], None, list(self.schema.names), list(self.schema.types),
                         "filter", bound)

    def rename(self, mapping: Mapping[str, str]) -> Relation:
        """The same rows with columns renamed: `rename({"old": "new"})`."""
        for old in mapping:
            self.schema.index(old, "rename")
        names = [mapping.get(n, n) for n in self.schema.names]
        _unique(names, "rename")
        out = self._derive(self.plan, Schema(tuple(names), self.schema.types))
        out.order = list(self.order)  # the same columns in the same places
        return out

    def drop(self, *columns: str) -> Relation:
        """All columns but `columns`."""
        for c in columns:
            self.schema.index(c, "drop")
        self._carried_order([i for i, n in enumerate(self.schema.names) if n not in columns],
                            "drop")
        return self.select(*[n for n in self.schema.names if n not in columns])

    # -- join -------------------------------------------------------------------------------

    def join(self, other: Relation, on: str | Sequence[str] | None = None, *,
             left_on: str | Sequence[str] | None = None,
             right_on: str | Sequence[str] | None = None,
             how: str = "inner", suffix: str = "_right") -> Relation:
        """Equi-join. `on` names key columns present on both sides (the right copies are
        dropped; for `right`/`full` joins the kept key is the non-NULL of the two);
        `left_on`/`right_on` name them per side (both are kept). Right columns whose names clash
        with left ones get `suffix`. `how`: `inner`; `left`/`right`/`full` (outer: rows without
        a match kept, the other side's columns NULL); `semi`/`anti` (the left rows with / without
        a match, left columns only). NULL keys never match (SQL equality)."""
        hows = ("inner", "left", "right", "full", "semi", "anti")
        if how not in hows:
            raise InvalidArgument(f"join: how={how!r} is not supported; use one of {hows}")
        self._same_db(other, "join")
        if on is not None:
            if left_on is not None or right_on is not None:
                raise InvalidArgument("join: give either on= or left_on=/right_on=, not both")
            lk_names = rk_names = _names(on, "join on")
        elif left_on is not None and right_on is not None:
            lk_names, rk_names = _names(left_on, "join left_on"), _names(right_on, "join right_on")
        else:
            raise InvalidArgument("join: needs on= or both left_on= and right_on=")
        if len(lk_names) != len(rk_names) or not lk_names:
            raise InvalidArgument(f"join: left_on {lk_names} and right_on {rk_names} must be "
                                  "non-empty and of equal length")
        lk = [self.schema.index(n, "join (left key)") for n in lk_names]
        rk = [other.schema.index(n, "join (right key)") for n in rk_names]
        for a, b, an, bn in zip(lk, rk, lk_names, rk_names, strict=True):
            ta, tb = self.schema.types[a].scalar, other.schema.types[b].scalar
            if ta != tb:
                raise TypeMismatch("join", f"key {an!r} is {ta} on the left but {bn!r} is {tb} "
                                   "on the right; cast one side so the keys share a type", an)
        inputs = {**self.inputs, **other.inputs}
        views = {**self.views, **other.views}
        if how in ("semi", "anti"):
            lower = semi_join if how == "semi" else anti_join
            plan: Plan = lower(self.plan, other.plan, lk, rk, len(self.schema))
            return self._derive(plan, self.schema, inputs, views)
        if how == "inner":
            plan = Join(left=self.plan, right=other.plan, left_key=lk, right_key=rk)
        else:
            plan = outer_join(self.plan, list(self.schema.types), other.plan,
                              list(other.schema.types), lk, rk, how)
        keep_right = [j for j in range(len(other.schema)) if on is None or j not in rk]
        names = list(self.schema.names)
        types = [ColumnType(t.scalar, t.nullable or how in ("right", "full"))
                 for t in self.schema.types]
        for j in keep_right:
            n = other.schema.names[j]
            if n in names:
                n = n + suffix
                if n in names:
                    raise DuplicateColumn(n, "join")
            names.append(n)
            t = other.schema.types[j]
            types.append(ColumnType(t.scalar, t.nullable or how in ("left", "full")))
        left_n = len(self.schema)
        if on is not None and how in ("right", "full"):
            # The key of a row only the right side has lives in the right copy.
            maps: list[PExpr] = [Call(func="coalesce", args=[Column(index=a),
                                                             Column(index=left_n + b)])
                    for a, b in zip(lk, rk, strict=True)]
            width = left_n + len(other.schema)
            key_at = {a: width + i for i, a in enumerate(lk)}
            project = [key_at.get(i, i) for i in range(left_n)]
            project += [left_n + j for j in keep_right]
            for i, a in enumerate(lk):
                types[a] = ColumnType(types[a].scalar, self.schema.types[a].nullable and
                                      other.schema.types[rk[i]].nullable)
            plan = Mfp(input=plan, map=maps, project=project)
        elif len(keep_right) != len(other.schema):
            project = [*range(left_n), *(left_n + j for j in keep_right)]
            plan = Mfp(input=plan, project=project)
        return self._derive(plan, Schema(tuple(names), tuple(types)), inputs, views)

    # -- aggregation, ranking, set operations -----------------------------------------------

    def group_by(self, *keys: IntoExpr | Sequence[IntoExpr]) -> GroupBy:
        """Group by columns or expressions; finish with `.agg(...)`."""
        flat: list[IntoExpr] = flat_args(keys)
        return GroupBy(self, [into_expr(k) for k in flat])

    def agg(self, *aggs: Agg | Sequence[Agg]) -> Relation:
        """Aggregate the whole relation: one row, also when it is empty (then counts are 0 and
        every other aggregate is NULL, as in SQL)."""
        return GroupBy(self, []).agg(*aggs)

    def top_k(self, k: int | None, by: str | Sequence[str], *,
              descending: bool | Sequence[bool] = False, nulls_last: bool = True,
              group_by: str | Sequence[str] = (), offset: int = 0) -> Relation:
        """Per group of `group_by` (or overall), the `k` first rows ordered by `by` (ties
        broken by every column, ascending), skipping `offset`. `k=None` keeps all."""
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise InvalidArgument(f"top_k: k must be a non-negative int or None, got {k!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgument(f"top_k: offset must be a non-negative int, got {offset!r}")
        order = self._order_keys(by, descending, nulls_last, "top_k")
        groups = [self.schema.index(n, "top_k (group_by)") for n in _names(group_by, "top_k")]
        plan = TopK(input=self.plan, group_key=groups, order_by=order, limit=k, offset=offset)
        return self._derive(plan, self.schema)

    def union(self, *others: Relation) -> Relation:
        """Every row of every input (multiset union, SQL `UNION ALL`); column names come from
        this relation, types must agree column by column."""
        if not others:
            raise InvalidArgument("union: needs at least one other relation")
        types = list(self.schema.types)
        inputs = dict(self.inputs)
        views = dict(self.views)
        for j, o in enumerate(others, 1):
            self._same_db(o, "union")
            if len(o.schema) != len(self.schema):
                raise TypeMismatch("union", f"input {j} has {len(o.schema)} columns "
                                   f"{list(o.schema.names)}, the first has {len(self.schema)} "
                                   f"{list(self.schema.names)}")
            for c, (ta, tb) in enumerate(zip(types, o.schema.types, strict=True)):
                if ta.scalar != tb.scalar:
                    raise TypeMismatch("union", f"column {c} is {ta.scalar} in the first input "
                                       f"but {tb.scalar} in input {j}; cast one of them",
                                       self.schema.names[c])
                types[c] = ColumnType(ta.scalar, ta.nullable or tb.nullable)
            inputs.update(o.inputs)
            views.update(o.views)
        plan = UnionAll(inputs=[self.plan, *(o.plan for o in others)])
        return self._derive(plan, Schema(self.schema.names, tuple(types)), inputs, views)

    def _order_keys(self, by: str | Sequence[str], descending: bool | Sequence[bool],
                    nulls_last: bool, operation: str) -> list[OrderKey]:
        by_names = _names(by, operation)
        if not by_names:
            raise InvalidArgument(f"{operation}: needs at least one column")
        desc = [descending] * len(by_names) if isinstance(descending, bool) else list(descending)
        if len(desc) != len(by_names):
            raise InvalidArgument(f"{operation}: {len(by_names)} sort columns but "
                                  f"{len(desc)} descending flags")
        return [OrderKey(column=self.schema.index(n, operation), desc=d, nulls_last=nulls_last)
                for n, d in zip(by_names, desc, strict=True)]

    def sort(self, by: str | Sequence[str], *, descending: bool | Sequence[bool] = False,
             nulls_last: bool = True) -> Relation:
        """The same rows, read in this order (ties broken by every column). Follow with
        `limit(n)` for the first `n`."""
        out = self._derive(self.plan, self.schema)
        out.order = self._order_keys(by, descending, nulls_last, "sort")
        return out

    def limit(self, n: int, *, offset: int = 0) -> Relation:
        """The first `n` rows (after `offset`) in `sort` order — or in the order of every
        column when unsorted. A real operator: the result can be indexed or joined."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InvalidArgument(f"limit: n must be a non-negative int, got {n!r}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgument(f"limit: offset must be a non-negative int, got {offset!r}")
        out = self._derive(TopK(input=self.plan, group_key=[], order_by=list(self.order),
                                limit=n, offset=offset), self.schema)
        out.order = list(self.order)
        return out

    head = limit

    def distinct(self) -> Relation:
        """Each distinct row once."""
        return self._derive(Distinct(input=self.plan), self.schema)

    def except_all(self, other: Relation) -> Relation:
        """Rows of this relation minus those of `other`, with multiplicity (SQL `EXCEPT ALL`)."""
        u = self.union(other)
        assert isinstance(u.plan, UnionAll)
        plan = Threshold(input=UnionAll(inputs=[self.plan, Negate(input=other.plan)]))
        return self._derive(plan, u.schema, u.inputs, u.views)

    def intersect_all(self, other: Relation) -> Relation:
        """Rows of both relations, each `min(count here, count there)` times (SQL `INTERSECT
        ALL`); `.distinct()` after it is SQL's `INTERSECT`."""
        u = self.union(other)
        return self._derive(intersect_all(self.plan, other.plan), u.schema, u.inputs, u.views)

    def _same_db(self, other: Relation, operation: str) -> None:
        if not isinstance(other, Relation):
            raise InvalidArgument(f"{operation}: expected a Relation, got {type(other).__name__}")
        if self._db is not None and other._db is not None and self._db is not other._db:
            raise InvalidArgument(f"{operation}: the relations belong to different databases")

    # -- reading ----------------------------------------------------------------------------

    def _session(self) -> AsyncDatabase:
        from twofold.api.errors import DatabaseClosed

        if self._db is None:
            raise DatabaseClosed("this relation is not attached to a database")
        return self._db

    def collect(self, *, as_of: int | None = None, timeout: float | None = None) -> Result:
        """Read this relation now (or `as_of` a timestamp), blocking. Only for relations of a
        synchronous `Database`; with `open_async` use `await rel.collect_async()`."""
        db = self._session()
        return db._run_sync(db.query(self, as_of=as_of, timeout=timeout), "collect")

    async def collect_async(self, *, as_of: int | None = None,
                            timeout: float | None = None) -> Result:
        """Read this relation (`await db.query(rel)`)."""
        return await self._session().query(self, as_of=as_of, timeout=timeout)

    def __iter__(self) -> Any:
        raise TypeError("a Relation is a query, not its rows: call .collect() to read it")
