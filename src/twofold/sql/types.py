"""SQL type names and the engine's scalar types.

Contract: `sql_type(datatype)` maps a SQL type to the engine scalar it is stored as —
`boolean` → bool; `smallint`/`integer`/`bigint` → int (64-bit); `real`/`double precision`/
`float` → float (IEEE double); `text`/`varchar(n)`/`char(n)`/`string` → str (lengths are not
enforced); `bytea` → bytes — and refuses the rest with `FeatureNotSupported` naming the type
(`numeric` included: it is not approximated by a double). `type_name(scalar)` is the
PostgreSQL name a message (or a wire-protocol server) reports for an engine scalar, and
`PG_TYPE_OIDS` the type OIDs a pgwire server would announce for result columns.

`declared_type(datatype)` is the PostgreSQL type a table column was declared with (`int2`,
`int4`, `int8`, `float4`, `float8`, `text`, `varchar(n)`, `bpchar(n)`, `bool`, `bytea`): the
catalog keeps it beside the engine scalar (`Entry.pg_types`), and `check_declared(values, pg)`
makes a write into such a column behave as PostgreSQL's: an `int2`/`int4` value outside the
type's range is `22003` (`smallint out of range` / `integer out of range`), and a `float4` value
is rounded to the nearest single-precision float (`22003` when that overflows, or a nonzero
value underflows to zero).
"""

from __future__ import annotations

import math
from typing import Final

from sqlglot import exp

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
                         "bpchar": "character"}


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


def check_declared(values: list[object], pg: str) -> list[object]:
    """`values` as a column declared `pg` stores them: `NumericValueOutOfRange` (22003) for an
    int2/int4 value outside its range, or a float4 value that overflows or underflows single
    precision (kept at double precision otherwise)."""
    bounds = INT_RANGES.get(pg)
    if bounds is not None:
        lo, hi, name = bounds
        for v in values:
            if v is not None and not lo <= v <= hi:  # type: ignore[operator]
                raise NumericValueOutOfRange(f"{name} out of range")
        return values
    if pg == "float4":
        # Refused as PostgreSQL refuses it; stored as the double written, not rounded: result
        # columns are announced and printed as float8, so a float4-rounded 0.1 would read
        # back as 0.10000000149011612 where PostgreSQL prints 0.1 (docs/sql.md).
        import numpy as np

        with np.errstate(over="ignore", under="ignore"):
            for v in values:
                if v is None:
                    continue
                r = float(np.float32(v))  # type: ignore[arg-type]
                if math.isinf(r) and not math.isinf(v):  # type: ignore[arg-type]
                    raise NumericValueOutOfRange("value out of range: overflow")
                if r == 0.0 and v != 0.0:
                    raise NumericValueOutOfRange("value out of range: underflow")
        return values
    return values


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
