"""`CatalogSync`: keeps a session's objects equal to the durable catalog (`twofold.catalog`).

Contract: the session's `Table`/`Index`/`MaterializedView` objects mirror the catalog's
entries. On open, and whenever the catalog's version has moved (another process committed a
change) when the session is next used, the session

- builds an object for every entry it does not have yet, in dependency order: a table over its
  shard (created if a crash left the entry without one); an index or view from its stored plan
  over the objects it reads — and creates its dataflow on this session's replicas: an index
  re-hydrates from its inputs, a view resumes from its shard's upper (its sink corrects whatever
  the shard holds, so nothing is written twice);
- forgets the objects whose entries are gone and drops their dataflows.

"Next used" means the next catalog call — `get`, `table`, the listings, a create or a drop —
each one backend read of the catalog's version. Reads do not check it (it would cost every
lookup a storage round trip): a read of an object that another process dropped meanwhile is
answered by this session's own dataflow, consistently, until the next catalog call forgets it.

Building objects is synchronous; creating and dropping dataflows needs the event loop. A sync
caller on another thread (the blocking API) waits for them; on the loop thread they are queued
and done by the next async call (every read, create and drop awaits them first).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

from twofold.api.errors import CatalogConflict, TwofoldError, UnknownObject
from twofold.api.inputs import Inputs
from twofold.api.objects import Index, MaterializedView, Table, View
from twofold.api.reads import translate
from twofold.api.relation import Input, Relation
from twofold.api.schema import Schema
from twofold.catalog import Catalog, CatalogError, CatalogState, Change, Entry
from twofold.catalog import CatalogConflict as StoreConflict
from twofold.controller import LagWindow, UnknownCollection
from twofold.protocol import (
    BuildDesc,
    DataflowDescription,
    Frontier,
    GlobalId,
    MaterializedViewSink,
    SinkDesc,
)
from twofold.storage import StorageError
from twofold.storage.holds import ControllerHolds, SinceHold
from twofold.storage.table import TABLE_PREFIX
from twofold.storage.view_errors import ensure_error_shard

if TYPE_CHECKING:
    from twofold.api.session import AsyncDatabase

CatalogObject = Table | Index | MaterializedView | View

RECHOOSE = 5
"""How many times a dataflow's as_of is chosen again when a since passed it meanwhile."""


class CatalogSync(Inputs):
    """See the module docstring."""

    holds: ControllerHolds | None

    _store: Catalog | None
    _seen_version: int
    _entries: dict[str, Entry]
    _sync_lock: threading.RLock
    _to_install: list[Index | MaterializedView]
    _to_drop: list[GlobalId]
    _install_lock: asyncio.Lock | None

    @property
    def _db(self) -> AsyncDatabase:
        # Objects hold the whole database (they read through it); this part is one of its bases.
        return cast("AsyncDatabase", self)

    @property
    def _cat(self) -> Catalog:
        self._check_open()
        assert self._store is not None
        return self._store

    # -- following the catalog ------------------------------------------------------------------

    async def _open_catalog(self) -> None:
        """Open the storage's catalog, adopt tables older than it, restore every entry."""
        try:
            self._store = Catalog(self._storage)
            # Only a catalog never written to adopts: afterwards every table has an entry
            # before its shard, and a shard without one is a dropped table's (garbage).
            state = self._store.state()
            legacy = [n for n in self._storage.list_tables()
                      if n not in state.entries] if state.version == 0 else []
            if legacy:
                self._adopt_tables(legacy)
        except (CatalogError, StorageError) as e:
            raise TwofoldError(f"cannot open the catalog of {self.url!r}: {e}") from e
        # Read-your-writes across processes: a session's reads see every write that was
        # durable when it opened (a restored view is read once it has caught up with them).
        for name in self._storage.list_tables():
            upper = self._storage.table(name).upper.time
            if upper:
                self._observe_write(upper - 1)
        await self._refresh_async()

    def _adopt_tables(self, names: list[str]) -> None:
        """Record tables that storage holds without a catalog entry (made before the catalog
        existed)."""
        def adopt(change: Change) -> None:
            for name in names:
                if name not in change.state.entries:
                    desc = self._storage.table(name).desc
                    change.add(Entry(name=name, kind="table", id=change.allocate(), desc=desc))

        self._cat.transact(adopt)

    def _refresh(self) -> CatalogState:
        """Bring the session's objects up to the catalog (see the module docstring)."""
        try:
            state = self._cat.state()
        except (CatalogError, StorageError) as e:
            raise TwofoldError(f"cannot read the catalog of {self.url!r}: {e}") from e
        with self._sync_lock:
            if state.version != self._seen_version:
                self._apply(state)
        if (self._to_install or self._to_drop) and self._portal is not None:
            try:
                running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not self._portal:  # never block the loop the work must run on
                self._run_sync(self._install(), "catalog")
        return state

    async def _refresh_async(self) -> CatalogState:
        state = self._refresh()
        await self._install()
        return state

    def _apply(self, state: CatalogState) -> None:
        for name in [n for n, e in self._entries.items() if state.entries.get(n) != e]:
            self._forget(name)
        for entry in state.in_dependency_order():
            if entry.name not in self._entries:
                self._adopt(entry)
        self._seen_version = state.version

    def _forget(self, name: str) -> None:
        obj = self._catalog.pop(name, None)
        self._entries.pop(name, None)
        if isinstance(obj, Index | MaterializedView):
            if obj in self._to_install:
                with contextlib.suppress(ValueError):  # installed meanwhile on the loop
                    self._to_install.remove(obj)
            else:
                self._to_drop.append(obj.id)

    def _adopt(self, entry: Entry) -> CatalogObject:
        """The session object for `entry` (its dataflow, if any, queued)."""
        obj = self._object_for(entry)
        self._catalog[entry.name] = obj
        self._entries[entry.name] = entry
        if isinstance(obj, Index | MaterializedView):
            self._to_install.append(obj)
        return obj

    def _object_for(self, entry: Entry) -> CatalogObject:
        db = self._db
        if entry.kind == "table":
            try:
                t = self._storage.create_table(table_storage_name(entry), entry.desc,
                                               exist_ok=True)
            except StorageError as e:
                raise TwofoldError(f"cannot restore table {entry.name!r}: {e}") from e
            return Table(db, entry.name, entry.id, t, entry.primary_key or None)
        rel = self._relation_for(entry)
        if entry.kind == "view":
            return View(db, entry.name, entry.id, rel, entry.sql)
        if entry.kind == "index":
            assert entry.build_id is not None
            return Index(db, entry.name, entry.id, entry.build_id, list(entry.key), rel.schema,
                         rel)
        assert entry.read_id is not None and entry.shard is not None
        assert entry.as_of is not None
        try:
            self._storage.create_shard(entry.shard, entry.desc)
            # A view from before error parts has none: it starts empty up to the rows' upper.
            ensure_error_shard(self._storage, entry.shard)
        except StorageError as e:
            raise TwofoldError(f"cannot restore materialized view {entry.name!r}: {e}") from e
        return MaterializedView(db, entry.name, entry.id, entry.read_id, entry.shard,
                                rel.schema, rel, entry.as_of, entry.sql)

    def _relation_for(self, entry: Entry) -> Relation:
        assert entry.plan is not None
        inputs: dict[GlobalId, Input] = {}
        for ref in entry.inputs:
            obj = self._catalog.get(ref.name)
            if obj is None or ref.id not in obj.inputs:
                raise UnknownObject(ref.name, f"input of {entry.label()}", sorted(self._catalog))
            inputs[ref.id] = obj.inputs[ref.id]
        views = {}
        for ref in entry.views:
            view = self._catalog.get(ref.name)
            if not isinstance(view, View) or view.id != ref.id:
                raise UnknownObject(ref.name, f"view read by {entry.label()}",
                                    sorted(self._catalog))
            views.update(view.views)
        return Relation(self._db, entry.plan, Schema.of(entry.desc), inputs, views)

    async def _install(self) -> None:
        """Create the queued dataflows and drop the queued ones (on the loop thread), one
        caller at a time: a dataflow is created only after those of the objects it reads."""
        lock = self._install_lock
        if not self._to_drop and not self._to_install and (lock is None or not lock.locked()):
            return
        if self._install_lock is None:
            self._install_lock = asyncio.Lock()
        async with self._install_lock:
            while self._to_drop:
                gid = self._to_drop.pop(0)
                with contextlib.suppress(UnknownCollection):
                    await self._ctl.drop(gid)
            while self._to_install:
                obj = self._to_install.pop(0)
                # The as_of is chosen, and the dataflow recorded by the controller, under a
                # hold of its source shards (`twofold.storage.holds`): no step of the
                # controller's critical reader can pass it in between.
                with self._hold_sources(obj) as hold:
                    resume = self._held_resume(obj, hold)
                    if isinstance(obj, MaterializedView):
                        upper = self._storage.shard(obj.shard).upper.time
                        if (resume.time is not None and upper is not None
                                and resume.time >= upper):
                            # The view resumes after its shard's upper: the times in between
                            # were not maintained, so this session reads it from there on.
                            obj.as_of = resume.time
                    await self._create_dataflow(obj, resume)

    # -- dataflows ------------------------------------------------------------------------------

    def _hold_sources(self, obj: Index | MaterializedView) -> SinceHold:
        """A hold of the shards `obj`'s dataflow reads, at their sinces now."""
        shards = sorted({inp.shard for inp in obj.source.inputs.values()
                         if inp.kind != "index" and inp.shard is not None})
        assert self.holds is not None, "the session's holds are made before its catalog"
        try:
            return self.holds.hold(shards)
        except StorageError as e:
            raise TwofoldError(f"cannot read the inputs of {obj.name!r}: {e}") from e

    def _held_resume(self, obj: Index | MaterializedView, hold: SinceHold) -> Frontier:
        """`_resume_at` from the held sinces, checked against the shards' sinces after it:
        on memory and SQLite storage (where no reader holds a shard) an explicit
        `downgrade_since` may still have passed it meanwhile; then it is chosen again, from
        there (a few times at most: each round starts from a since that was observed)."""
        floor = dict(hold.since)
        resume = self._resume_at(obj, floor)
        for _ in range(RECHOOSE):
            passed = {}
            for shard_id in floor:
                since = self._storage.shard(shard_id).since
                if not since.less_equal(resume):
                    passed[shard_id] = since
            if not passed:
                break
            floor.update(passed)
            resume = self._resume_at(obj, floor)
        return resume

    def _resume_at(self, obj: Index | MaterializedView,
                   held: Mapping[str, Frontier] | None = None) -> Frontier:
        """Where a (new or restored) dataflow starts, never before a `held` since: an index
        at the latest complete time of its inputs (it re-hydrates); a view where its shard
        stops, or later if an input's since has passed that."""
        held_floor = max((f.time for f in (held or {}).values() if f.time is not None),
                         default=0)
        if isinstance(obj, Index):
            return Frontier.at(max(held_floor, self._choose_time(obj.source, None, ryw=False)))
        floor = max(obj.as_of, held_floor)
        for inp in obj.source.inputs.values():
            floor = max(floor, self._bounds(inp)[0])
        upper = self._storage.shard(obj.shard).upper.time
        resume = floor if upper is None or upper == 0 else max(floor, upper - 1)
        return Frontier.at(resume)

    async def _create_dataflow(self, obj: Index | MaterializedView, as_of: Frontier) -> None:
        rel = obj.source
        indexes, sources = self._imports(rel)
        policy = None
        if isinstance(obj, Index):
            entry = self._entries.get(obj.name)
            index_desc = obj.inputs[obj.id].index
            assert index_desc is not None
            desc = DataflowDescription(
                debug_name=f"index {obj.name}",
                source_imports=sources,
                index_imports=indexes,
                objects_to_build=[BuildDesc(id=obj.build_id, plan=rel.plan)],
                index_exports={obj.id: (index_desc, rel.schema.desc())},
                as_of=as_of,
            )
            retain = entry.retain_history if entry is not None else None
            policy = None if retain is None else LagWindow(int(retain * 1000))
            label = f"index {obj.name!r}"
        else:
            entry = self._entries.get(obj.name)
            assert entry is not None and entry.build_id is not None
            build = entry.build_id
            desc = DataflowDescription(
                debug_name=f"materialized view {obj.name}",
                source_imports=sources,
                index_imports=indexes,
                objects_to_build=[BuildDesc(id=build, plan=rel.plan)],
                sink_exports={obj.id: SinkDesc(
                    from_id=build, from_desc=rel.schema.desc(),
                    connection=MaterializedViewSink(shard=obj.shard))},
                as_of=as_of,
            )
            label = f"materialized view {obj.name!r}"
        with translate(label):
            await self._ctl.create_dataflow(desc, read_policy=policy)

    # -- changing the catalog -------------------------------------------------------------------

    def _conflict(self, e: StoreConflict) -> CatalogConflict:
        return CatalogConflict(f"catalog of {self.url!r}: {e}")


def table_storage_name(entry: Entry) -> str:
    """The storage table (`Storage.table(name)`) holding a table entry's rows: `table/<name>`,
    or the fresh shard of a table created again after a drop."""
    if entry.shard is None:
        return entry.name
    return entry.shard.removeprefix(TABLE_PREFIX)
