"""Catalog objects: `Table`, `Index` and `MaterializedView`, each also a `Relation` reading it.

Contract: a `Table` writes through its storage shard (`table/<name>`) with the oracle's
timestamps; each write returns its timestamp and tells the database, so its later reads see the
write (read-your-writes). Rows that do not fit the schema raise `InvalidRows` and write nothing.
An `Index` is a maintained arrangement on the replicas, read by key with `lookup`. A
`MaterializedView` is maintained into its own shard (`mv/<name>`) and reads like a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import polars as pl
import pyarrow as pa

from twofold.api.errors import InvalidRows
from twofold.api.relation import Input, Relation
from twofold.api.schema import Schema
from twofold.protocol import Frontier, Get, GlobalId, IndexDesc
from twofold.storage import StorageError
from twofold.storage import Table as StorageTable

if TYPE_CHECKING:
    from twofold.api.results import Result
    from twofold.api.session import AsyncDatabase

RowsLike: TypeAlias = Sequence[Sequence[Any] | Mapping[str, Any]] | pl.DataFrame | pa.Table


class Table(Relation):
    """A table: write it with `insert`, `delete`, `update`; read it as a relation."""

    def __init__(self, db: AsyncDatabase, name: str, id: GlobalId, table: StorageTable) -> None:
        schema = Schema.of(table.desc)
        inp = Input(name=name, kind="table", id=id, schema=schema,
                    shard=table.shard.shard_id)
        super().__init__(db, Get(id=id), schema, {id: inp})
        self.name = name
        self.id = id
        self._table = table

    def __repr__(self) -> str:
        return f"<Table {self.name!r} {self.schema.as_dict()}>"

    def _rows(self, rows: RowsLike, what: str) -> Any:
        if isinstance(rows, pl.DataFrame | pa.Table):
            return rows
        if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):
            raise InvalidRows(f"{what} into table {self.name!r}: expected a list of rows, a "
                              f"polars DataFrame or a pyarrow Table, got {type(rows).__name__}")
        names = self.schema.names
        floats = [i for i, t in enumerate(self.schema.types) if t.scalar == "float"]
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

    def _write(self, parts: list[tuple[RowsLike, int]], what: str) -> int:
        db = self._db
        assert db is not None
        db._check_open()
        try:
            if len(parts) == 1:
                rows, diff = parts[0]
                converted = self._rows(rows, what)
                ts = (self._table.insert(converted) if diff > 0
                      else self._table.delete(converted))
            else:
                (old, _), (new, _) = parts
                ts = self._table.update(self._rows(old, what), self._rows(new, what))
        except StorageError as e:
            if isinstance(e, InvalidRows):
                raise
            raise InvalidRows(f"{what} into table {self.name!r}: {e}") from e
        db._observe_write(ts)
        return ts

    def insert(self, rows: RowsLike) -> int:
        """Insert `rows` (tuples in column order, dicts by name, or a DataFrame); returns the
        write's timestamp."""
        return self._write([(rows, 1)], "insert")

    def delete(self, rows: RowsLike) -> int:
        """Retract `rows` (each once; they should be present). Returns the timestamp."""
        return self._write([(rows, -1)], "delete")

    def update(self, old_rows: RowsLike, new_rows: RowsLike) -> int:
        """Replace `old_rows` by `new_rows` at one timestamp; returns it."""
        return self._write([(old_rows, -1), (new_rows, 1)], "update")

    @property
    def upper(self) -> Frontier:
        """Every time before this is complete (readable)."""
        return self._table.upper

    @property
    def since(self) -> Frontier:
        return self._table.since


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
                 shard: str, schema: Schema, source: Relation, as_of: int) -> None:
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

    def __repr__(self) -> str:
        return f"<MaterializedView {self.name!r} {self.schema.as_dict()}>"
