"""Relations under construction and name resolution (PostgreSQL's scoping rules).

Contract: a `Rel` is a protocol plan with one `Col` per output column (qualifier, name, scalar
type, nullability, visibility, declared PostgreSQL type); plans only ever *append* columns while
an expression is being bound, so a bound column index stays valid. `Scope.lookup` resolves
`[qual.]name` to a column: the innermost query's visible columns first (an unqualified name
several of them share is `AmbiguousColumn`), then the correlation columns a subquery carries,
then — through `Outer` — the enclosing query, which records the column as a correlated
reference. Unknown names are `UndefinedColumn` listing what is in scope.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from twofold.api.relation import Input
from twofold.protocol import ColumnType, GlobalId, Plan
from twofold.sql.errors import AmbiguousColumn, UndefinedColumn, UndefinedTable

if TYPE_CHECKING:
    from collections.abc import Sequence

NULL = "null"  # the scalar type of an untyped NULL: fits any type


@dataclass(frozen=True)
class Col:
    """One column of a relation being planned."""

    name: str
    scalar: str  # bool int float str bytes, or NULL
    nullable: bool = True
    qual: str | None = None  # the table name or alias that qualifies it
    hidden: bool = False  # not in `*` and not found unqualified (USING duplicates, helpers)
    item: int = 0  # the FROM item it came from (orders `*`)
    corr: int | None = None  # a correlation column: the outer column it stands for
    pg: str | None = None
    """The PostgreSQL type it was declared as (`int4`, `float4`, `varchar(5)`: a table's
    `Entry.pg_types`, carried through plain references, min/max, set operations, COALESCE and
    CASE); None where PostgreSQL's type is the engine scalar's (int8, float8, text, ...) or
    twofold computes the value at another width (`int4 + int4`)."""

    @property
    def column_type(self) -> ColumnType:
        return ColumnType("int" if self.scalar == NULL else self.scalar,  # type: ignore[arg-type]
                          self.nullable)


@dataclass
class Rel:
    """A plan and its columns; `inputs` are the stored collections it reads."""

    plan: Plan
    cols: list[Col]
    inputs: dict[GlobalId, Input] = field(default_factory=dict)

    @property
    def types(self) -> list[ColumnType]:
        return [c.column_type for c in self.cols]

    def with_qual(self, qual: str | None, names: Sequence[str] | None = None,
                  item: int = 0) -> Rel:
        cols = []
        for j, c in enumerate(self.cols):
            name = names[j] if names is not None and j < len(names) else c.name
            cols.append(replace(c, qual=qual, name=name, item=item))
        return Rel(self.plan, cols, dict(self.inputs))


class Outer:
    """The enclosing query as a subquery sees it: lookups through it are correlated
    references, recorded in `used` (indexes into the enclosing relation's columns)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.used: list[int] = []

    def lookup(self, qual: str | None, name: str) -> tuple[int, Col] | None:
        found = self.scope.find(qual, name)
        if found is None:
            return None
        i, col = found
        if i not in self.used:
            self.used.append(i)
        return i, col


class Scope:
    """Name resolution over one relation, with an optional enclosing query."""

    def __init__(self, rel: Rel, outer: Outer | None = None) -> None:
        self.rel = rel
        self.outer = outer

    def find(self, qual: str | None, name: str) -> tuple[int, Col] | None:
        """The column `[qual.]name` (searching enclosing queries too), or None."""
        cols = self.rel.cols
        hits = [i for i, c in enumerate(cols) if c.corr is None and c.name == name
                and (c.qual == qual if qual is not None else not c.hidden)]
        if len(hits) > 1:
            label = f"{qual}.{name}" if qual else name
            raise AmbiguousColumn(f"column reference {label!r} is ambiguous")
        if hits:
            return hits[0], cols[hits[0]]
        corr = [i for i, c in enumerate(cols) if c.corr is not None and c.name == name
                and (qual is None or c.qual == qual)]
        if corr:
            return corr[0], cols[corr[0]]
        if self.outer is not None:
            outer = self.outer.lookup(qual, name)
            if outer is not None:
                # Only reached while a subquery's correlation is being discovered: the
                # column is not in this relation yet (see `Scope.lookup`).
                return -1, outer[1]
        return None

    def lookup(self, qual: str | None, name: str) -> tuple[int, Col]:
        found = self.find(qual, name)
        if found is None:
            label = f"{qual}.{name}" if qual else name
            known = sorted({(f"{c.qual}." if c.qual else "") + c.name
                            for c in self.rel.cols if not c.hidden})
            hint = f"columns in scope: {', '.join(known)}" if known else None
            if qual is not None and not any(c.qual == qual for c in self.rel.cols):
                raise UndefinedTable(f'missing FROM-clause entry for table "{qual}"', hint)
            # PostgreSQL quotes an unqualified name, not a qualified one
            shown = label if qual else f'"{name}"'
            raise UndefinedColumn(f"column {shown} does not exist", hint)
        return found

    def star(self, qual: str | None = None) -> list[int]:
        """The columns `*` (or `qual.*`) expands to, in FROM order."""
        idx = [i for i, c in enumerate(self.rel.cols) if not c.hidden and c.corr is None
               and (qual is None or c.qual == qual)]
        if qual is not None and not idx:
            raise UndefinedTable(f'missing FROM-clause entry for table "{qual}"')
        return sorted(idx, key=lambda i: self.rel.cols[i].item)
