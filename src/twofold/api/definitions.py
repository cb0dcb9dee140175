"""`Definitions`: creating, listing and dropping the catalog's objects (tables, indexes,
materialized views) and the dataflows that maintain them.

Contract: names are unique across kinds (`ObjectExists`); an index or view is created as one
dataflow on every replica, at the latest time its inputs are complete; `drop` refuses while
other objects read the target (`DependencyError`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from twofold.api.errors import DependencyError, InvalidArgument, ObjectExists, UnknownObject
from twofold.api.inputs import Inputs
from twofold.api.objects import Index, MaterializedView, Table, primary_key_schema
from twofold.api.reads import translate
from twofold.api.relation import Relation
from twofold.api.schema import DType, Schema, parse_schema
from twofold.controller import LagWindow
from twofold.protocol import (
    BuildDesc,
    DataflowDescription,
    Frontier,
    MaterializedViewSink,
    SinkDesc,
)
from twofold.storage import StorageError
from twofold.storage import TableExists as StorageTableExists

if TYPE_CHECKING:
    from twofold.api.session import AsyncDatabase


class Definitions(Inputs):
    """Creating, listing and dropping objects; see the module docstring."""

    @property
    def _db(self) -> AsyncDatabase:
        # Objects hold the whole database (they read through it); this part is one of its bases.
        return cast("AsyncDatabase", self)

    def create_table(self, name: str, schema: dict[str, DType] | Schema, *,
                     nullable: bool | Sequence[str] = True, exist_ok: bool = False,
                     primary_key: str | Sequence[str] | None = None) -> Table:
        """Create a table: `create_table("orders", {"id": int, "amount": float},
        nullable=["amount"])`. `exist_ok=True` returns an existing table of the same schema.
        `primary_key="id"` (or a list of columns) keeps at most one row per key; its columns
        are NOT NULL."""
        self._check_name(name)
        parsed, pk = primary_key_schema(
            parse_schema(schema, nullable=nullable, what=f"create_table {name!r}"),
            primary_key, f"create_table {name!r}")
        if name in self._catalog and not exist_ok:
            raise ObjectExists(f"{name!r} already exists ({self._catalog[name]!r})")
        try:
            t = self._storage.create_table(name, parsed.desc(), exist_ok=exist_ok)
        except StorageTableExists as e:
            raise ObjectExists(f"create_table: {e}") from e
        except StorageError as e:
            raise InvalidArgument(f"create_table {name!r}: {e}") from e
        return self._register_table(name, t, pk)

    def _register_table(self, name: str, t: Any,
                        primary_key: Sequence[str] | None = None) -> Table:
        existing = self._catalog.get(name)
        if isinstance(existing, Table):
            return existing
        table = Table(self._db, name, self._new_id(), t, primary_key)
        self._catalog[name] = table
        return table

    def table(self, name: str) -> Table:
        """The table `name` (also one created earlier in the same storage file)."""
        obj = self._catalog.get(name)
        if isinstance(obj, Table):
            return obj
        if name in self._storage.list_tables():
            return self._register_table(name, self._storage.table(name))
        raise UnknownObject(name, "table", self.tables())

    def tables(self) -> list[str]:
        return sorted(set(self._storage.list_tables()))

    def get(self, name: str) -> Table | Index | MaterializedView:
        """The table, index or materialized view called `name`."""
        obj = self._catalog.get(name)
        if obj is None:
            if name in self._storage.list_tables():
                return self.table(name)
            raise UnknownObject(name, "table, index or view", sorted(self._catalog))
        return obj

    def frontier(self, obj: Table | Index | MaterializedView | str) -> Frontier:
        """The write frontier (`upper`) of a table, index or view: every earlier time is
        complete."""
        if isinstance(obj, str):
            obj = self.get(obj)
        if isinstance(obj, Index):
            return self._ctl.frontier(obj.id)
        if isinstance(obj, Table):
            return obj.upper
        return self._storage.shard(obj.shard).upper

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise InvalidArgument(f"a name must be a non-empty string without '/', got {name!r}")

    def _track(self, name: str, rel: Relation) -> None:
        for inp in rel.inputs.values():
            self._dependents.setdefault(inp.name, set()).add(name)

    async def create_index(self, name: str, relation: Relation, key: str | Sequence[str], *,
                           retain_history: float | None = None) -> Index:
        """Maintain `relation` as an arrangement keyed by `key` on the replicas. Reads of it
        (and `lookup` by key) are answered from the maintained state. `retain_history`
        (seconds) keeps that much history readable with `as_of`."""
        self._check_name(name)
        rel = self._check_relation(relation, "create_index")
        if name in self._catalog:
            raise ObjectExists(f"{name!r} already exists ({self._catalog[name]!r})")
        keys = [key] if isinstance(key, str) else list(key)
        if not keys:
            raise InvalidArgument("create_index: key must name at least one column")
        build, gid = self._new_id(), self._new_id()
        index = Index(self._db, name, gid, build, keys, rel.schema, rel)
        assert index.inputs[gid].index is not None
        indexes, sources = self._imports(rel)
        desc = DataflowDescription(
            debug_name=f"index {name}",
            source_imports=sources,
            index_imports=indexes,
            objects_to_build=[BuildDesc(id=build, plan=rel.plan)],
            index_exports={gid: (index.inputs[gid].index, rel.schema.desc())},  # type: ignore[dict-item]
            as_of=self._as_of_for(rel),
        )
        policy = None if retain_history is None else LagWindow(int(retain_history * 1000))
        with translate(f"index {name!r}"):
            await self._ctl.create_dataflow(desc, read_policy=policy)
        self._catalog[name] = index
        self._track(name, rel)
        return index

    async def create_materialized_view(self, name: str, relation: Relation) -> MaterializedView:
        """Maintain `relation` into the storage shard `mv/<name>`; read it like a table."""
        self._check_name(name)
        rel = self._check_relation(relation, "create_materialized_view")
        if name in self._catalog:
            raise ObjectExists(f"{name!r} already exists ({self._catalog[name]!r})")
        shard = f"mv/{name}"
        try:
            self._storage.create_shard(shard, rel.schema.desc())
        except StorageError as e:
            raise ObjectExists(f"create_materialized_view {name!r}: {e}") from e
        build, sink, read_id = self._new_id(), self._new_id(), self._new_id()
        indexes, sources = self._imports(rel)
        desc = DataflowDescription(
            debug_name=f"materialized view {name}",
            source_imports=sources,
            index_imports=indexes,
            objects_to_build=[BuildDesc(id=build, plan=rel.plan)],
            sink_exports={sink: SinkDesc(from_id=build, from_desc=rel.schema.desc(),
                                         connection=MaterializedViewSink(shard=shard))},
            as_of=self._as_of_for(rel),
        )
        with translate(f"materialized view {name!r}"):
            desc = await self._ctl.create_dataflow(desc)
        assert desc.as_of is not None and desc.as_of.time is not None
        view = MaterializedView(self._db, name, sink, read_id, shard, rel.schema, rel,
                                desc.as_of.time)
        self._catalog[name] = view
        self._track(name, rel)
        return view

    async def drop(self, obj: Index | MaterializedView | str) -> None:
        """Stop maintaining an index or view. Refused (`DependencyError`) while other
        indexes or views read it; tables cannot be dropped."""
        name = obj if isinstance(obj, str) else getattr(obj, "name", None)
        if not isinstance(name, str):
            raise InvalidArgument(f"drop: expected a name, Index or MaterializedView, got {obj!r}")
        target = self.get(name)
        if isinstance(target, Table):
            raise InvalidArgument(f"drop: {name!r} is a table; tables live in storage and "
                                  "cannot be dropped")
        dependents = sorted(d for d in self._dependents.get(name, set()) if d in self._catalog)
        if dependents:
            raise DependencyError(f"drop: {name!r} is read by {dependents}; drop those first")
        with translate(repr(name)):
            await self._ctl.drop(target.id)
        del self._catalog[name]
        for deps in self._dependents.values():
            deps.discard(name)

