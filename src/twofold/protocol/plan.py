"""Plans: the relational operators a dataflow is built from, plus the peek-side
`MapFilterProject` and `RowSetFinishing`.

Structural rules that need no input types (equal join key lengths, an aggregate's column, non-
negative offsets) are checked on construction and decode. Type checking against input
`RelationDesc`s is the engine's job.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Literal as TypeLiteral

import msgspec

from twofold.protocol.base import Row, Tagged, Value, check_rows
from twofold.protocol.expr import Expr
from twofold.protocol.ids import GlobalId

_FIRST = itemgetter(0)  # the row of a (row, diff) pair, without a Python frame per row


def _check_indexes(what: str, cols: list[int] | None) -> None:
    if cols is not None and any(c < 0 for c in cols):
        raise ValueError(f"{what} must be non-negative column indexes, got {cols}")


class OrderKey(Value, frozen=True):
    """Sort by `column`, ascending unless `desc`; NULLs last unless `nulls_last=False`."""

    column: int
    desc: bool = False
    nulls_last: bool = True

    def __post_init__(self) -> None:
        _check_indexes("OrderKey.column", [self.column])


class Aggregate(Value, frozen=True):
    """`func` over `column` (`count` with `column=None` counts rows). `string_agg` joins a
    text column's non-NULL values (each as often as it occurs, in ascending order, or
    descending with `desc`) with `separator` between them; NULL when there are none.
    `var_samp`/`var_pop` are the sample/population variance of an int or float column, as a
    float (NULL below two values, resp. one)."""

    func: TypeLiteral["count", "sum", "min", "max", "string_agg", "var_samp", "var_pop"]
    column: int | None = None
    distinct: bool = False
    separator: str | None = None
    """`string_agg`'s separator (required there, unused elsewhere)."""
    desc: bool = False
    """`string_agg`: join in descending order."""

    def __post_init__(self) -> None:
        if self.column is None and self.func != "count":
            raise ValueError(f"aggregate {self.func} needs a column")
        if (self.func == "string_agg") != (self.separator is not None):
            raise ValueError("string_agg (and only string_agg) takes a separator")
        if self.column is not None:
            _check_indexes("Aggregate.column", [self.column])


class MapFilterProject(Value, frozen=True):
    """Append `map` columns (each may use earlier ones), keep rows where every `filter` is
    true, then keep the `project` columns (all when `None`)."""

    map: list[Expr] = msgspec.field(default_factory=list)
    filter: list[Expr] = msgspec.field(default_factory=list)
    project: list[int] | None = None

    def __post_init__(self) -> None:
        _check_indexes("MapFilterProject.project", self.project)

    @property
    def is_identity(self) -> bool:
        return not self.map and not self.filter and self.project is None


class RowSetFinishing(Value, frozen=True):
    """Order (by `OrderKey`s), page (`offset`, `limit`) and project a peek's result."""

    order_by: list[OrderKey] = msgspec.field(default_factory=list)
    limit: int | None = None
    offset: int = 0
    project: list[int] | None = None

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise ValueError(f"RowSetFinishing.offset must be >= 0, got {self.offset}")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"RowSetFinishing.limit must be >= 0, got {self.limit}")
        _check_indexes("RowSetFinishing.project", self.project)

    @property
    def is_trivial(self) -> bool:
        return (
            not self.order_by and self.limit is None and self.offset == 0 and (self.project is None)
        )


class Get(Tagged, frozen=True):
    """An imported or previously built collection."""

    id: GlobalId


class Constant(Tagged, frozen=True):
    """`(row, diff)` pairs at the dataflow's `as_of`."""

    rows: list[tuple[Row, int]]

    def __post_init__(self) -> None:
        check_rows(list(map(_FIRST, self.rows)), "Constant.rows")


class Mfp(Tagged, frozen=True):
    """Map, filter and project over `input` (see `MapFilterProject`)."""

    input: Plan
    map: list[Expr] = msgspec.field(default_factory=list)
    filter: list[Expr] = msgspec.field(default_factory=list)
    project: list[int] | None = None

    def __post_init__(self) -> None:
        _check_indexes("Mfp.project", self.project)


class Join(Tagged, frozen=True):
    """Inner equi-join; output columns are `left ++ right`."""

    left: Plan
    right: Plan
    left_key: list[int]
    right_key: list[int]

    def __post_init__(self) -> None:
        if len(self.left_key) != len(self.right_key):
            raise ValueError(
                f"Join keys differ in length: left {self.left_key}, right {self.right_key}"
            )
        _check_indexes("Join.left_key", self.left_key)
        _check_indexes("Join.right_key", self.right_key)


class Reduce(Tagged, frozen=True):
    """Group by `group_key`; output is the key columns then one column per aggregate."""

    input: Plan
    group_key: list[int]
    aggregates: list[Aggregate] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        _check_indexes("Reduce.group_key", self.group_key)


class TopK(Tagged, frozen=True):
    """Per group, the rows ranked `[offset, offset + limit)` by `order_by`."""

    input: Plan
    group_key: list[int]
    order_by: list[OrderKey]
    limit: int | None = None
    offset: int = 0

    def __post_init__(self) -> None:
        _check_indexes("TopK.group_key", self.group_key)
        if self.offset < 0:
            raise ValueError(f"TopK.offset must be >= 0, got {self.offset}")
        if self.limit is not None and self.limit < 0:
            raise ValueError(f"TopK.limit must be >= 0, got {self.limit}")


class UnionAll(Tagged, frozen=True):
    """Multiset union of `inputs` (at least one)."""

    inputs: list[Plan]

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError("UnionAll needs at least one input")


class Negate(Tagged, frozen=True):
    """Every diff negated."""

    input: Plan


class Threshold(Tagged, frozen=True):
    """Keep rows with a positive net count."""

    input: Plan


class Distinct(Tagged, frozen=True):
    """Each row with a positive count, once."""

    input: Plan


Plan = Get | Constant | Mfp | Join | Reduce | TopK | UnionAll | Negate | Threshold | Distinct


def plan_children(plan: Plan) -> list[Plan]:
    """The direct inputs of `plan`, left to right."""
    match plan:
        case Get() | Constant():
            return []
        case Join(left=left, right=right):
            return [left, right]
        case UnionAll(inputs=inputs):
            return list(inputs)
        case Mfp(input=i) | Reduce(input=i) | TopK(input=i) | Negate(input=i):
            return [i]
        case Threshold(input=i) | Distinct(input=i):
            return [i]
    raise TypeError(f"not a Plan: {plan!r}")


def plan_gets(plan: Plan) -> set[GlobalId]:
    """Every id a plan reads through `Get`."""
    out: set[GlobalId] = set()
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, Get):
            out.add(node.id)
        stack.extend(plan_children(node))
    return out
