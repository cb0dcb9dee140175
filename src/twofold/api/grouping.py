"""Grouping: `Relation.group_by(...).agg(...)`, lowered to a protocol `Reduce`.

Contract: `GroupBy.agg` binds the group keys and each aggregate's input against the relation's
schema, types every output column (`count` a non-null int; `sum`/`min`/`max` their input's type,
nullable if the input is or there are no keys; `mean` a nullable float; `string_agg` nullable
text; `sum`/`mean` of a non-numeric column and `string_agg` of a non-text one are
`TypeMismatch`), refuses clashing output names (`DuplicateColumn` naming both sources), and
builds `Mfp` (computed keys and inputs) → `Reduce` → `Mfp` (each mean as sum / count, NULL over
no rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from twofold.api.binding import Bound, bind, to_column_type
from twofold.api.errors import DuplicateColumn, InvalidArgument, TypeMismatch
from twofold.api.expr import Agg, Expr
from twofold.api.schema import Schema, _unique, flat_args
from twofold.protocol import Aggregate, Call, Column, ColumnType, Mfp, Plan, Reduce
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral

if TYPE_CHECKING:
    from twofold.api.relation import Relation


def _unique_aggregates(names: Sequence[str], sources: Sequence[str]) -> None:
    """`agg`'s output names are unique; a collision names both sources (`max('q')` and
    `mean('q')` both default to `q`, as in polars, which refuses them too)."""
    first: dict[str, str] = {}
    for n, src in zip(names, sources, strict=True):
        if n in first:
            raise DuplicateColumn(n, "agg", f"{first[n]} and {src} both name their column {n!r}")
        first[n] = src


class GroupBy:
    """A relation grouped by key expressions; `agg(...)` finishes it."""

    def __init__(self, rel: Relation, keys: list[Expr]) -> None:
        self._rel = rel
        self._keys = keys

    def agg(self, *aggs: Agg | Sequence[Agg]) -> Relation:
        """One row per group: the keys, then one column per aggregate (`count()`,
        `sum("x")`, `col("x").max()`, `n_unique("y")`, `mean("z")`...)."""
        flat: list[Agg] = flat_args(aggs)
        if not flat:
            raise InvalidArgument("agg: needs at least one aggregate")
        for a in flat:
            if not isinstance(a, Agg):
                raise InvalidArgument(f"agg: expected aggregates such as count() or sum('x'), "
                                      f"got {a!r}")
        rel = self._rel
        schema = rel.schema
        keys = [bind(k, schema, "group_by") for k in self._keys]
        _unique([k.name for k in keys], "group_by")
        # Everything the Reduce needs as a plain column: keys, then aggregate inputs.
        maps: list[Bound] = []

        def position(b: Bound) -> int:
            if isinstance(b.expr, Column):
                return b.expr.index
            maps.append(b)
            return len(schema) + len(maps) - 1

        key_pos = [position(k) for k in keys]
        names = [k.name for k in keys]
        types = [k.column_type for k in keys]
        aggregates: list[Aggregate] = []
        finish: list[tuple[str, int, int]] = []  # mean: (name, sum slot, count slot)
        for a in flat:
            if a.input is None:
                aggregates.append(Aggregate(func="count"))
                names.append(a.name or "count")
                types.append(ColumnType("int", nullable=False))
                continue
            b = bind(a.input, schema, a.func)
            name = a.name or b.name
            scalar, nullable = b.ty
            nullable = nullable or not keys  # no keys: the row over no rows has NULLs
            pos = position(b)
            if a.func == "count":
                aggregates.append(Aggregate(func="count", column=pos, distinct=a.distinct))
                names.append(name)
                types.append(ColumnType("int", nullable=False))
            elif a.func in ("sum", "mean"):
                if scalar not in ("int", "float", "null"):
                    raise TypeMismatch(a.func, f"needs an int or float column, got {scalar}",
                                       b.name)
                if a.func == "sum":
                    aggregates.append(Aggregate(func="sum", column=pos, distinct=a.distinct))
                    names.append(name)
                    types.append(to_column_type((scalar, nullable)))
                else:
                    slot = len(keys) + len(aggregates)
                    aggregates.append(Aggregate(func="sum", column=pos, distinct=a.distinct))
                    aggregates.append(Aggregate(func="count", column=pos,
                                                distinct=a.distinct))
                    finish.append((name, slot, slot + 1))
                    names.append(name)
                    types.append(ColumnType("float", nullable=True))
            elif a.func == "string_agg":
                if scalar != "str":
                    raise TypeMismatch(a.func, f"needs a str column, got {scalar}", b.name)
                aggregates.append(Aggregate(func="string_agg", column=pos, distinct=a.distinct,
                                            separator=a.separator, desc=a.descending))
                names.append(name)
                types.append(ColumnType("str", nullable=True))
            else:
                func: Literal["min", "max"] = "min" if a.func == "min" else "max"
                aggregates.append(Aggregate(func=func, column=pos, distinct=a.distinct))
                names.append(name)
                types.append(to_column_type((scalar, nullable)))
        _unique_aggregates(names, [f"group key {n!r}" for n in names[:len(keys)]]
                           + [repr(a) for a in flat])
        plan: Plan = rel.plan
        if maps:
            plan = Mfp(input=plan, map=[m.expr for m in maps])
        plan = Reduce(input=plan, group_key=key_pos, aggregates=aggregates)
        if finish:
            plan = _finish_means(plan, len(keys), aggregates, finish, flat)
        return rel._derive(plan, Schema(tuple(names), tuple(types)))


def _finish_means(plan: Plan, nkeys: int, aggregates: list[Aggregate],
                  finish: list[tuple[str, int, int]], aggs: list[Agg]) -> Plan:
    """Turn each mean's (sum, count) pair into sum / count, NULL when the count is 0."""
    maps: list[PExpr] = []
    for _, s, c in finish:
        total = Call(func="cast_float", args=[Column(index=s)])
        n = Column(index=c)
        maps.append(Call(func="if", args=[
            Call(func="eq", args=[n, PLiteral(value=0)]),
            PLiteral(value=None),
            Call(func="fdiv", args=[total, Call(func="cast_float", args=[n])]),
        ]))
    width = nkeys + len(aggregates)
    mean_slot = {s: width + j for j, (_, s, _) in enumerate(finish)}
    count_slots = {c for _, _, c in finish}
    project = list(range(nkeys))
    for j in range(nkeys, width):
        if j in count_slots:
            continue
        project.append(mean_slot.get(j, j))
    return Mfp(input=plan, map=maps, project=project)
