"""The catalog watch: whether a database's catalog can have moved since it was last read, told
without a storage read where the backend allows it, and the catalog refresh that uses it.

Contract: `refresh_catalog(db)` brings `db`'s objects up to its catalog, as `db._refresh()`
does, but reads storage only when a catalog change may have been committed since its last read
(`_CatalogWatch`: this process's notifier heard an append to the catalog shard, or, on SQLite,
another connection committed to the file — which also notices another process's DDL).
`catalog_version(db)` is the catalog version `db`'s objects follow. What kept prepared
statements (`twofold.sql.prepared`) check before a kept plan answers.

`begin_scope()` / `end_scope()` bracket, on one thread, a stretch in which every check is
answered by the first one made in it (one storage probe for many requests). Sound only for
requests whose first byte reached this process before that first check: the server opens a
scope for one event-loop iteration's receives (`inbox.Turn.scope`), every one of which was
readable when the iteration's poll returned, before any check in it — so any commit a client
saw before sending is in the first check, as it would be in its own.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

_WATCH_ATTR = "_twofold_catalog_watch"

_scope = threading.local()
"""This thread's open scope (`begin_scope`), if any: its `tokens`, watch id -> the token
its first check read."""


def begin_scope() -> None:
    """Open a scope on this thread (module docstring); a scope already open stays."""
    if getattr(_scope, "tokens", None) is None:
        _scope.tokens = {}


def end_scope() -> None:
    """Close this thread's scope, if one is open: the next check probes storage again."""
    _scope.tokens = None


class _CatalogWatch:
    """Tells, without a storage read, that no catalog change can have been committed since
    the database last read its catalog: a counter this process's notifier bumps at every
    append to the catalog shard (any database on the same storage in this process), and
    what the backend offers for other processes' commits — on SQLite its `data_version` on
    this thread's connection (which moves at any other connection's commit). The file is
    never opened other than through SQLite: closing any descriptor of a database's `-shm`
    file drops every POSIX lock this process holds on it, SQLite's included, after which
    another process's connection takes itself for the first and reinitialises the WAL
    index under this one (a bus error, or a corrupt index). A memory backend
    has no other process;
    any other backend (PostgreSQL) has no cheap check here: its catalog is read every time.
    Holds no reference to the database (the notifier outlives it)."""

    def __init__(self, backend: Any) -> None:
        from twofold.catalog import CATALOG_SHARD
        from twofold.storage.memory import MemoryBackend
        from twofold.storage.sqlite import SqliteBackend

        self._lock = threading.Lock()
        self._notes = 0
        self._seen = threading.local()  # per thread: SQLite's check is per connection
        self._probe: Any = None
        if isinstance(backend, SqliteBackend):
            self._probe = backend.data_version  # a cursor kept per thread: ~2 us
        elif isinstance(backend, MemoryBackend):
            self._probe = _zero
        if self._probe is None:
            return
        ref = weakref.ref(self)

        def noted() -> None:
            watch = ref()
            if watch is not None:
                with watch._lock:
                    watch._notes += 1

        backend.notifier.subscribe(CATALOG_SHARD, noted)
        weakref.finalize(self, backend.notifier.unsubscribe, CATALOG_SHARD, noted)

    def _token(self) -> tuple[int, object] | None:
        if self._probe is None:
            return None
        tokens: dict[int, tuple[int, object]] | None = getattr(_scope, "tokens", None)
        if tokens is not None:
            token = tokens.get(id(self))
            if token is None:
                token = tokens[id(self)] = (self._notes, self._probe())
            return token
        # Read before the probe, without the lock: an int read is atomic, and a note landing
        # after it moves the next token.
        return self._notes, self._probe()

    def refresh(self, db: Any) -> None:
        """`db._refresh()`, skipped when nothing can have changed since the last one."""
        token = self._token()  # read before the catalog: a commit after it moves the next
        if token is not None and token == getattr(self._seen, "token", None):
            return
        db._refresh()
        self._seen.token = token


def _zero() -> int:
    return 0


def refresh_catalog(db: Any) -> None:
    """Bring `db`'s objects up to its catalog, as `db._refresh()` does, but with no storage
    read when no catalog change can have been committed since the last one (`_CatalogWatch`)."""
    if db._closed:  # a closed database's storage is not watched
        db._check_open()
    watch: _CatalogWatch | None = db.__dict__.get(_WATCH_ATTR)
    if watch is None:
        watch = _CatalogWatch(getattr(db._storage, "backend", None))
        setattr(db, _WATCH_ATTR, watch)
    watch.refresh(db)


def catalog_version(db: Any) -> int:
    """The catalog version `db`'s objects follow (moves at every DDL this database applied;
    another process's DDL is applied at its next catalog read)."""
    return int(db._seen_version)
