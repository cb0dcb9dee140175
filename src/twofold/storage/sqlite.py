"""The embedded default backend: one SQLite file (`sqlite:///path/to/file.db`).

Layout: `shards` holds each shard's schema and frontiers (the consensus state); `parts` holds the
stored batches as Arrow IPC blobs, keyed by `(shard_id, lower)`. Every write runs in a
`BEGIN IMMEDIATE` transaction, which takes SQLite's single write lock before reading, so the
compare in compare-and-append and the write that follows are one atomic step across threads and
processes; a commit is all-or-nothing, so a crashed writer leaves each batch wholly present or
wholly absent. Reads run in one deferred transaction, which in WAL mode is a consistent snapshot
that never blocks or is blocked by the writer.

Times are stored as signed integers and empty frontiers as NULL (`twofold.storage.encoding`).

Each thread gets its own connection (sqlite3 connections must not be shared by concurrent
threads); `close` closes them all. `synchronous=FULL` makes a returned append durable against
power loss, not only against a crash of the process.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import pyarrow as pa

from twofold.protocol import Frontier, RelationDesc
from twofold.storage.backend import Notifier, Part, PartInfo, ShardState
from twofold.storage.encoding import (
    dec_frontier,
    dec_time,
    decode_desc,
    enc_frontier,
    enc_time,
    encode_desc,
)
from twofold.storage.errors import CorruptStorage, StorageClosed, StorageError, UnknownShard
from twofold.storage.updates import decode_ipc, encode_ipc, update_schema

FORMAT: Final = "twofold-storage-1"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS twofold_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shards (
    shard_id TEXT PRIMARY KEY, desc BLOB NOT NULL, upper INTEGER, since INTEGER
);
CREATE TABLE IF NOT EXISTS parts (
    part_id INTEGER PRIMARY KEY AUTOINCREMENT, shard_id TEXT NOT NULL, lower INTEGER NOT NULL,
    upper INTEGER, since INTEGER NOT NULL, count INTEGER NOT NULL, data BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS parts_by_time ON parts (shard_id, lower);
"""

_PART_COLUMNS: Final = "part_id, lower, upper, since, count"

# Handles on one file in one process share a notifier, so a listener wakes as soon as any handle
# in the process appends.
_NOTIFIERS_LOCK = threading.Lock()
_NOTIFIERS: dict[str, Notifier] = {}


def _notifier_for(path: str) -> Notifier:
    with _NOTIFIERS_LOCK:
        return _NOTIFIERS.setdefault(path, Notifier())


class SqliteBackend:
    """A `Backend` over one SQLite file, shared safely by threads and processes."""

    def __init__(self, path: str) -> None:
        self.path = os.path.realpath(path)
        parent = os.path.dirname(self.path)
        if not os.path.isdir(parent):
            raise StorageError(f"cannot open {path!r}: directory {parent!r} does not exist")
        self.notifier = _notifier_for(self.path)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._closed = False
        self._schemas: dict[str, pa.Schema] = {}
        self._serials = itertools.count()  # numbers this handle's connections (`change_token`)
        self._commits = 0  # writes this handle committed, from any thread (`change_token`)
        try:
            self._initialise()
        except BaseException:
            self.close()
            raise

    # -- connections and transactions -------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise StorageClosed(f"storage {self.path!r} is closed")
            try:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=60.0
                )
            except sqlite3.Error as e:
                raise StorageError(f"cannot open {self.path!r}: {e}") from None
            self._connections.append(conn)
            self._local.serial = next(self._serials)
        with self._errors("configuring the connection"):
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.execute("PRAGMA synchronous = FULL")
        return conn

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or self._closed:
            conn = self._connect()
            self._local.conn = conn
        return conn

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.OperationalError as e:
            raise StorageError(f"{self.path!r}: {what} failed: {e}") from None
        except sqlite3.DatabaseError as e:
            raise CorruptStorage(
                f"{self.path!r} is not a readable twofold storage file ({what}): {e}"
            ) from None
        except sqlite3.ProgrammingError as e:
            if self._closed:
                raise StorageClosed(f"storage {self.path!r} is closed") from None
            raise StorageError(f"{self.path!r}: {what} failed: {e}") from None

    @contextmanager
    def _transaction(self, what: str, *, write: bool) -> Iterator[sqlite3.Cursor]:
        conn = self._conn()
        with self._errors(what):
            cur = conn.cursor()
            cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                try:
                    yield cur
                except BaseException:
                    cur.execute("ROLLBACK")
                    raise
                cur.execute("COMMIT")
            finally:
                if write:
                    self._wrote()

    def _initialise(self) -> None:
        conn = self._conn()
        with self._errors("opening"):
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                raise StorageError(f"{self.path!r}: cannot switch to WAL mode (got {mode!r})")
        with self._transaction("opening", write=True) as cur:
            # Not `executescript`: it commits first, outside this transaction.
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    cur.execute(statement)
            cur.execute("INSERT OR IGNORE INTO twofold_meta VALUES ('format', ?)", (FORMAT,))
            row = cur.execute("SELECT value FROM twofold_meta WHERE key = 'format'").fetchone()
        if row is None or row[0] != FORMAT:
            raise CorruptStorage(
                f"{self.path!r} holds storage format {row[0] if row else None!r}, "
                f"this code reads {FORMAT!r}"
            )

    # -- shards -----------------------------------------------------------------------------

    def create_shard(self, shard_id: str, desc: RelationDesc) -> bool:
        with self._transaction(f"creating shard {shard_id!r}", write=True) as cur:
            cur.execute(
                "INSERT OR IGNORE INTO shards VALUES (?, ?, ?, ?)",
                (shard_id, encode_desc(desc), enc_time(0), enc_time(0)),
            )
            return cur.rowcount == 1

    def describe(self, shard_id: str) -> RelationDesc:
        with self._transaction(f"reading shard {shard_id!r}", write=False) as cur:
            row = cur.execute("SELECT desc FROM shards WHERE shard_id = ?", (shard_id,)).fetchone()
        if row is None:
            raise UnknownShard(shard_id)
        return decode_desc(row[0], shard_id)

    def _schema(self, shard_id: str) -> pa.Schema:
        schema = self._schemas.get(shard_id)
        if schema is None:
            schema = self._schemas[shard_id] = update_schema(self.describe(shard_id))
        return schema

    def data_version(self) -> int:
        """SQLite's `PRAGMA data_version` on this thread's connection: it moves whenever
        another connection (another thread's, another process's) commits to the file — a
        cheap check that nothing changed since the last read (this thread's own commits do
        not move it; the notifier tells of those). ~2 us: the pragma runs on a cursor kept
        per thread; any trouble with it (closed, an error) goes through a fresh one, which
        raises the typed errors."""
        local = self._local
        cur: sqlite3.Cursor | None = getattr(local, "probe", None)
        if cur is not None and not self._closed:
            try:
                cur.execute("PRAGMA data_version")
                row = cur.fetchone()
                if row is not None:
                    return int(row[0])
            except sqlite3.Error:
                pass
        local.probe = None
        with self._errors("reading the data version"):
            cur = self._conn().cursor()
            cur.execute("PRAGMA data_version")
            row = cur.fetchone()
        if row is None:
            raise StorageError(f"{self.path!r}: PRAGMA data_version returned no row")
        local.probe = cur
        return int(row[0])

    def _wrote(self) -> None:
        """Count a write of this handle (after it ended, committed or not: counting one that
        changed nothing only costs a poll its skip)."""
        with self._lock:
            self._commits += 1

    def change_token(self) -> tuple[int, int, int]:
        """A value that moves whenever any shard of this file may have changed since this
        thread last took it: this thread's connection, the writes this handle committed, and
        that connection's `data_version` (which every other connection's commit moves — other
        threads', other handles', other processes' — but not its own, hence the count). Equal
        tokens from one thread mean nothing was committed between them, so a poll that saw
        the first may skip its reads (`Listener`). Taken before those reads: a commit after it
        moves the next token. ~2 µs (`data_version`'s kept cursor)."""
        commits = self._commits  # before the pragma: a write ending after it moves the next
        version = self.data_version()  # may open this thread's connection, numbering it
        return self._local.serial, commits, version

    def shard_ids(self) -> list[str]:
        with self._transaction("listing shards", write=False) as cur:
            return [r[0] for r in cur.execute("SELECT shard_id FROM shards ORDER BY shard_id")]

    @staticmethod
    def _state(cur: sqlite3.Cursor, shard_id: str) -> ShardState:
        row = cur.execute(
            "SELECT upper, since FROM shards WHERE shard_id = ?", (shard_id,)
        ).fetchone()
        if row is None:
            raise UnknownShard(shard_id)
        return ShardState(dec_frontier(row[0]), dec_frontier(row[1]))

    def state(self, shard_id: str) -> ShardState:
        with self._transaction(f"reading shard {shard_id!r}", write=False) as cur:
            return self._state(cur, shard_id)

    def compare_and_append(
        self, shard_id: str, lower: Frontier, new_upper: Frontier, updates: pa.Table | None
    ) -> Frontier | None:
        # Encode before taking the write lock, so the lock is held only for the write itself.
        blob = encode_ipc(updates) if updates is not None and updates.num_rows else None
        with self._transaction(f"appending to shard {shard_id!r}", write=True) as cur:
            current = self._state(cur, shard_id).upper
            if current != lower:
                return current
            if blob is not None and updates is not None and lower.time is not None:
                cur.execute(
                    "INSERT INTO parts (shard_id, lower, upper, since, count, data) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (shard_id, enc_time(lower.time), enc_frontier(new_upper), enc_time(0),
                     updates.num_rows, blob),
                )
            cur.execute(
                "UPDATE shards SET upper = ? WHERE shard_id = ?",
                (enc_frontier(new_upper), shard_id),
            )
        self.notifier.notify(shard_id)
        return None

    def advance_uppers(self, shard_ids: list[str], upper: Frontier) -> None:
        if not shard_ids or upper.time is None:
            return
        target = enc_frontier(upper)
        with self._transaction("advancing uppers", write=True) as cur:
            # An empty upper is NULL, which no comparison selects: closed shards stay closed.
            advanced = [
                r[0] for r in cur.execute(
                    f"UPDATE shards SET upper = ? WHERE upper < ? AND shard_id IN "
                    f"({','.join('?' * len(shard_ids))}) RETURNING shard_id",
                    (target, target, *shard_ids),
                ).fetchall()
            ]
        for shard_id in advanced:
            self.notifier.notify(shard_id)

    def advance_prefixed_uppers(self, prefix: str, upper: Frontier) -> None:
        """`advance_uppers` of every shard whose id starts with `prefix` (non-empty), as one
        autocommit write statement: no listing of the shards first, no BEGIN and COMMIT round
        trips. The ticker's round (`Storage.advance_tables`) — each sqlite3 call releases and
        retakes the interpreter lock, a handoff that waits for a busy loop thread to drop it.

        One write statement outside a transaction takes the write lock before it reads (and
        waits for it under the busy timeout, as `BEGIN IMMEDIATE` does), so it is as atomic as
        the transaction of `advance_uppers`; the prefix is a range of the primary key. Not
        `RETURNING`: that commits on a later step than the update, a second slow call (measured
        against a busy loop: with 10 tables 1,983 -> 437 ticker switches per tick). The shards
        to notify are then read back in one row: those now at `upper`. A shard another handle
        moved on in between is not notified by this round (its listeners here find it by their
        poll, as they find any other process's append); one another handle put at `upper` is,
        and it did change."""
        if not prefix:
            raise ValueError("advance_prefixed_uppers needs a non-empty prefix")
        if upper.time is None:
            return
        target = enc_frontier(upper)
        # Text compares bytewise (UTF-8 keeps code point order): the ids starting with
        # `prefix` are exactly those in [prefix, prefix with its last character incremented).
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        with self._errors("advancing uppers"):
            conn = self._conn()
            try:
                moved = conn.execute(
                    "UPDATE shards SET upper = ?1 WHERE upper < ?1 AND shard_id >= ?2 "
                    "AND shard_id < ?3", (target, prefix, end)).rowcount
            finally:
                self._wrote()
            if moved <= 0:
                return
            (ids,) = conn.execute(
                "SELECT json_group_array(shard_id) FROM shards WHERE upper = ?1 "
                "AND shard_id >= ?2 AND shard_id < ?3", (target, prefix, end)).fetchone()
        for shard_id in json.loads(ids):
            self.notifier.notify(shard_id)

    def downgrade_since(self, shard_id: str, since: Frontier) -> Frontier:
        with self._transaction(f"downgrading since of {shard_id!r}", write=True) as cur:
            result = self._state(cur, shard_id).since.join(since)
            cur.execute(
                "UPDATE shards SET since = ? WHERE shard_id = ?",
                (enc_frontier(result), shard_id),
            )
        self.notifier.notify(shard_id)
        return result

    def _part(self, shard_id: str, row: tuple[int, int, int | None, int, int, bytes]) -> Part:
        part_id, lower, upper, since, count, data = row
        table = decode_ipc(data, self._schema(shard_id), f"shard {shard_id!r} part {part_id}")
        if table.num_rows != count:
            raise CorruptStorage(
                f"shard {shard_id!r} part {part_id}: holds {table.num_rows} updates, "
                f"recorded {count}"
            )
        return Part(part_id, dec_time(lower), dec_frontier(upper), dec_time(since), count,
                    table)

    def read_parts(
        self, shard_id: str, *, overlapping_from: int | None, up_to: int | None
    ) -> tuple[ShardState, list[Part]]:
        self._schema(shard_id)
        query = f"SELECT {_PART_COLUMNS}, data FROM parts WHERE shard_id = :shard"
        params: dict[str, object] = {"shard": shard_id}
        if overlapping_from is not None:
            # Parts are disjoint and ordered by lower, so only the last part starting at or
            # before `overlapping_from` can straddle it.
            query += (
                " AND lower >= coalesce((SELECT max(lower) FROM parts WHERE shard_id = :shard"
                " AND lower <= :start), :start)"
                # ... and not one that ends by then (dropped below): its data is not read
                " AND (upper IS NULL OR upper > :start)"
            )
            params["start"] = enc_time(overlapping_from)
        if up_to is not None:
            query += " AND lower <= :up_to"
            params["up_to"] = enc_time(up_to)
        query += " ORDER BY lower"
        with self._transaction(f"reading shard {shard_id!r}", write=False) as cur:
            state = self._state(cur, shard_id)
            rows = cur.execute(query, params).fetchall()
        parts = [self._part(shard_id, row) for row in rows]
        if overlapping_from is not None:
            parts = [p for p in parts if not p.upper.contains(overlapping_from)]
        return state, parts

    def part_infos(self, shard_id: str) -> tuple[ShardState, list[PartInfo]]:
        with self._transaction(f"reading shard {shard_id!r}", write=False) as cur:
            state = self._state(cur, shard_id)
            rows = cur.execute(
                f"SELECT {_PART_COLUMNS} FROM parts WHERE shard_id = ? ORDER BY lower",
                (shard_id,),
            ).fetchall()
        return state, [
            PartInfo(pid, dec_time(lo), dec_frontier(up), dec_time(si), n)
            for pid, lo, up, si, n in rows
        ]

    def load_parts(self, shard_id: str, part_ids: list[int]) -> list[Part] | None:
        marks = ",".join("?" * len(part_ids))
        with self._transaction(f"reading shard {shard_id!r}", write=False) as cur:
            rows = cur.execute(
                f"SELECT {_PART_COLUMNS}, data FROM parts WHERE shard_id = ? "
                f"AND part_id IN ({marks}) ORDER BY lower",
                (shard_id, *part_ids),
            ).fetchall()
        if len(rows) != len(set(part_ids)):
            return None
        return [self._part(shard_id, row) for row in rows]

    def replace_parts(self, shard_id: str, old: list[int], new: Part) -> bool:
        if not old:
            return False
        blob = encode_ipc(new.updates) if new.count else None
        marks = ",".join("?" * len(old))
        with self._transaction(f"compacting shard {shard_id!r}", write=True) as cur:
            (found,) = cur.execute(
                f"SELECT count(*) FROM parts WHERE shard_id = ? AND part_id IN ({marks})",
                (shard_id, *old),
            ).fetchone()
            if found != len(set(old)):
                return False
            cur.execute(
                f"DELETE FROM parts WHERE shard_id = ? AND part_id IN ({marks})", (shard_id, *old)
            )
            if blob is not None:
                cur.execute(
                    "INSERT INTO parts (shard_id, lower, upper, since, count, data) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (shard_id, enc_time(new.lower), enc_frontier(new.upper),
                     enc_time(new.since), new.count, blob),
                )
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()
