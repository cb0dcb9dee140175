"""SQL type names and the engine's scalar types.

Contract: `sql_type(datatype)` maps a SQL type to the engine scalar it is stored as —
`boolean` → bool; `smallint`/`integer`/`bigint` → int (64-bit); `real`/`double precision`/
`float` → float (IEEE double); `text`/`varchar(n)`/`char(n)`/`string` → str (lengths are not
enforced); `bytea` → bytes — and refuses the rest with `FeatureNotSupported` naming the type
(`numeric` included: it is not approximated by a double). `type_name(scalar)` is the
PostgreSQL name a message (or a wire-protocol server) reports for an engine scalar, and
`PG_TYPE_OIDS` the type OIDs a pgwire server would announce for result columns.
"""

from __future__ import annotations

from typing import Final

from sqlglot import exp

from twofold.sql.errors import FeatureNotSupported

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
    "extract", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
})  # fmt: skip


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
