"""`Definitions`: creating, listing and dropping the catalog's objects (tables, views, indexes,
materialized views) and the dataflows that maintain them.

Contract: every create and drop is first a change of the durable catalog (`twofold.catalog`,
one compare-and-append), then of this session's objects and dataflows — so it survives the
process, and of two processes creating one name exactly one wins. Names are unique across
kinds: creating an existing name is `ObjectExists`, unless `exist_ok=True` and the definitions
match (the existing object is returned); otherwise the error says how they differ. An index or
view is created as one dataflow on every replica, at the latest time its inputs are complete
(if that fails, the entry is removed again). `drop` refuses while other objects read the target
(`DependencyError` naming them) unless `cascade=True`, which drops them too. Ids come from the
catalog's allocator and are never reused. A view (`create_view`) is only a catalog entry: a
named query whose plan is inlined where it is read. Dropping a table removes its entry; its
shard is left in storage as garbage (storage cannot delete a shard), and a table created again
under that name gets a fresh shard (`table/<name>/<id>`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from twofold.api.catalog_sync import CatalogObject, CatalogSync
from twofold.api.errors import DependencyError, InvalidArgument, ObjectExists, UnknownObject
from twofold.api.objects import Index, MaterializedView, Table, View, primary_key_schema
from twofold.api.relation import Relation
from twofold.api.schema import DType, Schema, parse_schema
from twofold.catalog import (
    CatalogConflict,
    CatalogState,
    Change,
    Entry,
    EntryExists,
    HasDependents,
    InputRef,
    MissingDependency,
    UnknownEntry,
    differences,
)
from twofold.protocol import Frontier, GlobalId
from twofold.storage import StorageError
from twofold.storage.table import TABLE_PREFIX

_UNSET: Final = GlobalId.user(0)
"""The id of a requested entry before the catalog allocates its ids."""


class Definitions(CatalogSync):
    """Creating, listing and dropping objects; see the module docstring."""

    # -- tables ---------------------------------------------------------------------------------

    def create_table(self, name: str, schema: dict[str, DType] | Schema, *,
                     nullable: bool | Sequence[str] = True, exist_ok: bool = False,
                     primary_key: str | Sequence[str] | None = None,
                     pg_types: Sequence[str] | None = None) -> Table:
        """Create a table: `create_table("orders", {"id": int, "amount": float},
        nullable=["amount"])`. `exist_ok=True` returns an existing table of the same schema.
        `primary_key="id"` (or a list of columns) keeps at most one row per key; its columns
        are NOT NULL. `pg_types` (SQL `CREATE TABLE` passes it) records each column's declared
        PostgreSQL type in the catalog (`Entry.pg_types`)."""
        self._check_name(name)
        what = f"create_table {name!r}"
        parsed, pk = primary_key_schema(parse_schema(schema, nullable=nullable, what=what),
                                        primary_key, what)
        request = Entry(name=name, kind="table", id=_UNSET, desc=parsed.desc(),
                        primary_key=list(pk or []), pg_types=list(pg_types or []))
        obj = self._create(request, exist_ok, "create_table")
        assert isinstance(obj, Table)
        return obj

    def table(self, name: str) -> Table:
        """The table `name` (also one created earlier, or by another process)."""
        self._refresh()
        obj = self._catalog.get(name)
        if isinstance(obj, Table):
            return obj
        raise UnknownObject(name, "table", self.tables())

    # -- listing --------------------------------------------------------------------------------

    def objects(self) -> list[tuple[str, str]]:
        """Every object as `(name, kind)`, kind `"table"`, `"view"`, `"index"` or
        `"materialized view"`, sorted by name."""
        self._refresh()
        return sorted((n, e.kind) for n, e in self._entries.items())

    def _named(self, kind: str) -> list[str]:
        return [n for n, k in self.objects() if k == kind]

    def tables(self) -> list[str]:
        """The names of the tables."""
        return self._named("table")

    def indexes(self) -> list[str]:
        """The names of the indexes."""
        return self._named("index")

    def views(self) -> list[str]:
        """The names of the views, materialized (`create_materialized_view`) or not
        (`create_view`), sorted."""
        return [n for n, k in self.objects() if k in ("view", "materialized view")]

    def get(self, name: str) -> Table | Index | MaterializedView | View:
        """The table, view, index or materialized view called `name`."""
        self._refresh()
        obj = self._catalog.get(name)
        if obj is None:
            raise UnknownObject(name, "table, index or view", sorted(self._catalog))
        return obj

    def frontier(self, obj: Table | Index | MaterializedView | View | str) -> Frontier:
        """The write frontier (`upper`) of a table, index or materialized view: every earlier
        time is complete. A (non-materialized) view has none: `InvalidArgument`."""
        if isinstance(obj, str):
            obj = self.get(obj)
        if isinstance(obj, View):
            raise InvalidArgument(f"frontier: {obj.name!r} is a view (a named query, not "
                                  "maintained); it has no frontier of its own")
        if isinstance(obj, Index):
            return self._ctl.frontier(obj.id)
        if isinstance(obj, Table):
            return obj.upper
        return self._storage.shard(obj.shard).upper

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise InvalidArgument(f"a name must be a non-empty string without '/', got {name!r}")

    # -- indexes and views ----------------------------------------------------------------------

    def _refs(self, rel: Relation) -> list[InputRef]:
        return [InputRef(name=i.name, id=gid) for gid, i in sorted(rel.inputs.items())]

    def _view_refs(self, rel: Relation) -> list[InputRef]:
        return [InputRef(name=n, id=gid) for n, gid in sorted(rel.views.items())]

    def create_view(self, name: str, relation: Relation, *, exist_ok: bool = False,
                    sql: str | None = None, pg_types: Sequence[str] | None = None) -> View:
        """Name `relation` as a view: a query, not maintained, planned inline wherever it is
        read (as SQL's `CREATE VIEW`). It is durable (a later `twofold.open` of the same
        storage has it) and readable from SQL by name. `exist_ok=True` returns an existing
        view of the same definition. `sql` is the statement text `SHOW CREATE` gives;
        `pg_types` the columns' declared PostgreSQL types SQL recorded (`Entry.pg_types`)."""
        self._check_name(name)
        rel = self._check_relation(relation, "create_view")
        request = Entry(name=name, kind="view", id=_UNSET, desc=rel.schema.desc(),
                        plan=rel.plan, inputs=self._refs(rel), views=self._view_refs(rel),
                        sql=sql, pg_types=list(pg_types or []))
        obj = self._create(request, exist_ok, "create_view")
        assert isinstance(obj, View)
        return obj

    async def create_index(self, name: str, relation: Relation, key: str | Sequence[str], *,
                           retain_history: float | None = None,
                           exist_ok: bool = False,
                           pg_types: Sequence[str] | None = None) -> Index:
        """Maintain `relation` as an arrangement keyed by `key` on the replicas. Reads of it
        (and `lookup` by key) are answered from the maintained state. `retain_history`
        (seconds) keeps that much history readable with `as_of`. `exist_ok=True` returns an
        existing index of the same definition. `pg_types`: as `create_view`'s."""
        self._check_name(name)
        await self._refresh_async()
        rel = self._check_relation(relation, "create_index")
        keys = [key] if isinstance(key, str) else list(key)
        if not keys:
            raise InvalidArgument("create_index: key must name at least one column")
        for k in keys:
            rel.schema.index(k, "create_index")
        request = Entry(name=name, kind="index", id=_UNSET, desc=rel.schema.desc(),
                        plan=rel.plan, inputs=self._refs(rel), key=keys,
                        retain_history=retain_history, views=self._view_refs(rel),
                        pg_types=list(pg_types or []))
        obj = await self._create_maintained(request, exist_ok, "create_index")
        assert isinstance(obj, Index)
        return obj

    async def create_materialized_view(self, name: str, relation: Relation, *,
                                       exist_ok: bool = False, sql: str | None = None,
                                       pg_types: Sequence[str] | None = None
                                       ) -> MaterializedView:
        """Maintain `relation` into a storage shard of its own; read it like a table. It
        survives the process: a later `twofold.open` of the same storage resumes it.
        `exist_ok=True` returns an existing view of the same definition. `sql`, `pg_types`:
        as `create_view`'s."""
        self._check_name(name)
        await self._refresh_async()
        rel = self._check_relation(relation, "create_materialized_view")
        as_of = self._as_of_for(rel).time
        request = Entry(name=name, kind="materialized view", id=_UNSET,
                        desc=rel.schema.desc(), plan=rel.plan, inputs=self._refs(rel),
                        as_of=as_of, views=self._view_refs(rel), sql=sql,
                        pg_types=list(pg_types or []))
        obj = await self._create_maintained(request, exist_ok, "create_materialized_view")
        assert isinstance(obj, MaterializedView)
        return obj

    async def _create_maintained(self, request: Entry, exist_ok: bool,
                                 what: str) -> CatalogObject:
        before = set(self._entries)
        obj = self._create(request, exist_ok, what)
        created = request.name not in before or self._entries[request.name].id != obj.id
        try:
            await self._install()
        except BaseException:
            if created:
                self._uncreate(self._entries.get(request.name))
                await self._install()
            raise
        return obj

    def _uncreate(self, entry: Entry | None) -> None:
        """Remove `entry` again (its dataflow could not be created)."""
        if entry is None:
            return

        def remove(change: Change) -> None:
            if change.state.entries.get(entry.name) == entry:
                change.remove(entry.name)

        _, state = self._cat.transact(remove)
        self._absorb(state)

    # -- the catalog change behind every create -------------------------------------------------

    def _create(self, request: Entry, exist_ok: bool, what: str) -> CatalogObject:
        """Commit `request` (its ids allocated) unless an equal entry exists and `exist_ok`;
        the session's object for it."""
        name = request.name

        def build(change: Change) -> None:
            entries = change.state.entries
            existing = entries.get(name)
            if existing is not None:
                diffs = differences(existing, request)
                if exist_ok and not diffs:
                    return
                raise EntryExists(name, existing.kind, diffs)
            missing = [r.name for r in [*request.inputs, *request.views]
                       if r.name not in entries or r.id not in _read_ids(entries[r.name])]
            if missing:
                raise MissingDependency(name, missing)
            stored = self._storage.list_tables() if request.kind == "table" else []
            change.add(_with_ids(request, change, stored))

        try:
            _, state = self._cat.transact(build)
        except EntryExists as e:
            hint = "" if exist_ok or e.differences else " (pass exist_ok=True to use it)"
            raise ObjectExists(f"{what}: {e}{hint}") from None
        except MissingDependency as e:
            raise UnknownObject(e.missing[0], f"input of {name!r} (was it dropped?)",
                                sorted(self._catalog)) from None
        except CatalogConflict as e:
            raise self._conflict(e) from None
        except StorageError as e:
            raise InvalidArgument(f"{what}: {e}") from e
        self._absorb(state)
        return self._catalog[name]

    def _absorb(self, state: CatalogState) -> None:
        with self._sync_lock:
            if state.version > self._seen_version:
                self._apply(state)

    # -- drop -----------------------------------------------------------------------------------

    async def drop(self, obj: Table | Index | MaterializedView | View | str, *,
                   cascade: bool = False) -> None:
        """Remove a table, view, index or materialized view from the catalog, durably (and
        stop maintaining it). Refused (`DependencyError`, naming them) while other objects read
        it, unless `cascade=True`, which drops those too. A dropped table's rows stay in
        storage, unreachable (its shard is garbage); its name can be used again."""
        name = obj if isinstance(obj, str) else getattr(obj, "name", None)
        if not isinstance(name, str):
            raise InvalidArgument(f"drop: expected a name, Table, View, Index or "
                                  f"MaterializedView, got {obj!r}")
        await self._refresh_async()
        target = self._catalog.get(name)
        if target is None or (not isinstance(obj, str) and target is not obj):
            raise UnknownObject(name, "object", sorted(self._catalog))
        try:
            _, state = self._cat.transact(lambda change: change.drop(name, cascade=cascade))
        except HasDependents as e:
            raise DependencyError(f"drop: {e}", e.name, tuple(e.dependents)) from None
        except UnknownEntry:
            raise UnknownObject(name, "object (dropped by another process?)",
                                sorted(self._catalog)) from None
        except CatalogConflict as e:
            raise self._conflict(e) from None
        self._absorb(state)
        await self._install()

    async def drop_all(self, names: Sequence[str], *, cascade: bool = False) -> None:
        """Drop several objects in one catalog change, all or none (SQL's `DROP TABLE a, b`):
        an object that only others in `names` read may go without `cascade`; one read by
        anything outside them is refused (`DependencyError`) unless `cascade=True`."""
        await self._refresh_async()
        for name in names:
            if name not in self._catalog:
                raise UnknownObject(name, "object", sorted(self._catalog))
        wanted = set(names)

        def build(change: Change) -> None:
            for name in names:
                closure = change.state.dependents_closure(name)
                outside = sorted(set(closure) - wanted)
                if outside and not cascade:
                    raise HasDependents(name, outside)
                for n in closure:
                    if n not in change.removed:
                        change.remove(n)

        try:
            _, state = self._cat.transact(build)
        except HasDependents as e:
            raise DependencyError(f"drop: {e}", e.name, tuple(e.dependents)) from None
        except UnknownEntry as e:
            raise UnknownObject(e.name, "object (dropped by another process?)",
                                sorted(self._catalog)) from None
        except CatalogConflict as e:
            raise self._conflict(e) from None
        self._absorb(state)
        await self._install()


def _read_ids(entry: Entry) -> set[GlobalId]:
    """The ids a definition may read `entry` by."""
    return {entry.id} if entry.read_id is None else {entry.read_id}


def _with_ids(request: Entry, change: Change, stored_tables: Sequence[str]) -> Entry:
    """`request` with fresh ids from the catalog's allocator (and a table a fresh shard when
    `table/<name>` is a dropped table's, still in `stored_tables`)."""
    if request.kind in ("table", "view"):
        gid = change.allocate()
        shard = None
        if request.kind == "table" and request.name in stored_tables:
            shard = f"{TABLE_PREFIX}{request.name}/{gid}"
        return msgspec.structs.replace(request, id=gid, shard=shard)
    if request.kind == "index":
        build = change.allocate()
        return msgspec.structs.replace(request, id=change.allocate(), build_id=build)
    build, sink, read = change.allocate(), change.allocate(), change.allocate()
    return msgspec.structs.replace(request, id=sink, build_id=build, read_id=read,
                                   shard=f"mv/{request.name}/{sink}")
