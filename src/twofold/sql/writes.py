"""Writes: `INSERT`, `UPDATE` and `DELETE` as the table's checked, serialised writes
(`Table.insert`, `update_compiled`, `delete_compiled`), each atomic, and the declared-type
checks every write path shares (`declared_types`, `check_declared_rows`: COPY's too).

Contract: `insert` writes `VALUES` constants (quoted literals typed by their column) or a
query's rows (PostgreSQL's assignment casts applied in the dataflow: `assign`), missing
columns NULL; `update`/`delete` bind their SET/WHERE expressions over the table's columns.
Every name, type and value is checked before the first write: a value out of a declared
column's range or length fails the whole statement (22003 / 22001) and writes nothing. Each
returns the number of rows written. `statements` re-exports them.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.assign import assigned, assigned_source, pg_name, typed_select_literals
from twofold.sql.errors import (
    DatatypeMismatch,
    DuplicateColumnName,
    FeatureNotSupported,
    NotNullViolation,
    NumericValueOutOfRange,
    SqlSyntaxError,
    UndefinedColumn,
    UndefinedTable,
    WrongObjectType,
)
from twofold.sql.exprs import Binder
from twofold.sql.pgtypes import (
    char_assign,
    char_limit,
    fits,
    is_numeric,
    narrow,
    pg_of,
)
from twofold.sql.planner import Planner
from twofold.sql.scope import NULL, Col, Rel, Scope
from twofold.sql.types import (
    INT_RANGES,
    check_declared,
    check_declared_series,
    checks_declared,
    type_name,
)

if TYPE_CHECKING:
    from twofold.api.session import AsyncDatabase


_ROWS_PER_TURN = 500
"""`VALUES` rows bound between two turns of the event loop (~2-5 ms of binding), and the
most rows an INSERT frames and writes on the loop (more go to a worker thread, as COPY's):
a long INSERT never holds up the loop's other work for the whole statement."""


def _table(db: AsyncDatabase, node: exp.Expr) -> Any:
    from twofold.api.objects import Table
    from twofold.sql.statements import _exists, _name

    name = _name(node)
    if not _exists(db, name):
        raise UndefinedTable(f'relation "{name}" does not exist')
    t = db.get(name)
    if not isinstance(t, Table):
        raise WrongObjectType(f"cannot write {name!r}: it is not a table")
    return t


async def insert(db: AsyncDatabase, node: exp.Insert, params: Any) -> int:
    target = node.this
    cols_given: list[str] | None = None
    if isinstance(target, exp.Schema):
        cols_given = [c.name for c in target.expressions]
        target = target.this
    table = _table(db, target)
    names = list(table.schema.names)
    cols_given = cols_given or names
    for c in cols_given:
        if c not in names:
            raise UndefinedColumn(f'column "{c}" of relation "{table.name}" does not exist')
    if len(set(cols_given)) != len(cols_given):
        raise DuplicateColumnName("a column is named twice in INSERT")
    if node.args.get("conflict") or node.args.get("returning"):
        raise FeatureNotSupported("INSERT ... ON CONFLICT / RETURNING is not supported")
    source = node.expression
    if source is None:
        raise SqlSyntaxError("INSERT needs VALUES (...) or a query")
    planner = Planner(db, params)
    rows: list[list[Any]]
    positions = [names.index(c) for c in cols_given]
    if isinstance(source, exp.Values) and all(isinstance(r, exp.Tuple) for r in
                                              source.expressions):
        declared = declared_types(db, table)
        rows = await _values_rows(db, planner, source,
                                  [table.schema.types[p].scalar for p in positions],
                                  [names[p] for p in positions],
                                  [declared[p] for p in positions] if declared else None)
    else:
        from twofold.sql import run_planned

        declared = declared_types(db, table)
        targets = [(names[p], table.schema.types[p].scalar, declared[p] if declared else None)
                   for p in positions]
        # PostgreSQL's assignment casts (rounded doubles, numbers as text), in the dataflow
        source = typed_select_literals(source, targets)
        planned = assigned_source(planner, planner.plan_top(source), targets)
        result = await run_planned(db, planner, planned, None)
        rows = [list(r) for r in result.rows]
    full = []
    for r in rows:
        row: list[Any] = [None] * len(names)
        for p, v in zip(positions, r, strict=True):
            row[p] = v
        full.append(row)
    for j, (n, t) in enumerate(table.schema):
        if not t.nullable and any(r[j] is None for r in full):
            raise NotNullViolation(f'null value in column "{n}" of relation "{table.name}" '
                                   "violates not-null constraint")
    if not full:
        return 0
    _check_declared(db, table, full)
    if len(full) > _ROWS_PER_TURN:  # the frame built and written off the event loop, as COPY's
        return int((await asyncio.to_thread(table.insert, full)).count)
    return int(table.insert(full).count)


def declared_types(db: AsyncDatabase, table: Any) -> list[str]:
    """The declared PostgreSQL types of `table`'s columns (`Table.declared_types`: the one
    reading of `Entry.pg_types` the Python API's writes use too); empty for a table the
    Python API created or an older catalog recorded (its engine scalars')."""
    return list(table.declared_types())


def _check_declared(db: AsyncDatabase, table: Any, rows: list[list[Any]]) -> None:
    """Range-check (int2/int4, float4) `rows` in place for the declared column types, before
    anything is written: a value out of range fails the whole statement; float4 values are
    rounded to single precision (`check_declared`)."""
    for j, pg in enumerate(declared_types(db, table)):
        if checks_declared(pg):
            column = check_declared([r[j] for r in rows], pg)
            for r, v in zip(rows, column, strict=True):
                r[j] = v


def check_declared_rows(db: AsyncDatabase, table: Any, rows: Any) -> Any:
    """COPY FROM's `rows` (tuples in column order, or an Arrow table of the table's columns
    in order) as `table`'s declared column types store them — int2/int4 and float4
    range-checked (`NumericValueOutOfRange`, 22003, nothing written), float4 rounded to
    single precision — as INSERT stores them (`_check_declared`)."""
    pgs = declared_types(db, table)
    if not any(checks_declared(pg) for pg in pgs):
        return rows
    import pyarrow as pa

    if not isinstance(rows, pa.Table):
        out = [list(r) for r in rows]
        _check_declared(db, table, out)
        return [tuple(r) for r in out]
    import polars as pl

    for j, pg in enumerate(pgs):
        if not checks_declared(pg):
            continue
        col = rows.column(j)
        kept = check_declared_series(pl.Series(pl.from_arrow(col)), pg)  # one rule: types
        if pg not in INT_RANGES:  # float4 rounded, char(n) trimmed; an int column is as given
            rows = rows.set_column(j, rows.schema.field(j), kept.to_arrow().cast(col.type))
    return rows


async def _values_rows(db: AsyncDatabase, planner: Planner, values: exp.Values,
                       targets: list[str], names: list[str], pgs: list[str] | None = None
                       ) -> list[list[Any]]:
    """The rows of `VALUES` written into columns `names` (engine scalars `targets`); a value
    of another type or a computed one is assigned as PostgreSQL's assignment casts do
    (`assign.assigned`: `5` into a text column is `'5'`, `true` into an integer one `42804`,
    `1 + 1` computed); a quoted literal written into a number, boolean or bytea
    column takes the column's type (its declared PostgreSQL type `pgs`), as PostgreSQL's
    untyped literals do (`'x'` into bigint is 22P02, `'40000'` into smallint 22003 `value
    "40000" is out of range for type smallint`); an integer literal beyond the 64-bit range
    (PostgreSQL's `numeric`) into an integer column is 22003 `bigint out of range` (`integer`
    / `smallint` for those columns)."""
    from twofold.sql.planner import one_row

    width = len(targets)
    declared: list[str | None] = list(pgs) if pgs else [None] * width
    binder = Binder(planner, Scope(one_row()), clause="VALUES")
    rows: list[list[PExpr]] = []
    for i, r in enumerate(values.expressions):
        if i and i % _ROWS_PER_TURN == 0:
            await asyncio.sleep(0)  # the event loop's other work (other sessions' reads)
        if len(r.expressions) != width:
            raise SqlSyntaxError(f"INSERT has {len(r.expressions)} expressions but {width} "
                                 "target columns")
        row = []
        for v, want, pg, column in zip(r.expressions, targets, declared, names, strict=True):
            if (want in ("int", "float", "bool", "bytes") and isinstance(v, exp.Literal)
                    and v.is_string):
                e, _, _ = binder.retype_pg(v, want, pg)
            elif want == "int" and _huge_integer(v):
                name = INT_RANGES[pg][2] if pg in INT_RANGES else "bigint"
                raise NumericValueOutOfRange(f"{name} out of range")
            else:
                b = binder.bind(v)
                e, s = b[0], b[1]
                if want == "int" and isinstance(e, PLiteral) and type(e.value) is float:
                    e = PLiteral(value=_assigned_int(e.value, is_numeric(b), pg))
                elif not (isinstance(e, PLiteral) and s in (want, NULL, "int" if want ==
                                                            "float" else want)):
                    # computed, or of another type: PostgreSQL's assignment cast (42804)
                    e = assigned(planner, b, want, pg, column)
            row.append(e)
        rows.append(row)
    if all(isinstance(e, PLiteral) for r in rows for e in r):
        return [[e.value if isinstance(e, PLiteral) else None for e in r] for r in rows]
    return await _computed_rows(db, planner, rows, targets)


async def _computed_rows(db: AsyncDatabase, planner: Planner, rows: list[list[PExpr]],
                         targets: list[str]) -> list[list[Any]]:
    """The values of VALUES rows with computed expressions (`1 + 1`, `upper('a')`),
    evaluated in one dataflow: each row a map over one row, their union read once."""
    from twofold.api.joins import typed_null
    from twofold.protocol import Mfp, UnionAll
    from twofold.sql import run_planned
    from twofold.sql.planner import Planned, one_row

    width = len(targets)
    base = one_row()

    def column(e: PExpr, want: str) -> PExpr:  # a constant of the column's engine type
        if isinstance(e, PLiteral) and e.value is None:
            return typed_null(want)
        if isinstance(e, PLiteral) and want == "float" and type(e.value) is int:
            return PLiteral(value=float(e.value))
        return e

    parts = [Mfp(input=base.plan, project=list(range(1, width + 1)),
                 map=[column(e, want) for e, want in zip(r, targets, strict=True)])
             for r in rows]
    plan = parts[0] if len(parts) == 1 else UnionAll(inputs=list(parts))
    cols = [Col(f"column{j + 1}", want, True) for j, want in enumerate(targets)]
    result = await run_planned(db, planner, Planned(Rel(plan, cols), [], width), None)
    return [list(r) for r in result.rows]


def _assigned_int(value: float, numeric: bool, pg: str | None) -> int:
    """A constant double written into an integer column of declared type `pg`, as
    PostgreSQL's assignment cast: the nearest integer, ties away from zero for a `numeric`
    one (the decimal literal `2.5` is 3), to even for a double (`2.5::float8` is 2); NaN,
    infinities and values beyond `bigint` are 22003 `<type> out of range` (int2/int4 ranges
    are checked with the column's other values, `_check_declared`)."""
    name = INT_RANGES[pg][2] if pg in INT_RANGES else "bigint"
    if not math.isfinite(value):
        raise NumericValueOutOfRange(f"{name} out of range")
    if numeric:
        whole = math.floor(abs(value))
        whole += abs(value) - whole >= 0.5
        out = int(math.copysign(whole, value))
    else:
        out = round(value)  # Python's round of a float is ties to even, exactly
    if not -(2**63) <= out < 2**63:
        raise NumericValueOutOfRange(f"{name} out of range")
    return out


def _huge_integer(v: exp.Expr) -> bool:
    """Whether `v` is an integer literal (signed) outside the 64-bit range."""
    sign = 1
    while isinstance(v, exp.Neg | exp.Paren):
        sign = -sign if isinstance(v, exp.Neg) else sign
        v = v.this
    if not isinstance(v, exp.Literal) or v.is_string or not (
            str(v.this).isascii() and str(v.this).isdigit()):
        return False
    return not -(2**63) <= sign * int(v.this) < 2**63


def _bound(planner: Planner, table: Any, node: exp.Expr, label: str,
           want: str | None = None, pgs: list[str] | None = None, pg: str | None = None,
           column: str | None = None) -> PExpr:
    """`node` bound over `table`'s columns (of declared types `pgs`) as a protocol
    expression of scalar `want` — assigned to `column` (`assign.assigned`) where it is
    written into one — checked or rounded to PostgreSQL type `pg` (an int2/int4 value out
    of range fails, a float4 is rounded: `pgtypes.narrow`)."""
    declared: list[str | None] = list(pgs) if pgs else [None] * len(table.schema.names)
    rel = Rel(table.plan, [Col(n, t.scalar, t.nullable, qual=table.name, pg=p or None)
                           for (n, t), p in zip(table.schema, declared, strict=True)])
    binder = Binder(planner, Scope(rel), clause=label)
    b = binder.bind(node)
    if isinstance(node, exp.Literal) and node.is_string and want not in (None, "str") \
            and b[1] == "str":
        b = binder.retype_pg(node, want, pg)  # a quoted literal takes the column's type
    e, s, _ = b
    if binder.scope.rel is not rel:
        raise FeatureNotSupported(f"subqueries in {label} are not supported")
    if want is not None and s not in (want, NULL):
        if column is None:
            raise DatatypeMismatch(f"argument of {label} must be type {type_name(want)}, "
                                   f"not type {pg_name(pg_of(b))}")
        # PostgreSQL's assignment cast: a double rounded (rint) and checked, a number as text
        e = assigned(planner, b, want, pg, column)
        b, s = (e, want, True), want
    if pg is not None and s != NULL and not fits(pg_of(b), pg):
        e = narrow(e, pg)
    if s == "str" and char_limit(pg) is not None and pg_of(b) != pg:
        e = char_assign(e, pg)  # 22001 when too long, as PostgreSQL's assignment
    return e


async def update(db: AsyncDatabase, node: exp.Update, params: Any) -> int:
    table = _table(db, node.this)
    planner = Planner(db, params)
    if node.args.get("from_") or node.args.get("from"):
        raise FeatureNotSupported("UPDATE ... FROM is not supported")
    sets: dict[str, PExpr] = {}
    for a in node.expressions:
        if not isinstance(a, exp.EQ) or not isinstance(a.this, exp.Column):
            raise SqlSyntaxError(f"expected column = expression in SET, got {a.sql()}")
        col = a.this.name
        if col not in table.schema.names:
            raise UndefinedColumn(f'column "{col}" of relation "{table.name}" does not exist')
        if col in sets:
            raise SqlSyntaxError(f"multiple assignments to same column {col!r}")
        want = table.schema.type_of(col, "update").scalar
        declared = declared_types(db, table)
        pg = declared[table.schema.names.index(col)] if declared else None
        # As PostgreSQL's assignment: out of a smallint/integer range is 22003 and the
        # statement writes nothing; a real column stores the value rounded to float4.
        sets[col] = _bound(planner, table, a.expression, f"SET {col}", want, declared, pg,
                           column=col)
    where = node.args.get("where")
    pred = _bound(planner, table, where.this, "WHERE", "bool",
                  declared_types(db, table)) if where else None
    return int(table.update_compiled(sets, pred).count)


async def delete(db: AsyncDatabase, node: exp.Delete, params: Any) -> int:
    table = _table(db, node.this)
    planner = Planner(db, params)
    where = node.args.get("where")
    pred = _bound(planner, table, where.this if where is not None else exp.true(), "WHERE",
                  "bool", declared_types(db, table))
    return int(table.delete_compiled(pred).count)
