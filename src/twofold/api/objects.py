"""Catalog objects: `Table`, `Index` and `MaterializedView`, each also a `Relation` reading it.

Contract: a `Table` writes through its storage shard (`table/<name>`) with the oracle's
timestamps; each write returns a `Written` (timestamp, rows affected) and tells the database, so
its later reads see the write (read-your-writes). Writes that read the table are checked and
serialised (`twofold.api.writes`). Rows that do not fit the schema — or, in a table SQL
created, its columns' declared types (`conform_declared`) — raise `InvalidRows`, a duplicate
primary key `UniqueViolation`; either way nothing is written.
An `Index` is a maintained arrangement on the replicas, read by key with `lookup`. A
`MaterializedView` is maintained into its own shard (`mv/<name>`) and reads like a table. A
`View` is a named query, not maintained: reading it (or defining an object over it) runs its
plan inline. A `Table` that was dropped refuses writes (`UnknownObject`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import polars as pl
import pyarrow as pa

from twofold.api.binding import bind, output_name
from twofold.api.errors import (
    InvalidArgument,
    InvalidRows,
    InvalidSchema,
    TwofoldError,
    TypeMismatch,
    UnknownObject,
)
from twofold.api.expr import NULL, Expr, _operand
from twofold.api.relation import Input, Relation
from twofold.api.schema import Schema
from twofold.api.writes import Compiled, TableWriter, Written, conform_declared, storable_rows
from twofold.engine.expr import compile_expr
from twofold.protocol import Call, Column, ColumnType, Frontier, Get, GlobalId, IndexDesc
from twofold.protocol import Expr as PExpr
from twofold.protocol import Literal as PLiteral
from twofold.sql.types import checks_declared
from twofold.storage import StorageError
from twofold.storage import Table as StorageTable
from twofold.storage.errors import InvalidUpdates, SchemaMismatch, UnknownShard, UnknownTable
from twofold.storage.table import conform_rows

if TYPE_CHECKING:
    from twofold.api.results import Result
    from twofold.api.session import AsyncDatabase

RowsLike: TypeAlias = (Sequence[Sequence[Any] | Mapping[str, Any]] | pl.DataFrame | pa.Table
                       | pa.RecordBatch)

_PROTOCOL_EXPRS = (Column, PLiteral, Call)

__all__ = ["Index", "MaterializedView", "Table", "View", "Written", "primary_key_schema"]


class Table(Relation):
    """A table: write it with `insert`, `delete`, `update`, `upsert`; read it as a relation.

    Every write returns a `Written` (its timestamp and how many rows it affected). Writes that
    read the table (deletes, updates, primary-key checks) are checked and serialised with every
    other writer: see `docs/semantics.md`, "Table writes"."""

    def __init__(self, db: AsyncDatabase, name: str, id: GlobalId, table: StorageTable,
                 primary_key: Sequence[str] | None = None) -> None:
        schema = Schema.of(table.desc)
        inp = Input(name=name, kind="table", id=id, schema=schema,
                    shard=table.shard.shard_id)
        super().__init__(db, Get(id=id), schema, {id: inp})
        self.name = name
        self.id = id
        self._table = table
        self._primary_key = tuple(primary_key) if primary_key else None
        self._writer = TableWriter(table, name, self._primary_key, self._declared)

    def __repr__(self) -> str:
        pk = f" primary_key={list(self._primary_key)}" if self._primary_key else ""
        return f"<Table {self.name!r} {self.schema.as_dict()}{pk}>"

    @property
    def primary_key(self) -> tuple[str, ...] | None:
        """The primary key's columns, or `None` for a table without one."""
        return self._primary_key

    def declared_types(self) -> list[str]:
        """The columns' declared PostgreSQL types (`CREATE TABLE`'s `Entry.pg_types`), one per
        column; empty for a table the Python API created, one an older catalog recorded, or
        when this object's name now names another table. What every write path checks a
        SQL table's rows against (`_declared`; SQL's INSERT, UPDATE and COPY)."""
        entry = getattr(self._db, "_entries", {}).get(self.name)
        pgs = list(getattr(entry, "pg_types", None) or [])
        if entry is None or entry.id != self.id or len(pgs) != len(self.schema.names):
            return []
        return pgs

    def _declared(self) -> dict[str, str]:
        """The columns whose writes their SQL-declared types check (int2/int4, float4,
        varchar(n)/char(n): `declared_types`) and those types; none for a table the Python
        API created."""
        return {n: pg for n, pg in zip(self.schema.names, self.declared_types(), strict=False)
                if checks_declared(pg)}

    # -- input ------------------------------------------------------------------------------

    def _rows(self, rows: RowsLike, what: str, schema: Schema | None = None) -> Any:
        schema = schema or self.schema
        if isinstance(rows, pl.DataFrame | pa.Table | pa.RecordBatch):
            return rows
        if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):
            raise InvalidRows(f"{what} into table {self.name!r}: expected a list of rows, a "
                              f"polars DataFrame or a pyarrow Table, got {type(rows).__name__}")
        names = schema.names
        floats = [i for i, t in enumerate(schema.types) if t.scalar == "float"]
        out: list[list[Any]] = []
        for r in rows:
            row: list[Any]
            if isinstance(r, Mapping):
                extra = set(r) - set(names)
                if extra:
                    raise InvalidRows(f"{what} into table {self.name!r}: unknown columns "
                                      f"{sorted(extra)}; columns are {list(names)}")
                row = [r.get(n) for n in names]
            elif isinstance(r, str | bytes) or not isinstance(r, Sequence):
                raise InvalidRows(f"{what} into table {self.name!r}: a row must be a tuple, "
                                  f"list or dict, got {r!r}")
            else:
                row = list(r)
            # An int in a float column is the one implicit conversion users expect.
            for i in floats:
                v = row[i] if i < len(row) else None
                if type(v) is int:
                    row[i] = float(v)
            out.append(row)
        return out

    def _frame(self, rows: RowsLike, what: str, schema: Schema | None = None, *,
               absent: bool = False) -> pl.DataFrame:
        """`rows` checked against the schema (or `schema`), in canonical column types, and as
        the table's declared types store them (`conform_declared`). With `absent`, rows those
        types could not hold (too long, out of range: `storable_rows`) are dropped instead of
        refused — rows to find (a delete's), which no row of the table can be."""
        frame = self._parsed(rows, what, schema)
        declared = self._declared()
        if not declared:
            return frame
        if absent:
            ok = storable_rows(frame, declared)
            if ok is not None:
                frame = frame.filter(ok)
        return conform_declared(frame, declared, f"{what} into table {self.name!r}")

    def _parsed(self, rows: RowsLike, what: str, schema: Schema | None = None) -> pl.DataFrame:
        schema = schema or self.schema
        try:
            data = conform_rows(self._rows(rows, what, schema), schema.desc(), self.name)
        except StorageError as e:
            raise InvalidRows(f"{what} into table {self.name!r}: {e}") from e
        frame = pl.from_arrow(data)
        assert isinstance(frame, pl.DataFrame)
        return frame

    def _keys(self, keys: Any) -> pl.DataFrame:
        pk = self._require_key("delete(keys=...)")
        schema = Schema(pk, tuple(self.schema.type_of(k, "delete") for k in pk))
        if isinstance(keys, Sequence) and not isinstance(keys, str | bytes) and len(pk) == 1:
            keys = [k if isinstance(k, Sequence | Mapping) and not isinstance(k, str | bytes)
                    else (k,) for k in keys]
        return self._frame(keys, "delete", schema, absent=True)

    def _require_key(self, what: str) -> tuple[str, ...]:
        if self._primary_key is None:
            raise InvalidArgument(f"{what} on table {self.name!r}: the table has no primary "
                                  "key (create_table(..., primary_key=...))")
        return self._primary_key

    def _compile(self, expr: Any, operation: str, label: str) -> Compiled:
        bound = bind(_operand(expr), self.schema, operation)
        value, error = compile_expr(bound.expr, list(self.schema.types))
        return Compiled(value, error, label)

    def _predicate(self, where: Any, operation: str) -> Compiled:
        if not isinstance(where, Expr):
            raise InvalidArgument(f"{operation} on table {self.name!r}: where= takes an "
                                  f"expression such as col('v') > 3, got {where!r}")
        bound = bind(where, self.schema, operation)
        if bound.ty[0] not in ("bool", NULL):
            raise TypeMismatch(operation, f"where= must be a bool predicate, got {bound.ty[0]} "
                               f"({where!r})", output_name(where))
        return self._compile(where, operation, "where")

    def _setters(self, set: Mapping[str, Any]) -> dict[str, Compiled]:
        if not isinstance(set, Mapping) or not set:
            raise InvalidArgument(f"update on table {self.name!r}: set= takes a non-empty "
                                  f"mapping of column name to expression, got {set!r}")
        out: dict[str, Compiled] = {}
        for name, value in set.items():
            target = self.schema.type_of(name, "update")
            bound = bind(_operand(value), self.schema, "update")
            scalar = bound.ty[0]
            if scalar not in (target.scalar, NULL) and (scalar, target.scalar) != (
                    "int", "float"):
                raise TypeMismatch("update", f"cannot set a {target.scalar} column to a "
                                   f"{scalar} value ({value!r})", name)
            out[name] = self._compile(value, "update", f"set {name!r}")
        return out

    # -- writes -----------------------------------------------------------------------------

    def _run(self, what: str, write: Callable[[], Written]) -> Written:
        db = self._db
        assert db is not None
        db._check_open()
        if db._catalog.get(self.name) is not self:
            raise UnknownObject(self.name, "table (it was dropped)", sorted(db._catalog))
        try:
            written = write()
        except (InvalidUpdates, SchemaMismatch) as e:  # the rows themselves
            raise InvalidRows(f"{what} into table {self.name!r}: {e}") from e
        except (UnknownShard, UnknownTable) as e:  # dropped by another process meanwhile
            raise UnknownObject(self.name, "table (it was dropped)", sorted(db._catalog)) from e
        except StorageError as e:  # the storage failed, not the rows: say so, not InvalidRows
            raise TwofoldError(f"{what} into table {self.name!r} failed in storage: {e}") from e
        db._observe_write(written.timestamp)
        return written

    def insert(self, rows: RowsLike) -> Written:
        """Insert `rows` (tuples in column order, dicts by name, a polars DataFrame or an Arrow
        table). With a primary key, a key already present (or given twice) is a
        `UniqueViolation` and nothing is written."""
        frame = self._frame(rows, "insert")
        if self._primary_key is not None:
            return self._run("insert", lambda: self._writer.insert(frame))
        n = frame.height

        def blind() -> Written:
            return Written(self._table.insert(frame.to_arrow()), n, inserted=n)

        return self._run("insert", blind)

    def delete(self, rows: RowsLike | None = None, *, keys: Any = None,
               where: Expr | None = None) -> Written:
        """Delete `rows` (each copy given removes one copy held; absent rows change nothing),
        or the rows whose primary key is in `keys` (scalars for a one-column key, else
        tuples), or every row matching `where` (an expression). Returns how many were deleted."""
        given = [x is not None for x in (rows, keys, where)]
        if sum(given) != 1:
            raise InvalidArgument(f"delete on table {self.name!r}: give exactly one of rows, "
                                  "keys= or where=")
        if rows is not None:
            frame = self._frame(rows, "delete", absent=True)
            return self._run("delete", lambda: self._writer.delete_rows(frame))
        if keys is not None:
            key_frame = self._keys(keys)
            return self._run("delete", lambda: self._writer.delete_keys(key_frame))
        pred = self._predicate(where, "delete")
        return self._run("delete", lambda: self._writer.delete_where(pred))

    def update(self, old_rows: RowsLike | None = None, new_rows: RowsLike | None = None, *,
               set: Mapping[str, Any] | None = None, where: Expr | None = None) -> Written:
        """Replace `old_rows[i]` by `new_rows[i]` for each old row the table holds (others
        change nothing), or, with `set={col: expr}`, rewrite those columns of every row matching
        `where` (all rows without it). Returns how many rows were replaced."""
        if set is not None:
            if old_rows is not None or new_rows is not None:
                raise InvalidArgument(f"update on table {self.name!r}: give old and new rows, "
                                      "or set= (with an optional where=), not both")
            sets = self._setters(set)
            pred = None if where is None else self._predicate(where, "update")
            nullable = {n: t.nullable for n, t in self.schema}
            return self._run("update", lambda: self._writer.update_where(sets, pred, nullable))
        if where is not None or old_rows is None or new_rows is None:
            raise InvalidArgument(f"update on table {self.name!r}: give old and new rows, or "
                                  "set= (with an optional where=)")
        new = self._frame(new_rows, "update")  # every new row checked: refused, not dropped
        old = self._parsed(old_rows, "update")
        if old.height != new.height:
            raise InvalidArgument(f"update on table {self.name!r}: {old.height} old rows but "
                                  f"{new.height} new rows; give one new row per old row")
        declared = self._declared()
        if declared:
            ok = storable_rows(old, declared)
            if ok is not None:  # an old row no row of the table can be: its pair does nothing
                old, new = old.filter(ok), new.filter(ok)
            old = conform_declared(old, declared, f"update into table {self.name!r}")
        return self._run("update", lambda: self._writer.update_rows(old, new))

    def update_compiled(self, set: Mapping[str, PExpr], where: PExpr | None = None) -> Written:
        """`update(set=, where=)` with protocol expressions (`twofold.protocol.Expr`, over
        this table's columns: `Column(index=i)` is column `i`), for front ends that bind and
        type expressions themselves (the SQL layer's `UPDATE`). The caller guarantees each
        `set` expression yields its column's type (an int may feed a float column) and `where`
        a bool (a NULL or false row is not updated). Checked and serialised like `update`;
        an expression's error (division by zero...) fails the write and nothing is written."""
        if not isinstance(set, Mapping) or not set:
            raise InvalidArgument(f"update on table {self.name!r}: set= takes a non-empty "
                                  f"mapping of column name to expression, got {set!r}")
        sets = {}
        for name, value in set.items():
            self.schema.type_of(name, "update")
            sets[name] = self._compile_protocol(value, "update", f"set {name!r}")
        pred = None if where is None else self._compile_protocol(where, "update", "where")
        nullable = {n: t.nullable for n, t in self.schema}
        return self._run("update", lambda: self._writer.update_where(sets, pred, nullable))

    def delete_compiled(self, where: PExpr) -> Written:
        """`delete(where=)` with a protocol expression over this table's columns (see
        `update_compiled`): deletes every row for which `where` is true (`Literal(value=True)`
        deletes all rows). Returns how many were deleted."""
        pred = self._compile_protocol(where, "delete", "where")
        return self._run("delete", lambda: self._writer.delete_where(pred))

    def _compile_protocol(self, expr: PExpr, operation: str, label: str) -> Compiled:
        if not isinstance(expr, _PROTOCOL_EXPRS):
            raise InvalidArgument(f"{operation} on table {self.name!r}: {label} must be a "
                                  f"twofold.protocol expression, got {expr!r}")
        value, error = compile_expr(expr, list(self.schema.types))
        return Compiled(value, error, label)

    def upsert(self, rows: RowsLike) -> Written:
        """Insert `rows`, replacing the row already held for each primary key. A key given
        twice is a `UniqueViolation`. Returns the counts inserted and replaced."""
        self._require_key("upsert")
        frame = self._frame(rows, "upsert")
        return self._run("upsert", lambda: self._writer.upsert(frame))

    @property
    def upper(self) -> Frontier:
        """Every time before this is complete (readable)."""
        return self._table.upper

    @property
    def since(self) -> Frontier:
        return self._table.since


def primary_key_schema(schema: Schema, primary_key: str | Sequence[str] | None,
                       what: str) -> tuple[Schema, tuple[str, ...] | None]:
    """`schema` with the primary key's columns made NOT NULL, and the key's columns; a key
    naming no column, or a column twice, is `InvalidSchema`."""
    if primary_key is None:
        return schema, None
    keys = (primary_key,) if isinstance(primary_key, str) else tuple(primary_key)
    if not keys or not all(isinstance(k, str) for k in keys):
        raise InvalidSchema(f"{what}: primary_key must name one column or a list of columns, "
                            f"got {primary_key!r}")
    missing = [k for k in keys if k not in schema.names]
    if missing:
        raise InvalidSchema(f"{what}: primary_key names unknown columns {missing}; columns are "
                            f"{list(schema.names)}")
    if len(set(keys)) != len(keys):
        raise InvalidSchema(f"{what}: primary_key names a column twice: {list(keys)}")
    types = tuple(ColumnType(t.scalar, False) if n in keys else t for n, t in schema)
    return Schema(schema.names, types), keys


class Index(Relation):
    """A maintained arrangement of a relation by `key`; `lookup` reads it by key."""

    def __init__(self, db: AsyncDatabase, name: str, id: GlobalId, build_id: GlobalId,
                 key: list[str], schema: Schema, source: Relation) -> None:
        desc = IndexDesc(on_id=build_id, key=[schema.index(k, "create_index") for k in key])
        inp = Input(name=name, kind="index", id=id, schema=schema, index=desc)
        super().__init__(db, Get(id=id), schema, {id: inp})
        self.name = name
        self.id = id
        self.build_id = build_id
        self.key = list(key)
        self.source = source
        """The relation this index maintains."""

    def __repr__(self) -> str:
        return f"<Index {self.name!r} on {self.key} {self.schema.as_dict()}>"

    def lookup(self, *keys: Any, as_of: int | None = None,
               timeout: float | None = None) -> Result:
        """The rows whose key equals one of `keys` (a scalar per key for a one-column key,
        else a tuple), blocking. With `open_async`, use `await db.lookup(index, ...)`."""
        db = self._session()
        return db._run_sync(db.lookup(self, *keys, as_of=as_of, timeout=timeout), "lookup")


class MaterializedView(Relation):
    """A relation maintained into its own storage shard; reads like a table."""

    def __init__(self, db: AsyncDatabase, name: str, id: GlobalId, read_id: GlobalId,
                 shard: str, schema: Schema, source: Relation, as_of: int,
                 sql: str | None = None) -> None:
        inp = Input(name=name, kind="view", id=read_id,
                    schema=schema, shard=shard)
        super().__init__(db, Get(id=read_id), schema, {read_id: inp})
        self.name = name
        self.id = id
        """The id of the view's sink (what the controller maintains)."""
        self.shard = shard
        self.source = source
        self.as_of = as_of
        """The first time the view is defined at: it reads from here on."""
        self.sql = sql
        """The SQL statement that created it, or `None` (created with the DSL)."""

    def __repr__(self) -> str:
        return f"<MaterializedView {self.name!r} {self.schema.as_dict()}>"


class View(Relation):
    """A named query (`db.create_view`, SQL `CREATE VIEW`): not maintained, and durable like
    every catalog object. Reading it, or defining an index or view over it, runs its plan
    inline; objects defined over it depend on it (see `Relation.views`)."""

    def __init__(self, db: AsyncDatabase, name: str, id: GlobalId, definition: Relation,
                 sql: str | None = None) -> None:
        super().__init__(db, definition.plan, definition.schema, definition.inputs,
                         {**definition.views, name: id})
        self.name = name
        self.id = id
        """The view's catalog id (nothing reads it as a collection)."""
        self.sql = sql
        """The SQL statement that created it, or `None` (created with the DSL)."""

    def __repr__(self) -> str:
        return f"<View {self.name!r} {self.schema.as_dict()}>"
