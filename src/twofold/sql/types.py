"""SQL type names and the engine's scalar types.

Contract: `sql_type(datatype)` maps a SQL type to the engine scalar it is stored as —
`boolean` → bool; `smallint`/`integer`/`bigint` → int (64-bit); `real`/`double precision`/
`float` → float (IEEE double); `text`/`varchar(n)`/`char(n)`/`string` → str (lengths are
enforced by `check_declared`); `bytea` → bytes — and refuses the rest with
`FeatureNotSupported` naming the type (`numeric` included: it is not approximated by a double).
`type_name(scalar)` is the PostgreSQL name a message (or a wire-protocol server) reports for an
engine scalar, and `PG_TYPE_OIDS` the type OIDs a pgwire server would announce for result columns.

`declared_type(datatype)` is the PostgreSQL type a table column was declared with (`int2`,
`int4`, `int8`, `float4`, `float8`, `text`, `varchar(n)`, `bpchar(n)`, `bool`, `bytea`): the
catalog keeps it beside the engine scalar (`Entry.pg_types`), and `check_declared(values, pg)`
makes a write into such a column behave as PostgreSQL's: an `int2`/`int4` value outside the
type's range is `22003` (`smallint out of range` / `integer out of range`), and a `float4` value
is rounded to the nearest single-precision float, as PostgreSQL stores it (`22003` when that
overflows, or a nonzero value underflows to zero); a `varchar(n)`/`bpchar(n)` text longer than n
is `22001`. `check_declared_series` is that rule over a polars column: the one implementation
SQL's INSERT/COPY and the Python API's table writes share.

A query's result column whose PostgreSQL type is a declared `int2`, `int4`, `float4` or
`varchar` (the types whose wire OID differs from the engine scalar's int8/float8/text) carries
it in the result schema as a `ColumnType` subclass (`declared_column_type`): its scalar is still
the engine's, it encodes as a plain `ColumnType` (protocol messages carry only the fields) and
equals and hashes as one (a SQL result's schema equals the DSL's); only the `Result` /
`Relation` schema of a compiled query holds it, never a plan or a catalog entry.
`wire_type(t)` is the type a wire server announces for a result `ColumnType`: the declared one
(`int2`, `int4`, `float4`, `varchar`), else the engine scalar. `unify_declared` is
PostgreSQL's result type of a set operation (or COALESCE/CASE) of declared columns.
"""

from __future__ import annotations

import functools
import re
import types
from typing import TYPE_CHECKING, ClassVar, Final

from sqlglot import exp

if TYPE_CHECKING:
    import polars as pl

from twofold.protocol import ColumnType
from twofold.sql.errors import FeatureNotSupported, NumericValueOutOfRange

_TYPES: Final = {
    exp.DType.BOOLEAN: "bool",
    exp.DType.TINYINT: "int", exp.DType.SMALLINT: "int", exp.DType.INT: "int",
    exp.DType.BIGINT: "int", exp.DType.SERIAL: "int", exp.DType.BIGSERIAL: "int",
    exp.DType.FLOAT: "float", exp.DType.DOUBLE: "float",
    exp.DType.TEXT: "str", exp.DType.VARCHAR: "str", exp.DType.CHAR: "str",
    exp.DType.NVARCHAR: "str", exp.DType.NCHAR: "str",
    exp.DType.VARBINARY: "bytes", exp.DType.BINARY: "bytes",
}  # fmt: skip

_NAMES: Final = {"bool": "boolean", "int": "bigint", "float": "double precision",
                 "str": "text", "bytes": "bytea", "null": "unknown"}

PG_TYPE_OIDS: Final = {"bool": 16, "int": 20, "float": 701, "str": 25, "bytes": 17,
                       "null": 705}
"""PostgreSQL type OIDs of the engine scalars (bigint, double precision, text, ...)."""

FUNCTIONS_UNSUPPORTED: Final = frozenset({
    "row_number", "rank", "dense_rank", "lag", "lead", "now", "mz_now", "random",
    "generate_series", "array_agg", "json_agg", "regexp_replace", "to_char", "date_trunc",
    "extract",
})  # fmt: skip


_DECLARED: Final = {
    exp.DType.BOOLEAN: "bool", exp.DType.TINYINT: "int2", exp.DType.SMALLINT: "int2",
    exp.DType.INT: "int4", exp.DType.SERIAL: "int4", exp.DType.BIGINT: "int8",
    exp.DType.BIGSERIAL: "int8", exp.DType.FLOAT: "float4", exp.DType.DOUBLE: "float8",
    exp.DType.TEXT: "text", exp.DType.NVARCHAR: "varchar", exp.DType.VARCHAR: "varchar",
    exp.DType.CHAR: "bpchar", exp.DType.NCHAR: "bpchar",
    exp.DType.VARBINARY: "bytea", exp.DType.BINARY: "bytea",
}  # fmt: skip

INT_RANGES: Final = {"int2": (-(2**15), 2**15 - 1, "smallint"),
                     "int4": (-(2**31), 2**31 - 1, "integer")}
"""The range and PostgreSQL name of the narrow integer types (int8 is the engine's own)."""

DECLARED_NAMES: Final = {"int2": "smallint", "int4": "integer", "int8": "bigint",
                         "float4": "real", "float8": "double precision", "text": "text",
                         "bool": "boolean", "bytea": "bytea", "varchar": "character varying",
                         "bpchar": "character", "numeric": "numeric"}


def declared_type(dt: exp.DataType) -> str:
    """The PostgreSQL type a column is declared as (`integer` → `int4`, `varchar(5)` →
    `varchar(5)`); call after `sql_type` accepted `dt`. `float(p)` is `float4` for p <= 24."""
    name = _DECLARED[dt.this]
    if name == "float8" and dt.expressions:  # float(p): real for p <= 24, as in PostgreSQL
        p = str(getattr(dt.expressions[0], "this", dt.expressions[0]))
        if p.isdigit() and int(p) <= 24:
            name = "float4"
    if name in ("varchar", "bpchar") and dt.expressions:
        n = dt.expressions[0]
        return f"{name}({getattr(n, 'this', n)})"
    if name == "bpchar":
        return "bpchar(1)"
    return name


def checks_declared(pg: str | None) -> bool:
    """Whether a write into a column declared `pg` is checked or rewritten by
    `check_declared_series` (int2/int4, float4, `varchar(n)`/`bpchar(n)`)."""
    from twofold.sql.pgtypes import char_limit

    return pg in ("int2", "int4", "float4") or char_limit(pg) is not None


def check_declared_series(col: pl.Series, pg: str) -> pl.Series:
    """The values of `col` (a column of the engine scalar of `pg`: Int64, Float64 or String)
    as a column declared `pg` stores them — the one implementation of PostgreSQL's write rules
    every write path shares (SQL INSERT/COPY through `check_declared`, the Python API's table
    writes directly): `NumericValueOutOfRange` (22003) for an int2/int4 value outside its
    range, or a float4 value that overflows or underflows single precision; a float4 value
    rounded to the nearest single-precision float (as PostgreSQL's float4in: NaN and
    infinities kept); a `varchar(n)`/`char(n)` text longer than n characters
    `StringDataRightTruncation` (22001) unless the characters past the n-th are spaces, which
    are dropped, and a `char(n)` value kept without its trailing spaces (as `db.sql` stores
    one). NULLs stay NULL. Vectorised in polars, no Python per value."""

    if col.len() == 0:
        return col
    bounds = INT_RANGES.get(pg)
    if bounds is not None:
        lo, hi, name = bounds
        low, high = col.min(), col.max()
        if low is not None and (low < lo or high > hi):  # type: ignore[operator]
            raise NumericValueOutOfRange(f"{name} out of range")
        return col
    if pg == "float4":
        rounded, overflow, underflow = _float4(col)
        if overflow.any():
            raise NumericValueOutOfRange("value out of range: overflow")
        if underflow.any():
            raise NumericValueOutOfRange("value out of range: underflow")
        return rounded
    from twofold.sql.errors import StringDataRightTruncation
    from twofold.sql.pgtypes import char_limit, too_long

    limit = char_limit(pg)
    if limit is None:
        return col
    kind, n = limit
    if kind == "varchar":
        longest = col.str.len_bytes().max()  # at least the characters: a cheap first test
        if longest is None or longest <= n:  # type: ignore[operator]
            return col
        if (col.str.strip_chars_end(" ").str.len_chars() > n).any():
            raise StringDataRightTruncation(too_long(kind, n))
        return col.str.slice(0, n)
    kept = col.str.strip_chars_end(" ")  # at most n characters left: it is what n keeps
    if (kept.str.len_chars() > n).any():
        raise StringDataRightTruncation(too_long(kind, n))
    return kept


def _float4(col: pl.Series) -> tuple[pl.Series, pl.Series, pl.Series]:
    """`col`'s values rounded to single precision (to nearest, ties to even; NaN and
    infinities kept), and where that overflows (a finite value turned infinite) or
    underflows (a nonzero value turned zero)."""
    import polars as pl

    doubles = col.cast(pl.Float64)
    rounded = doubles.cast(pl.Float32).cast(pl.Float64)
    overflow = rounded.is_infinite() & ~doubles.is_infinite()
    underflow = (rounded == 0.0) & (doubles != 0.0) & ~doubles.is_nan()
    return rounded, overflow, underflow


def storable_declared(col: pl.Series, pg: str) -> pl.Series:
    """Which values of `col` a column declared `pg` can hold: False exactly where
    `check_declared_series` would refuse the column for that value (an int2/int4 out of
    range, a float4 that overflows or underflows, a text too long for its `varchar(n)` /
    `char(n)` past trailing spaces); NULLs True. Such a value is in no row of the table: a
    delete of it is a delete of an absent row. Vectorised."""
    import polars as pl

    bounds = INT_RANGES.get(pg)
    if bounds is not None:
        ok = col.is_between(bounds[0], bounds[1])
    elif pg == "float4":
        _, overflow, underflow = _float4(col)
        ok = ~(overflow | underflow)
    else:
        from twofold.sql.pgtypes import char_limit

        limit = char_limit(pg)
        if limit is None:
            return pl.Series(col.name, [True] * col.len(), dtype=pl.Boolean)
        ok = col.str.strip_chars_end(" ").str.len_chars() <= limit[1]
    return ok.fill_null(True)


def check_declared(values: list[object], pg: str) -> list[object]:
    """`values` as a column declared `pg` stores them (`check_declared_series`; an integer
    beyond 64 bits in an int2/int4 column is 22003 too)."""
    if not values or not checks_declared(pg):
        return values
    import polars as pl

    bounds = INT_RANGES.get(pg)
    if bounds is not None:
        try:
            ints = pl.Series(values, dtype=pl.Int64, strict=True)
        except (OverflowError, TypeError, pl.exceptions.PolarsError):
            raise NumericValueOutOfRange(f"{bounds[2]} out of range") from None
        check_declared_series(ints, pg)
        return values
    col = (pl.Series(values, dtype=pl.Float64, strict=False) if pg == "float4"
           else pl.Series(values, dtype=pl.String))
    return check_declared_series(col, pg).to_list()


def sql_type(dt: exp.DataType) -> str:
    """The engine scalar for a SQL type; `FeatureNotSupported` for types twofold lacks."""
    scalar = _TYPES.get(dt.this)
    if scalar is None:
        name = dt.sql(dialect="postgres").lower()
        if dt.this in (exp.DType.DECIMAL, exp.DType.BIGDECIMAL):
            raise FeatureNotSupported("type numeric is not supported; use double precision "
                                      "(floating point) or bigint")
        raise FeatureNotSupported(f"type {name} is not supported")
    return scalar


def type_name(scalar: str) -> str:
    """The PostgreSQL name of an engine scalar (`int` → `bigint`)."""
    return _NAMES.get(scalar, scalar)


WIRE_DECLARED: Final = {"int2": "int", "int4": "int", "float4": "float", "varchar": "str"}
"""The declared types a result column is announced as, and their engine scalars (the others
are their engine scalar's: int8, float8, text, bool, bytea; a bpchar(n) column is text, its
values not being blank-padded here)."""
_SIZED: Final = re.compile(r"(varchar|bpchar)\((\d+)\)")
_TOWER: Final = ("int2", "int4", "int8", "float4", "float8")
_SCALAR_DEFAULT: Final = {"int": "int8", "float": "float8"}


class _Declared(ColumnType, frozen=True):
    pg: ClassVar[str] = ""

    def __eq__(self, other: object) -> bool:
        # Equal to the plain ColumnType of its fields (both ways: msgspec's own __eq__ gives
        # NotImplemented for another type), so a schema compares as the DSL's does.
        if isinstance(other, ColumnType):
            return self.scalar == other.scalar and self.nullable == other.nullable
        return NotImplemented

    def __hash__(self) -> int:
        return hash(ColumnType(self.scalar, self.nullable))


class Int2Column(_Declared, frozen=True):
    """A result column of type int2 (a smallint column, or min/max of one)."""

    pg: ClassVar[str] = "int2"


class Int4Column(_Declared, frozen=True):
    """A result column of type int4."""

    pg: ClassVar[str] = "int4"


class Float4Column(_Declared, frozen=True):
    """A result column of type float4 (its values are float4-rounded doubles)."""

    pg: ClassVar[str] = "float4"


class VarcharColumn(_Declared, frozen=True):
    """A result column of type varchar (lengths are not enforced)."""

    pg: ClassVar[str] = "varchar"


class BpcharColumn(_Declared, frozen=True):
    """A result column of type bpchar (`char(n)`, only with its length: `sized_column`)."""

    pg: ClassVar[str] = "bpchar"


_DECLARED_CLASSES: Final[dict[str, type[_Declared]]] = {
    "int2": Int2Column, "int4": Int4Column, "float4": Float4Column, "varchar": VarcharColumn}


@functools.cache
def sized_column(kind: str, n: int) -> type[_Declared]:
    """The result-column class of `varchar(n)` / `bpchar(n)` (`kind` `varchar`/`bpchar`): its
    `pg` is `varchar(n)` / `bpchar(n)`, so a wire server announces the length (RowDescription's
    type modifier n + 4) and pads a `char(n)` value to n characters, as PostgreSQL does."""
    parent = VarcharColumn if kind == "varchar" else BpcharColumn
    return types.new_class(f"{parent.__name__}{n}", (parent,), {"frozen": True},
                           lambda ns: ns.update({"pg": f"{kind}({n})"}))


ENGINE_PG: Final = {"int": "int8", "float": "float8", "str": "text", "bool": "bool",
                    "bytes": "bytea", "null": "text"}
"""The PostgreSQL type of a column of each engine scalar that has no declared type."""


def wire_declared(pg: str | None) -> str | None:
    """The type a result column declared `pg` (`int4`, `varchar(5)`) is announced as (`int4`,
    `varchar`: `WIRE_DECLARED`), else None (its engine scalar's type)."""
    base = (pg or "").split("(")[0]
    return base if base in WIRE_DECLARED else None


def declared_column_type(scalar: str, nullable: bool, pg: str | None) -> ColumnType:
    """The result-schema type of a column of engine `scalar` and declared type `pg`
    (`varchar(n)` / `bpchar(n)` keep their length: `sized_column`)."""
    sized = _SIZED.fullmatch(pg or "")
    if sized is not None and scalar == "str":
        return sized_column(sized[1], int(sized[2]))(scalar, nullable)  # type: ignore[arg-type]
    base = wire_declared(pg)
    cls = _DECLARED_CLASSES.get(base or "")
    if cls is None or scalar != WIRE_DECLARED[base or ""]:
        return ColumnType(scalar, nullable)  # type: ignore[arg-type]
    return cls(scalar, nullable)  # type: ignore[arg-type]


def wire_type(t: ColumnType) -> str:
    """What a wire server announces for a result column of type `t`: `int2`/`int4`/`float4`/
    `varchar` where declared, else the engine scalar (`int` is int8, `float` float8, ...)."""
    pg = getattr(type(t), "pg", "")
    return pg if pg else t.scalar


def unify_declared(pgs: list[str | None], scalars: list[str]) -> str | None:
    """The declared result type of a UNION/INTERSECT/EXCEPT column, COALESCE or CASE whose
    inputs have declared types `pgs` (None: the engine scalar's own, int8/float8/...) and
    engine `scalars` (`null` for an untyped NULL, which does not take part): PostgreSQL's
    numeric resolution (int2 < int4 < int8 < float4 < float8), else the one common type;
    None (the engine scalar's) when that is not one of `WIRE_DECLARED`."""
    known = [_SCALAR_DEFAULT.get(s, s) if p is None else p.split("(")[0]
             for p, s in zip(pgs, scalars, strict=True) if s != "null"]
    if not known:
        return None
    if "numeric" in known and all(k in ("numeric", "int2", "int4", "int8") for k in known):
        return "numeric"  # numeric with integers is numeric (a double rounding as numeric)
    given = [p for p, s in zip(pgs, scalars, strict=True) if s != "null"]
    if given[0] is not None and _SIZED.fullmatch(given[0]) and all(p == given[0] for p in given):
        return given[0]  # one length: PostgreSQL keeps its type modifier (char(3) padded)
    if all(k in _TOWER for k in known):
        return wire_declared(max(known, key=_TOWER.index))
    return wire_declared(known[0]) if all(k == known[0] for k in known) else None
