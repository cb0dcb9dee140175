"""PostgreSQL's assignment casts: what a computed value becomes when `INSERT ... SELECT` or
`UPDATE ... SET` writes it into a column of another type.

Contract of `assigned(planner, b, want, pg, column)`: the protocol expression of bound `b`
(`exprs.B`, possibly `pgtypes.Typed`) as written into column `column` of engine scalar `want`
and declared PostgreSQL type `pg` (None: the engine scalar's own):

- the same scalar, or an untyped NULL: `b` as it is;
- an integer into a double column: converted;
- a double into an integer column: the nearest integer, ties to even (`rint`) — ties away
  from zero where `b` is `numeric` (`pgtypes.is_numeric`: `2.5`, a VALUES column of decimal
  literals) — NaN, infinities and values beyond the column's range failing with
  `<type> out of range` (22003), as PostgreSQL's float8 / numeric to int2/int4/int8 cast;
- an integer, double or boolean into a text column (`text`, `varchar(n)`, `char(n)`): its text
  as PostgreSQL's output function writes it (`1`, `2.5`, `1e+30`, a real's float4out
  digits, `true`) — PostgreSQL's I/O conversion, which assignment allows to string types;
- anything else (boolean or text into an integer, an integer into a boolean, text into
  bytea, ...): `DatatypeMismatch` (42804) `column "i" is of type integer but expression is of
  type boolean`, PostgreSQL's message.

The range of an `int2`/`int4` column and the length of a `varchar(n)`/`char(n)` one are
checked by the caller (`pgtypes.narrow`, `char_assign`, or `types.check_declared` over the
rows), as for values of the column's own type. `pg_name(pg)` is a declared type's name as
PostgreSQL's messages write it (`integer`, `character varying(3)`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from sqlglot import exp

from twofold.protocol import Column, Mfp
from twofold.protocol import Literal as PLiteral
from twofold.sql.errors import DatatypeMismatch, SqlSyntaxError
from twofold.sql.exprs import call
from twofold.sql.pgtypes import Typed, base, char_limit, clamp_float, is_numeric, pg_of
from twofold.sql.scope import NULL, Rel
from twofold.sql.types import DECLARED_NAMES, ENGINE_PG

if TYPE_CHECKING:
    from twofold.protocol import Expr as PExpr
    from twofold.sql.planner import Planned, Planner


def pg_name(pg: str | None) -> str:
    """PostgreSQL's name of declared type `pg` in messages: `integer`, `character(3)`."""
    if pg is None:
        return "unknown"
    limit = char_limit(pg)
    name = DECLARED_NAMES.get(base(pg) or "", pg)
    return name if limit is None else f"{name}({limit[1]})"


def assigned(planner: Planner, b: Any, want: str, pg: str | None, column: str) -> PExpr:
    """`b` written into `column` (engine scalar `want`, declared `pg`): see the module."""
    e, s, _ = b
    if s in (want, NULL):
        return e  # type: ignore[no-any-return]
    if (s, want) == ("int", "float"):
        return planner.coerce(b, "float")
    if (s, want) == ("float", "int"):
        return planner.cast_expr(clamp_float(e, pg), s, want, numeric=is_numeric(b))
    if want == "str" and s in ("int", "float", "bool"):
        numeric = getattr(b, "numeric_text", None)
        if numeric is not None:  # a decimal literal: numeric's text, as written (`1.50`)
            return PLiteral(value=numeric)
        if s == "float" and base(pg_of(b)) == "float4":
            return call("float4_text", e)  # float4out's digits, as `::text`
        return planner.cast_expr(e, s, "str")
    target = pg or ENGINE_PG.get(want, want)
    raise DatatypeMismatch(f'column "{column}" is of type {pg_name(target)} but expression is '
                           f"of type {pg_name(pg_of(b))}")


def assigned_source(planner: Planner, planned: Planned,
                    targets: list[tuple[str, str, str | None]]) -> Planned:
    """`planned` (an INSERT's source query) with its visible columns assigned to `targets`
    (`(name, scalar, declared pg)` each); 42601 when the widths differ."""
    from twofold.sql.planner import Planned

    rel, visible = planned.rel, planned.visible
    if visible != len(targets):
        more = "more" if visible > len(targets) else "fewer"
        raise SqlSyntaxError(f"INSERT has {more} expressions than target columns")
    maps: list[PExpr] = []
    project = list(range(len(rel.cols)))
    cols = list(rel.cols)
    for j, (name, want, pg) in enumerate(targets):
        c = rel.cols[j]
        e = assigned(planner, Typed(Column(index=j), c.scalar, c.nullable, c.pg), want, pg,
                     name)
        if not (isinstance(e, Column) and e.index == j):
            maps.append(e)
            project[j] = len(rel.cols) + len(maps) - 1
            cols[j] = replace(c, scalar=want, pg=None)
    if not maps:
        return planned
    plan = Mfp(input=rel.plan, map=maps, project=project)
    return Planned(Rel(plan, cols, dict(rel.inputs)), list(planned.order), visible)


_SQL_TYPES: Final = {"int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
                     "float8": "double precision", "bool": "boolean", "bytea": "bytea"}
_SCALAR_SQL: Final = {"int": "bigint", "float": "double precision", "bool": "boolean",
                      "bytes": "bytea"}


def typed_select_literals(source: exp.Expr, targets: list[tuple[str, str, str | None]]
                          ) -> exp.Expr:
    """`INSERT ... SELECT`'s `source` with each quoted literal that is a whole select-list
    item of a plain `SELECT` (no DISTINCT, no set operation) read as its target column's
    type, as PostgreSQL types such an unknown literal (`INSERT INTO t (i) SELECT '5'` writes
    5; `'x'` is 22P02, `'40000'` into a smallint 22003); elsewhere a quoted literal is text."""
    if not isinstance(source, exp.Select) or source.args.get("distinct"):
        return source
    items = source.expressions
    if len(items) != len(targets) or not any(_quoted(i) for i in items):
        return source
    out = source.copy()
    for item, (_, want, pg) in zip(out.expressions, targets, strict=True):
        lit = item.this if isinstance(item, exp.Alias) else item
        name = _SQL_TYPES.get(pg or "") or _SCALAR_SQL.get(want)
        if _quoted(item) and name is not None:
            lit.replace(exp.Cast(this=lit.copy(), to=exp.DataType.build(name)))
    return out


def _quoted(item: exp.Expr) -> bool:
    lit = item.this if isinstance(item, exp.Alias) else item
    return isinstance(lit, exp.Literal) and lit.is_string


__all__ = ["assigned", "assigned_source", "pg_name", "typed_select_literals"]
