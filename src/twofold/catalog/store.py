"""The catalog store: entries in a storage shard, changed only by compare-and-append.

Theory of operation. The catalog is the collection held by the shard `catalog`: one row
`(name, entry)` per object (the entry encoded with the protocol codec), plus one row under the
empty name — which no object can have — holding the id allocator's next number. Each committed
change is one compare-and-append of `[v, v + 1)`, where `v` is the shard's upper at the read the
change was computed from: retractions of the rows it replaces and insertions of the new ones. So:

- a change is atomic and durable (storage appends land whole or not at all; a writer killed
  mid-change leaves the catalog as it was before or after, never between);
- two writers that read the same version race on one append: exactly one wins; the loser
  re-reads and re-validates its change against what the winner wrote (`transact` retries the
  caller's function, so a create that lost to a create of the same name raises `EntryExists`);
- ids come from the allocator row, which only moves forward, so an id is never handed out
  twice, even for an object that was dropped;
- the version is the shard's upper: a process knows the catalog changed when it moved.

This works through the storage interface alone (`Shard.compare_and_append`/`snapshot`), so it
works on every backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec

from twofold.catalog.entries import Entry, decode_entry, encode_entry
from twofold.catalog.errors import CatalogConflict, CorruptCatalog, HasDependents, UnknownEntry
from twofold.protocol import ColumnType, GlobalId, RelationDesc
from twofold.storage import Storage, UpperMismatch, to_tuples

T = TypeVar("T")

CATALOG_SHARD: Final = "catalog"
CATALOG_DESC: Final = RelationDesc(
    names=["name", "entry"],
    types=[ColumnType(scalar="str", nullable=False), ColumnType(scalar="bytes", nullable=False)],
)
ALLOCATOR: Final = ""
"""The name of the row holding the next id (no object may have an empty name)."""
FIRST_ID: Final = 1
MAX_ATTEMPTS: Final = 50


@dataclass(frozen=True)
class CatalogState:
    """The catalog at one version: entries by name and the next id to hand out."""

    version: int
    entries: Mapping[str, Entry]
    next_id: int
    rows: Mapping[str, bytes] = field(repr=False)
    """The stored bytes of each row, so a change retracts exactly what is there."""

    def dependents(self, name: str) -> list[str]:
        """The objects that read `name` directly, sorted."""
        return sorted(e.name for e in self.entries.values() if name in e.dependencies)

    def dependents_closure(self, name: str) -> list[str]:
        """Every object that reads `name`, directly or not, dependents before what they read
        (the order to drop them in), `name` itself last."""
        order: list[str] = []
        seen: set[str] = set()

        def visit(n: str) -> None:
            if n in seen:
                return
            seen.add(n)
            for d in self.dependents(n):
                visit(d)
            order.append(n)

        visit(name)
        return order

    def in_dependency_order(self) -> list[Entry]:
        """Every entry after the entries it reads (ties broken by id)."""
        placed: set[str] = set()
        out: list[Entry] = []
        pending = sorted(self.entries.values(), key=lambda e: e.id)
        while pending:
            ready = [e for e in pending if all(d in placed for d in e.dependencies)]
            if not ready:
                missing = sorted({d for e in pending for d in e.dependencies} - placed
                                 - {e.name for e in pending})
                raise CorruptCatalog(f"catalog entries {[e.name for e in pending]} read "
                                     f"objects that are not in the catalog: {missing}")
            for e in ready:
                placed.add(e.name)
                out.append(e)
            pending = [e for e in pending if e.name not in placed]
        return out


class Change:
    """A change being built against one `CatalogState` (see `Catalog.transact`)."""

    def __init__(self, state: CatalogState) -> None:
        self.state = state
        self.next_id = state.next_id
        self.added: dict[str, Entry] = {}
        self.removed: set[str] = set()

    def allocate(self) -> GlobalId:
        """A fresh id, never handed out before (committed with the change)."""
        gid = GlobalId.user(self.next_id)
        self.next_id += 1
        return gid

    def add(self, entry: Entry) -> None:
        self.added[entry.name] = entry

    def remove(self, name: str) -> None:
        if name not in self.state.entries:
            raise UnknownEntry(name, sorted(self.state.entries))
        self.removed.add(name)

    def drop(self, name: str, *, cascade: bool) -> list[str]:
        """Remove `name` (and with `cascade` everything reading it); `HasDependents` naming
        them otherwise. Returns what is removed, dependents first."""
        if name not in self.state.entries:
            raise UnknownEntry(name, sorted(self.state.entries))
        closure = self.state.dependents_closure(name)
        if len(closure) > 1 and not cascade:
            raise HasDependents(name, sorted(closure[:-1]))
        for n in closure:
            self.remove(n)
        return closure

    @property
    def empty(self) -> bool:
        return not self.added and not self.removed and self.next_id == self.state.next_id


class Catalog:
    """The catalog of one storage location. Thread-safe; see the module docstring."""

    def __init__(self, storage: Storage) -> None:
        self._shard = storage.create_shard(CATALOG_SHARD, CATALOG_DESC)
        self._lock = threading.Lock()
        self._cached: CatalogState | None = None

    @property
    def version(self) -> int:
        """Moves whenever anyone commits a change (one backend read)."""
        upper = self._shard.upper.time
        if upper is None:
            raise CorruptCatalog("the catalog shard is closed")
        return upper

    def state(self) -> CatalogState:
        """The current catalog (re-read only when the version moved)."""
        version = self.version
        with self._lock:
            cached = self._cached
        if cached is not None and cached.version == version:
            return cached
        state = self._read(version)
        with self._lock:
            if self._cached is None or self._cached.version < state.version:
                self._cached = state
        return state

    def _read(self, version: int) -> CatalogState:
        if version == 0:
            return CatalogState(0, {}, FIRST_ID, {})
        entries: dict[str, Entry] = {}
        rows: dict[str, bytes] = {}
        next_id = FIRST_ID
        for (name, data), _, diff in to_tuples(self._shard.snapshot(version - 1)):
            if diff != 1:
                raise CorruptCatalog(f"catalog row {name!r} has multiplicity {diff}")
            rows[name] = data
            try:
                if name == ALLOCATOR:
                    next_id = msgspec.msgpack.decode(data, type=int)
                else:
                    entries[name] = decode_entry(data)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                raise CorruptCatalog(f"catalog row {name!r} cannot be read: {e}") from None
        return CatalogState(version, entries, next_id, rows)

    def transact(self, build: Callable[[Change], T]) -> tuple[T, CatalogState]:
        """Apply the change `build` makes, atomically; returns its result and the new state.

        `build` sees the latest state and may raise (a typed error: nothing is written). If
        another writer commits first, `build` runs again on the new state. `CatalogConflict`
        after `MAX_ATTEMPTS` lost races.
        """
        for _ in range(MAX_ATTEMPTS):
            state = self.state()
            change = Change(state)
            result = build(change)
            if change.empty:
                return result, state
            updates = self._updates(change)
            try:
                self._shard.compare_and_append(updates, state.version, state.version + 1)
            except UpperMismatch:
                continue
            new = self._apply(change)
            with self._lock:
                if self._cached is None or self._cached.version < new.version:
                    self._cached = new
            return result, new
        raise CatalogConflict(f"the catalog kept changing under this change ({MAX_ATTEMPTS} "
                              "attempts lost to other writers); retry it")

    def _updates(self, change: Change) -> list[tuple[list[object], int, int]]:
        t = change.state.version
        rows = change.state.rows
        out: list[tuple[list[object], int, int]] = []
        for name in sorted(change.removed | set(change.added)):
            if name in rows:
                out.append(([name, rows[name]], t, -1))
        for name, entry in sorted(change.added.items()):
            out.append(([name, encode_entry(entry)], t, 1))
        if change.next_id != change.state.next_id:
            if ALLOCATOR in rows:
                out.append(([ALLOCATOR, rows[ALLOCATOR]], t, -1))
            out.append(([ALLOCATOR, msgspec.msgpack.encode(change.next_id)], t, 1))
        return out

    def _apply(self, change: Change) -> CatalogState:
        old = change.state
        entries = {n: e for n, e in old.entries.items() if n not in change.removed}
        rows = {n: r for n, r in old.rows.items() if n not in change.removed}
        for name, entry in change.added.items():
            entries[name] = entry
            rows[name] = encode_entry(entry)
        if change.next_id != old.next_id:
            rows[ALLOCATOR] = msgspec.msgpack.encode(change.next_id)
        return CatalogState(old.version + 1, entries, change.next_id, rows)
