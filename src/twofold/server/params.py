"""Parameter types the client left unspecified (OID 0), inferred from where `$n` appears.

Contract: `infer_param_types(db, sql, given)` returns one type OID per parameter `$1..$n` the
statement uses (at least `len(given)`): a client-given non-zero OID is kept; otherwise the type
of the column the parameter is compared with (its declared int2/int4/float4 as PostgreSQL
infers it, else its engine scalar's), assigned to (`UPDATE ... SET c = $n`) or inserted
into (`INSERT INTO t (c, ...) VALUES ($n, ...)`), the type it is cast to (`$n::bigint`), the
type of the other operand of an operator or the other arguments of `COALESCE`/`NULLIF` (a
column, a cast, a number literal, an expression of those: `k = $1 + 1`, `$1::bigint + $2`),
`int8` for `LIMIT`/`OFFSET`, `oid[]` where cast to it (`$1::oid[]`), else `text`.
A statement that does not parse gets `text` for its parameters (its error comes at Execute).
"""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from twofold.server.statements import parse_declare
from twofold.server.types import (
    BOOL,
    BYTEA,
    FLOAT4,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    OID_ARRAY,
    OIDS,
    TEXT,
)

_T = exp.DataType.Type
_CAST_OIDS = {_T.BIGINT: INT8, _T.INT: INT4, _T.SMALLINT: INT2, _T.DOUBLE: FLOAT8,
              _T.FLOAT: FLOAT4, _T.TEXT: TEXT, _T.VARCHAR: TEXT, _T.CHAR: TEXT,
              _T.BOOLEAN: BOOL, _T.VARBINARY: BYTEA, _T.BINARY: BYTEA}
_ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)

_PARAM = re.compile(r"\$(\d+)")
_OID_ARRAY = re.compile(r"\$(\d+)\s*::\s*(?:pg_catalog\.)?oid\s*\[\s*\]", re.I)


def _columns(db: Any, names: list[str]) -> dict[str, str]:
    from twofold.sql.planner import Planner
    from twofold.sql.types import wire_declared

    planner = Planner(db)
    found: dict[str, str] = {}
    for name in names:
        try:
            rel = planner.relation(name)
        except Exception:
            continue
        for c in rel.cols:
            found.setdefault(c.name, wire_declared(c.pg) or c.column_type.scalar)
    return found


def infer_param_types(db: Any, sql: str, given: tuple[int, ...]) -> tuple[int, ...]:
    used = [int(m) for m in _PARAM.findall(sql)]
    n = max([len(given), *used]) if used or given else 0
    oids = [given[i] if i < len(given) else 0 for i in range(n)]
    if all(oids):
        return tuple(oids)
    for m in _OID_ARRAY.finditer(sql):  # `$1::oid[]` (asyncpg's type introspection)
        i = int(m.group(1)) - 1
        if i < n and oids[i] == 0:
            oids[i] = OID_ARRAY
    if (declared := parse_declare(sql)) is not None:
        sql = declared[1]  # DECLARE c CURSOR FOR query: the query's parameters
    try:
        from twofold.sql.parser import parse

        tree = parse(sql)
    except Exception:
        return tuple(o or TEXT for o in oids)
    tables = [t.name for t in tree.find_all(exp.Table)]
    cols = _columns(db, tables)

    def put(param: exp.Expr, scalar: str | None) -> None:
        if scalar is not None:
            put_oid(param, OIDS.get(scalar, TEXT))

    def put_oid(param: exp.Expr, oid: int | None) -> None:
        idx = int(param.this.name) - 1 if param.this is not None else -1
        if oid is not None and 0 <= idx < n and oids[idx] == 0:
            oids[idx] = oid

    def oid_of(e: exp.Expr, depth: int = 0) -> int | None:
        """The type OID of an operand next to a parameter, where it is plain to see."""
        if isinstance(e, exp.Paren):
            return oid_of(e.this, depth)
        if isinstance(e, exp.Column):
            scalar = cols.get(e.name)
            return None if scalar is None else OIDS.get(scalar, TEXT)
        if isinstance(e, exp.Cast):
            return _CAST_OIDS.get(e.to.this)
        if isinstance(e, exp.Literal) and not e.is_string:
            return INT8 if e.is_int else FLOAT8
        if isinstance(e, exp.Neg):
            return oid_of(e.this, depth)
        if isinstance(e, _ARITH) and depth < 8:
            return oid_of(e.left, depth + 1) or oid_of(e.right, depth + 1)
        return None

    for param in tree.find_all(exp.Parameter, exp.Placeholder):
        node: exp.Expr = param
        parent = param.parent
        while isinstance(parent, exp.Paren | exp.Neg):  # `-$1`, `($1)`: the operand's place
            node, parent = parent, parent.parent
        if isinstance(parent, exp.Cast) and parent.this is node:
            put_oid(param, _CAST_OIDS.get(parent.to.this))
        elif isinstance(parent, exp.Limit | exp.Offset):
            put(param, "int")
        elif isinstance(parent, exp.Binary):
            other = parent.right if parent.left is node else parent.left
            oid = oid_of(other)
            if oid is None and isinstance(parent, _ARITH) and \
                    isinstance(outer := parent.parent, exp.Binary):
                oid = oid_of(outer.right if outer.left is parent else outer.left)  # `k = $1 + x`
            put_oid(param, oid)
        elif isinstance(parent, exp.Coalesce | exp.Nullif):
            for other in [parent.this, *parent.expressions, parent.args.get("expression")]:
                if isinstance(other, exp.Expr) and other is not node:
                    put_oid(param, oid_of(other))
        elif isinstance(parent, exp.Tuple) and isinstance(parent.parent, exp.Values):
            ins = parent.parent.parent
            if isinstance(ins, exp.Insert):
                target = ins.this
                if isinstance(target, exp.Schema) and target.expressions:
                    names = [e.name for e in target.expressions]
                else:
                    names = list(_ordered_columns(db, target.name if target else ""))
                pos = parent.expressions.index(param)
                if pos < len(names):
                    put(param, cols.get(names[pos]))
        elif isinstance(parent, exp.In | exp.Between) and isinstance(parent.this, exp.Column):
            put(param, cols.get(parent.this.name))
    return tuple(o or TEXT for o in oids)


def _ordered_columns(db: Any, name: str) -> list[str]:
    from twofold.sql.planner import Planner

    try:
        return [c.name for c in Planner(db).relation(name).cols if not c.hidden]
    except Exception:
        return []
