"""`open_storage(url)` and the `Storage` handle: the catalog of shards and tables.

URLs: `sqlite:///abs/path.db` (or `sqlite:relative/path.db`) for the embedded default, one file
any number of processes may open at once; `memory://name` for an in-process store shared by name
(`memory://` alone is a private store); `postgres://user@host:port/db?blob=file:///dir` or
`...?blob=s3://bucket/prefix` for shards shared by processes on many machines (PostgreSQL
consensus plus object-store blobs, `twofold.storage.persist`; needs the `postgres` extra).
Anything else raises `InvalidStorageUrl`.

A `Storage` owns the backend connection(s) and a `TimestampOracle` for its tables. Shard and
table creation are idempotent when the schema matches (so a controller and a replica may both
declare what they need) and refuse a different schema; lookups of unknown ids raise typed errors.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from urllib.parse import urlsplit

from twofold.protocol import Frontier, RelationDesc
from twofold.storage.backend import Backend
from twofold.storage.errors import (
    InvalidName,
    InvalidStorageUrl,
    ShardExists,
    StorageClosed,
    TableExists,
    UnknownShard,
    UnknownTable,
)
from twofold.storage.memory import MemoryBackend
from twofold.storage.oracle import TimestampOracle, wall_clock_ms
from twofold.storage.shard import DEFAULT_POLL_INTERVAL, Shard
from twofold.storage.sqlite import SqliteBackend
from twofold.storage.table import TABLE_PREFIX, Table, Ticker, table_shard_id
from twofold.storage.updates import update_schema


def open_storage(
    url: str,
    *,
    clock: Callable[[], int] = wall_clock_ms,
    poll_interval: float | None = None,
) -> Storage:
    """Open the storage at `url` (see the module docstring); `clock` feeds its oracle.

    `poll_interval` bounds how long a listener waits before rechecking for appends its backend
    did not announce (default: 10 ms for SQLite and memory, whose other processes are noticed
    only by polling; 1 s for PostgreSQL, where LISTEN/NOTIFY wakes listeners at once).
    """
    if not isinstance(url, str):
        raise InvalidStorageUrl(f"a storage URL must be a string, got {type(url).__name__}")
    parts = urlsplit(url)
    backend: Backend
    oracle: TimestampOracle | None = None
    if parts.scheme == "memory":
        if parts.path or parts.query or parts.fragment:
            raise InvalidStorageUrl(
                f"storage URL {url!r}: a memory URL is memory://name, nothing after it"
            )
        backend = MemoryBackend(parts.netloc or None)
    elif parts.scheme == "sqlite":
        if parts.netloc:
            raise InvalidStorageUrl(
                f"storage URL {url!r}: a SQLite URL names a local file, "
                f"sqlite:///absolute/path.db or sqlite:relative/path.db "
                f"(found host {parts.netloc!r})"
            )
        if not parts.path or parts.path.endswith("/"):
            raise InvalidStorageUrl(f"storage URL {url!r} names no database file")
        backend = SqliteBackend(parts.path)
    elif parts.scheme in ("postgres", "postgresql"):
        try:
            from twofold.storage.persist import PersistBackend, PgTimestampOracle
        except ImportError as e:
            raise InvalidStorageUrl(
                f"storage URL {url!r} needs the 'postgres' extra (psycopg, obstore): "
                f"pip install 'twofold[postgres]' ({e})"
            ) from None
        persist = PersistBackend(url)
        try:
            oracle = PgTimestampOracle(persist.consensus, clock)
        except BaseException:
            persist.close()
            raise
        backend = persist
    else:
        raise InvalidStorageUrl(
            f"unsupported storage URL {url!r}: the scheme must be 'sqlite' "
            f"(sqlite:///path/to/file.db), 'memory' (memory://name) or 'postgres' "
            f"(postgres://user@host:port/db?blob=file:///dir or ?blob=s3://bucket/prefix)"
        )
    if poll_interval is None:
        poll_interval = getattr(backend, "poll_interval", DEFAULT_POLL_INTERVAL)
    return Storage(url, backend, oracle or TimestampOracle(clock), poll_interval=poll_interval)


class Storage:
    """A handle on one storage location. Thread-safe; `close` (or `with`) releases it."""

    def __init__(self, url: str, backend: Backend, oracle: TimestampOracle,
                 *, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        self.url = url
        self.backend = backend
        self.oracle = oracle
        self.poll_interval = poll_interval
        self._closed = False
        self._lock = threading.Lock()
        self._descs: dict[str, RelationDesc] = {}
        self._table_locks: dict[str, threading.Lock] = {}

    def __repr__(self) -> str:
        return f"Storage({self.url!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosed(f"storage {self.url!r} is closed")

    # -- shards -----------------------------------------------------------------------------

    def create_shard(self, shard_id: str, desc: RelationDesc, *, exist_ok: bool = True) -> Shard:
        """Create the shard (upper and since at the minimum) and return it.

        If it exists with the same schema, return it (`ShardExists` with `exist_ok=False`); a
        different schema is always `ShardExists`.
        """
        self._check_open()
        if not isinstance(shard_id, str) or not shard_id:
            raise InvalidName(f"a shard id must be a non-empty string, got {shard_id!r}")
        if not isinstance(desc, RelationDesc):
            raise TypeError(f"desc must be a RelationDesc, got {type(desc).__name__}")
        update_schema(desc)  # refuses reserved or duplicate column names before anything exists
        if not self.backend.create_shard(shard_id, desc):
            existing = self.backend.describe(shard_id)
            if existing != desc:
                raise ShardExists(
                    f"shard {shard_id!r} exists with schema {existing}, not {desc}"
                )
            if not exist_ok:
                raise ShardExists(f"shard {shard_id!r} already exists")
        return self.shard(shard_id)

    def shard(self, shard_id: str) -> Shard:
        """The existing shard `shard_id`; `UnknownShard` if there is none."""
        self._check_open()
        desc = self._descs.get(shard_id)
        if desc is None:
            desc = self._descs[shard_id] = self.backend.describe(shard_id)
        return Shard(self.backend, shard_id, desc, poll_interval=self.poll_interval)

    def list_shards(self) -> list[str]:
        self._check_open()
        return self.backend.shard_ids()

    # -- tables -----------------------------------------------------------------------------

    def create_table(self, name: str, desc: RelationDesc, *, exist_ok: bool = True) -> Table:
        """Create the table `name` (the shard `table/<name>`) and return it."""
        if not isinstance(name, str) or not name:
            raise InvalidName(f"a table name must be a non-empty string, got {name!r}")
        try:
            self.create_shard(table_shard_id(name), desc, exist_ok=exist_ok)
        except ShardExists as e:
            raise TableExists(f"table {name!r}: {e}") from None
        return self.table(name)

    def table(self, name: str) -> Table:
        """The existing table `name`; `UnknownTable` if there is none."""
        try:
            shard = self.shard(table_shard_id(name))
        except UnknownShard:
            raise UnknownTable(name) from None
        with self._lock:
            lock = self._table_locks.setdefault(name, threading.Lock())
        return Table(self, name, shard, lock)

    def list_tables(self) -> list[str]:
        return [s[len(TABLE_PREFIX):] for s in self.list_shards() if s.startswith(TABLE_PREFIX)]

    def advance_tables(self, upper: Frontier) -> None:
        """Advance the upper of every table below `upper` to it, in one backend round (one
        transaction or statement, not a compare-and-append per table; on SQLite one statement
        that also finds the tables, `SqliteBackend.advance_prefixed_uppers`)."""
        self._check_open()
        if isinstance(self.backend, SqliteBackend):
            self.backend.advance_prefixed_uppers(TABLE_PREFIX, upper)
            return
        self.backend.advance_uppers(
            [table_shard_id(name) for name in self.list_tables()], upper)

    def ticker(self, interval: float = 0.1) -> Ticker:
        """A (not yet started) ticker advancing every table of this storage; use `with`."""
        return Ticker(self, interval)

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Release the backend. Idempotent; later calls on this handle raise `StorageClosed`."""
        self._closed = True
        self.backend.close()

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
