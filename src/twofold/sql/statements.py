"""Executing statements: DDL and DML as the Python API's catalog operations and table writes.

Contract, per statement kind (`twofold.sql.execute` dispatches here):

- `CREATE TABLE` → `db.create_table(name, schema, nullable=, primary_key=)`, returns the
  `Table`; `IF NOT EXISTS` → `exist_ok=True`.
- `CREATE VIEW` → `db.create_view` (a durable named query, not maintained; planned inline
  where it is read, the statement's text kept for `SHOW CREATE`); `CREATE MATERIALIZED VIEW` →
  `db.create_materialized_view`; `CREATE [DEFAULT] INDEX` → `db.create_index` keyed by the
  named columns (every column for `DEFAULT`).
- `DROP TABLE|VIEW|MATERIALIZED VIEW|INDEX [IF EXISTS] name [CASCADE]` → `db.drop` (without
  `CASCADE` refused with `2BP01` naming the objects that read it).
- `INSERT INTO t [(cols)] VALUES ... | query` → `Table.insert` (missing columns are NULL);
  `UPDATE t SET c = e [WHERE p]` → `Table.update(set=, where=)`; `DELETE FROM t [WHERE p]` →
  `Table.delete(where=)`: the table's checked, serialised writes; each returns the row count.

Nothing is half-applied: every name and type is checked before the first write or catalog
change, and the writes themselves are atomic.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

from sqlglot import exp

from twofold.api.errors import DependencyError, ObjectExists, TwofoldError, UnknownObject
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.assign import assigned, assigned_source, pg_name
from twofold.sql.creation import check_first_contents
from twofold.sql.errors import (
    DatatypeMismatch,
    DependentObjects,
    DuplicateColumnName,
    DuplicateObject,
    FeatureNotSupported,
    NotNullViolation,
    NumericValueOutOfRange,
    SqlSyntaxError,
    UndefinedColumn,
    UndefinedObject,
    UndefinedTable,
    WrongObjectType,
)
from twofold.sql.exprs import Binder
from twofold.sql.pgtypes import (
    char_assign,
    char_limit,
    check_chars,
    fits,
    is_numeric,
    narrow,
    pg_of,
)
from twofold.sql.planner import Planner
from twofold.sql.scope import NULL, Col, Rel, Scope
from twofold.sql.types import (
    ENGINE_PG,
    INT_RANGES,
    check_declared,
    declared_type,
    sql_type,
    type_name,
)

if TYPE_CHECKING:
    from twofold.api.session import AsyncDatabase


def _name(node: exp.Expr) -> str:
    table = node.this if isinstance(node, exp.Schema) else node
    if isinstance(table, exp.Table):
        if table.db and table.db not in ("public", "materialize"):
            raise FeatureNotSupported(f"schemas are not supported ({table.db}.{table.name})")
        return table.name
    return node.name


def create_table(db: AsyncDatabase, node: exp.Create) -> Any:
    schema = node.this
    if not isinstance(schema, exp.Schema):
        raise FeatureNotSupported("CREATE TABLE ... AS is not supported; create the table, "
                                  "then INSERT INTO ... SELECT")
    name = _name(schema)
    cols: dict[str, Any] = {}
    declared: list[str] = []
    nullable: list[str] = []
    pk: list[str] = []
    for d in schema.expressions:
        if isinstance(d, exp.ColumnDef):
            cname = d.name
            if cname in cols:
                raise DuplicateColumnName(f"column {cname!r} specified more than once")
            kind = d.args.get("kind")
            if kind is None:
                raise SqlSyntaxError(f"column {cname!r} needs a type")
            cols[cname] = sql_type(kind)
            declared.append(declared_type(kind))
            not_null = False
            for c in d.constraints:
                k = c.kind
                if isinstance(k, exp.NotNullColumnConstraint):
                    not_null = not k.args.get("allow_null")
                elif isinstance(k, exp.PrimaryKeyColumnConstraint):
                    pk.append(cname)
                    not_null = True
                elif isinstance(k, exp.DefaultColumnConstraint):
                    raise FeatureNotSupported("column DEFAULT values are not supported")
                else:
                    raise FeatureNotSupported(f"column constraint {c.sql()} is not supported")
            if not not_null:
                nullable.append(cname)
        elif isinstance(d, exp.PrimaryKey):
            if pk:
                raise SqlSyntaxError(f"multiple primary keys for table {name!r} are not "
                                     "allowed")
            pk = [str(e.name) for e in d.expressions]
        else:
            raise FeatureNotSupported(f"table constraint {d.sql()} is not supported")
    for key in pk:
        if key not in cols:
            raise UndefinedColumn(f"column {key!r} named in key does not exist")
        if key in nullable:
            nullable.remove(key)
    try:
        return db.create_table(name, cols, nullable=nullable, exist_ok=bool(node.args.get(
            "exists")), primary_key=pk or None, pg_types=declared)
    except ObjectExists as e:
        raise DuplicateObject(f'relation "{name}" already exists') from e


def _relation_of(planner: Planner, rel: Rel, visible: int, what: str) -> Any:
    from twofold.api.relation import Relation
    from twofold.api.schema import Schema

    cols = rel.cols[:visible]
    names = [c.name for c in cols]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise DuplicateColumnName(f"{what}: column {sorted(dup)[0]!r} specified more than "
                                  "once; give the columns distinct aliases")
    plan = rel.plan
    if visible != len(rel.cols):
        from twofold.protocol import Mfp

        plan = Mfp(input=plan, project=list(range(visible)))
    from twofold.sql.flatten import flatten_plan

    return Relation(planner.db, flatten_plan(plan, rel.inputs),
                    Schema(tuple(names), tuple(c.column_type for c in cols)), rel.inputs,
                    planner.views_read)


async def create_view(db: AsyncDatabase, node: exp.Create, text: str, params: Any) -> Any:
    name = _name(node.this)
    query = node.expression
    if query is None:
        raise SqlSyntaxError(f"CREATE VIEW {name} needs AS <query>")
    props = node.args.get("properties")
    materialized = props is not None and any(isinstance(p, exp.MaterializedProperty)
                                             for p in props.expressions)
    exists = bool(node.args.get("exists"))
    if _exists(db, name):
        if exists:
            return db.get(name)
        if node.args.get("replace"):
            raise FeatureNotSupported(f"CREATE OR REPLACE of an existing object ({name!r}) is "
                                      "not supported; DROP it, then CREATE it")
        raise DuplicateObject(f'relation "{name}" already exists')
    alias_cols = None
    if isinstance(node.this, exp.Schema):
        alias_cols = [c.name for c in node.this.expressions]
    planner = Planner(db, params)
    rel = planner.plan_query(query)
    if alias_cols:
        rel = rel.with_qual(None, alias_cols)
    relation = _relation_of(planner, rel, len(rel.cols), f"CREATE VIEW {name}")
    pgs = recorded_types(rel.cols)
    try:
        if materialized:
            view = await db.create_materialized_view(name, relation, pg_types=pgs)
            await check_first_contents(db, view)  # PostgreSQL runs the query: its errors
            return view
        return db.create_view(name, relation, sql=text.strip().rstrip(";").strip(),
                              pg_types=pgs)
    except ObjectExists as e:  # created by another session meanwhile
        raise DuplicateObject(f'relation "{name}" already exists') from e


def _exists(db: AsyncDatabase, name: str) -> bool:
    try:
        db.get(name)
    except UnknownObject:
        return False
    return True


async def create_index(db: AsyncDatabase, node: Any, params: Any) -> Any:
    on = node.args["table"].name
    planner = Planner(db, params)
    rel = planner.relation(on)
    scope = Scope(rel)
    keys: list[str] = []
    for e in node.expressions or []:
        if not isinstance(e, exp.Column):
            raise FeatureNotSupported("indexes on expressions are not supported; index "
                                      "columns (or a view that computes the expression)")
        keys.append(rel.cols[scope.lookup(None, e.name)[0]].name)
    if not keys:
        keys = [c.name for c in rel.cols]
    name = node.this.name if node.this is not None else (
        f"{on}_primary_idx" if node.args.get("default") else f"{on}_{'_'.join(keys)}_idx")
    if _exists(db, name):
        if node.args.get("exists"):
            return db.get(name)
        raise DuplicateObject(f'relation "{name}" already exists')
    source = db.get(on) if _exists(db, on) else _relation_of(planner, rel, len(rel.cols), on)
    return await db.create_index(name, source, key=keys, pg_types=recorded_types(rel.cols))


def recorded_types(cols: list[Col]) -> list[str]:
    """What a SQL view, materialized view or index records of its columns' declared types
    (`Entry.pg_types`): each column's, else its engine scalar's (`int8`, `text`, ...); a
    `numeric` column (a double that rounds as numeric) is recorded as `numeric`, so reads of
    the view round it as PostgreSQL's (`x::integer` of a view's 2.5 is 3)."""
    return [c.pg or ENGINE_PG.get(c.scalar, "text") for c in cols]


async def drop(db: AsyncDatabase, node: exp.Drop) -> int:
    kind = (node.args.get("kind") or "").upper()
    props = node.args.get("materialized")
    if props:
        kind = "MATERIALIZED VIEW"
    tables = node.args.get("tables") or [node.this]
    if any(t is None for t in tables):
        raise SqlSyntaxError("DROP needs the name of an object")
    cascade = bool(node.args.get("cascade"))
    # Every name is checked before anything is dropped; then all go in one catalog change.
    names: list[str] = []
    for t in tables:
        name = _name(t)
        if not _exists(db, name):
            if node.args.get("exists"):
                continue
            if kind == "INDEX":  # PostgreSQL: an index is an object, not a relation here
                raise UndefinedObject(f'index "{name}" does not exist')
            kind_name = kind.lower() if kind else "relation"
            raise UndefinedTable(f'{kind_name} "{name}" does not exist')
        obj = db.get(name)
        actual = _KIND_NAMES.get(type(obj).__name__, "").upper()
        if kind and actual and kind != actual and not (kind == "VIEW" and actual ==
                                                          "MATERIALIZED VIEW"):
            raise WrongObjectType(f"{name!r} is not a {kind.lower()} (it is a "
                                  f"{actual.lower()})")
        if name not in names:
            names.append(name)
    try:
        if len(names) == 1:
            await db.drop(names[0], cascade=cascade)
        elif names:
            await db.drop_all(names, cascade=cascade)
    except DependencyError as e:
        raise _dependents_error(db, names, e) from None
    return 0


_KIND_NAMES: Final = {"Table": "table", "Index": "index", "MaterializedView": "materialized view",
                      "View": "view"}


def _dependents_error(db: AsyncDatabase, names: list[str], e: DependencyError
                      ) -> DependentObjects:
    """PostgreSQL's 2BP01 for a DROP others depend on, with its HINT (the Python API's
    message names `cascade=True` instead); the dependents in the hint's place of DETAIL."""
    hint = "Use DROP ... CASCADE to drop the dependent objects too."
    name = e.name or names[0]
    if len(names) > 1:
        out = DependentObjects("cannot drop desired object(s) because other objects depend "
                               "on them", hint)
    else:
        kind = _KIND_NAMES.get(type(db.get(name)).__name__, "relation") \
            if _exists(db, name) else "relation"
        out = DependentObjects(f"cannot drop {kind} {name} because other objects depend on "
                               "it", hint)
    out.name, out.dependents = name, e.dependents
    return out


def _table(db: AsyncDatabase, node: exp.Expr) -> Any:
    from twofold.api.objects import Table

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
        rows = _literal_rows(planner, source,
                             [table.schema.types[p].scalar for p in positions],
                             [declared[p] for p in positions] if declared else None)
    else:
        from twofold.sql import run_planned

        declared = declared_types(db, table)
        targets = [(names[p], table.schema.types[p].scalar, declared[p] if declared else None)
                   for p in positions]
        # PostgreSQL's assignment casts (rounded doubles, numbers as text), in the dataflow
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
    return int(table.insert(full).count)


def declared_types(db: AsyncDatabase, table: Any) -> list[str]:
    """The declared PostgreSQL types of `table`'s columns (`Entry.pg_types`); empty for a
    table the Python API created or an older catalog recorded (its engine scalars')."""
    entry = db._entries.get(table.name)
    if entry is None or len(entry.pg_types) != len(table.schema.names):
        return []
    return list(entry.pg_types)


def _check_declared(db: AsyncDatabase, table: Any, rows: list[list[Any]]) -> None:
    """Range-check (int2/int4, float4) `rows` in place for the declared column types, before
    anything is written: a value out of range fails the whole statement; float4 values are
    rounded to single precision (`check_declared`)."""
    for j, pg in enumerate(declared_types(db, table)):
        if pg in ("int2", "int4", "float4") or char_limit(pg) is not None:
            column = check_declared([r[j] for r in rows], pg)
            for r, v in zip(rows, column, strict=True):
                r[j] = v


def check_declared_rows(db: AsyncDatabase, table: Any, rows: Any) -> Any:
    """COPY FROM's `rows` (tuples in column order, or an Arrow table of the table's columns
    in order) as `table`'s declared column types store them — int2/int4 and float4
    range-checked (`NumericValueOutOfRange`, 22003, nothing written), float4 rounded to
    single precision — as INSERT stores them (`_check_declared`)."""
    pgs = declared_types(db, table)
    if not any(pg in ("int2", "int4", "float4") or char_limit(pg) for pg in pgs):
        return rows
    import pyarrow as pa

    if not isinstance(rows, pa.Table):
        out = [list(r) for r in rows]
        _check_declared(db, table, out)
        return [tuple(r) for r in out]
    import numpy as np
    import pyarrow.compute as pc

    cols = list(rows.columns)
    for j, pg in enumerate(pgs):
        col = cols[j]
        if pg in INT_RANGES:
            lo, hi, what = INT_RANGES[pg]
            mm = pc.min_max(col)
            if mm["min"].is_valid and (mm["min"].as_py() < lo or mm["max"].as_py() > hi):
                raise NumericValueOutOfRange(f"{what} out of range")
        elif pg == "float4":  # refused as `check_declared` refuses it, and rounded
            with np.errstate(over="ignore", under="ignore"):
                values = col.to_numpy(zero_copy_only=False).astype(np.float64)
                rounded = values.astype(np.float32).astype(np.float64)
            if (np.isinf(rounded) & ~np.isinf(values)).any():
                raise NumericValueOutOfRange("value out of range: overflow")
            if ((rounded == 0.0) & (values != 0.0) & ~np.isnan(values)).any():
                raise NumericValueOutOfRange("value out of range: underflow")
            single = pc.cast(pc.cast(col, pa.float32(), safe=False), col.type, safe=False)
            rows = rows.set_column(j, rows.schema.field(j), single)
        elif char_limit(pg) is not None:
            import polars as pl

            kept = check_chars(pl.from_arrow(col).to_list(), pg)  # type: ignore[union-attr]
            rows = rows.set_column(j, rows.schema.field(j), pa.array(kept, col.type))
    return rows


def _literal_rows(planner: Planner, values: exp.Values, targets: list[str],
                  pgs: list[str] | None = None) -> list[list[Any]]:
    """The constant rows of `VALUES`; a quoted literal written into a number, boolean or bytea
    column takes the column's type (its declared PostgreSQL type `pgs`), as PostgreSQL's
    untyped literals do (`'x'` into bigint is 22P02, `'40000'` into smallint 22003 `value
    "40000" is out of range for type smallint`); an integer literal beyond the 64-bit range
    (PostgreSQL's `numeric`) into an integer column is 22003 `bigint out of range` (`integer`
    / `smallint` for those columns)."""
    from twofold.sql.planner import one_row

    width = len(targets)
    declared: list[str | None] = list(pgs) if pgs else [None] * width
    binder = Binder(planner, Scope(one_row()), clause="VALUES")
    rows = []
    for r in values.expressions:
        if len(r.expressions) != width:
            raise SqlSyntaxError(f"INSERT has {len(r.expressions)} expressions but {width} "
                                 "target columns")
        row = []
        for v, want, pg in zip(r.expressions, targets, declared, strict=True):
            if (want in ("int", "float", "bool", "bytes") and isinstance(v, exp.Literal)
                    and v.is_string):
                e, _, _ = binder.retype_pg(v, want, pg)
            elif want == "int" and _huge_integer(v):
                name = INT_RANGES[pg][2] if pg in INT_RANGES else "bigint"
                raise NumericValueOutOfRange(f"{name} out of range")
            else:
                b = binder.bind(v)
                e = b[0]
                if want == "int" and isinstance(e, PLiteral) and type(e.value) is float:
                    e = PLiteral(value=_assigned_int(e.value, is_numeric(b), pg))
            if not isinstance(e, PLiteral):
                raise FeatureNotSupported("INSERT ... VALUES takes constants; use INSERT ... "
                                          "SELECT for computed rows")
            row.append(e.value)
        rows.append(row)
    return rows


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


def translate_write_error(e: TwofoldError) -> TwofoldError:
    return e
