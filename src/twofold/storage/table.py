"""Tables: user-writable collections over shards, stamped by the timestamp oracle.

A table named `n` is the shard `table/n`, so every process opening the storage sees it. Each
write takes a fresh timestamp `ts` from the oracle (at least the table's upper) and
compare-and-appends its updates in `[upper, ts + 1)`: the write is at `ts` and, once it returns,
`ts` is complete (readable). Writers race through compare-and-append only; a loser retries with
a later timestamp, so writes from other processes (or the ticker) never make a write fail.

Blind writes (`insert`, `write`, and the raw retractions `delete`/`update`) need no read. A write
that depends on the table's contents (a checked delete, a primary-key check) reads them at some
upper and writes with `compare_and_write(lower=that upper, ...)`: it lands only if nothing was
appended since, so the read and the write happen at one timestamp; a loser re-reads and retries.
The checked writes users see live in `twofold.api` (`docs/semantics.md`, "Table writes").

The `Ticker` advances every table's upper to a fresh timestamp on an interval, so reads "now"
become possible without writes. It is a background thread with an owner: `start`/`stop` (which
joins it) or a `with` block; `tick()` does one round synchronously for tests. With
`idle_interval` set (`twofold serve`'s), a round on a backend that says when another connection
committed (SQLite's `data_version`) skips its tick while nothing was committed or stamped since
the last one, ticking at least every `idle_interval` (see `Ticker`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, TypeAlias

import numpy as np
import polars as pl
import pyarrow as pa

from twofold.protocol import Frontier, RelationDesc, Row
from twofold.storage.errors import InvalidUpdates, StorageClosed, StorageError, UpperMismatch
from twofold.storage.shard import Shard
from twofold.storage.updates import DIFF, TIME, rows_table, to_update_table

if TYPE_CHECKING:
    from twofold.storage.holds import ControllerHolds
    from twofold.storage.storage import Storage

TABLE_PREFIX: Final = "table/"
MAX_ATTEMPTS: Final = 1000

_log = logging.getLogger(__name__)

RowsLike: TypeAlias = "Sequence[Row] | pa.Table | pa.RecordBatch | pl.DataFrame"


def table_shard_id(name: str) -> str:
    return TABLE_PREFIX + name


class Table:
    """A writable table. Thread-safe; handles on one table in one `Storage` share a write lock."""

    def __init__(self, storage: Storage, name: str, shard: Shard, lock: threading.Lock) -> None:
        self._storage = storage
        self.name = name
        self.shard = shard
        self._lock = lock

    def __repr__(self) -> str:
        return f"Table({self.name!r})"

    @property
    def desc(self) -> RelationDesc:
        return self.shard.desc

    @property
    def upper(self) -> Frontier:
        return self.shard.upper

    @property
    def since(self) -> Frontier:
        return self.shard.since

    def insert(self, rows: RowsLike) -> int:
        """Insert `rows` (each once); return the write timestamp."""
        return self._write([(rows, 1)])

    def delete(self, rows: RowsLike) -> int:
        """Retract `rows` (each once), blindly; return the write timestamp.

        Storage-level: the rows are not checked for presence, so deleting an absent row leaves
        a negative count. `twofold.Table.delete` is the checked write users get.
        """
        return self._write([(rows, -1)])

    def update(self, old_rows: RowsLike, new_rows: RowsLike) -> int:
        """Replace `old_rows` by `new_rows` atomically, at one timestamp; return it (blind, like
        `delete`)."""
        return self._write([(old_rows, -1), (new_rows, 1)])

    def write(self, rows: RowsLike, diffs: Sequence[int] | np.ndarray | int) -> int:
        """Write `rows` with the given multiplicities (one per row, or one for all)."""
        return self._write([(rows, diffs)])

    def compare_and_write(self, lower: Frontier, rows: pa.Table | None,
                          diffs: np.ndarray | None = None) -> int | None:
        """Write `rows` with `diffs` at a fresh timestamp iff the upper is still `lower`.

        Returns the write's timestamp, or `None` (nothing written) if the upper moved: the
        caller's read is stale, so it re-reads and retries. `rows=None` writes nothing but still
        takes a timestamp and advances the upper past it, so the read is at a definite time.
        """
        if lower.time is None:
            raise InvalidUpdates(f"table {self.name!r} is closed to writes")
        updates = None if rows is None or rows.num_rows == 0 else self._updates(
            [(rows, diffs if diffs is not None else 1)])
        ts = self._storage.oracle.write_ts(at_least=lower.time)
        with self._lock:
            try:
                self.shard.compare_and_append(
                    [] if updates is None else self._stamp(updates, ts), lower,
                    Frontier.at(ts + 1))
            except UpperMismatch as e:
                self._storage.oracle.observe(e.actual.time if e.actual.time is not None else ts)
                return None
        return ts

    def _stamp(self, updates: pa.Table, ts: int) -> pa.Table:
        index = updates.schema.get_field_index(TIME)
        return updates.set_column(index, updates.schema.field(TIME),
                                  pa.array(np.full(updates.num_rows, ts, dtype=np.uint64)))

    def snapshot(self, as_of: int | None = None) -> pa.Table:
        """The table at `as_of` (default: the latest complete time)."""
        if as_of is None:
            latest = self.shard.upper.step_back()
            if latest is None:
                latest = 0  # nothing complete yet: let the shard raise its clear error
            as_of = latest
        return self.shard.snapshot(as_of)

    def advance_to(self, upper: Frontier) -> bool:
        """Advance the upper to `upper` if it is below it; `True` if this call advanced it."""
        with self._lock:
            for _ in range(MAX_ATTEMPTS):
                current = self.shard.upper
                if upper.less_equal(current):
                    return False
                try:
                    self.shard.compare_and_append([], current, upper)
                    return True
                except UpperMismatch:
                    continue
        raise StorageError(f"table {self.name!r}: could not advance the upper to {upper!r}")

    def _updates(self, parts: list[tuple[RowsLike, Sequence[int] | np.ndarray | int]]) -> pa.Table:
        """Validate the rows once, with placeholder times; the write stamps the real time."""
        return updates_table(parts, self.desc, self.name)

    def _write(self, parts: list[tuple[RowsLike, Sequence[int] | np.ndarray | int]]) -> int:
        updates = self._updates(parts)
        oracle = self._storage.oracle
        with self._lock:
            for _ in range(MAX_ATTEMPTS):
                upper = self.shard.upper
                if upper.time is None:
                    raise InvalidUpdates(f"table {self.name!r} is closed to writes")
                ts = oracle.write_ts(at_least=upper.time)
                try:
                    self.shard.compare_and_append(self._stamp(updates, ts), upper,
                                                  Frontier.at(ts + 1))
                    return ts
                except UpperMismatch:
                    continue  # another writer or the ticker moved the upper: take a later ts
        raise StorageError(f"table {self.name!r}: write lost {MAX_ATTEMPTS} races in a row")


def conform_rows(rows: RowsLike, desc: RelationDesc, what: str) -> pa.Table:
    """`rows` validated against `desc`, as an Arrow table of its columns in their canonical
    types (`SchemaMismatch`/`InvalidUpdates` otherwise)."""
    return updates_table([(rows, 1)], desc, what).drop_columns([TIME, DIFF])


def updates_table(parts: list[tuple[RowsLike, Sequence[int] | np.ndarray | int]],
                  desc: RelationDesc, name: str) -> pa.Table:
    """The rows of every part with its diffs, as one update table with placeholder times."""
    tables = []
    for rows, diffs in parts:
        data = _data_table(rows, desc)
        n = data.num_rows
        diff = np.full(n, diffs, dtype=np.int64) if isinstance(diffs, int) else np.asarray(
            diffs, dtype=np.int64)
        if diff.shape != (n,):
            raise InvalidUpdates(f"table {name!r}: {n} rows but {diff.shape[0]} diffs")
        data = data.append_column(TIME, pa.array(np.zeros(n, dtype=np.uint64)))
        tables.append(data.append_column(DIFF, pa.array(diff)))
    return pa.concat_tables([to_update_table(t, desc) for t in tables])


def _data_table(rows: RowsLike, desc: RelationDesc) -> pa.Table:
    """The rows as an Arrow table of the relation's columns (not yet type-checked)."""
    if isinstance(rows, pl.DataFrame):
        return rows.to_arrow()
    if isinstance(rows, pa.RecordBatch):
        return pa.Table.from_batches([rows])
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):
        raise InvalidUpdates(
            f"rows must be a sequence of rows, a pyarrow Table or a polars DataFrame, "
            f"got {type(rows).__name__}"
        )
    return rows_table(rows, desc)


class Ticker:
    """Advances the upper of every table of a storage to a fresh timestamp every `interval`
    seconds, on a background thread owned by this object; with `holds` (the controller's
    critical readers, `twofold.storage.holds`), also moves them every `holds.every` seconds.

    `idle_interval` (None: off; settable while running) lets an idle storage skip ticks: a
    round ticks when a commit to the file by any other connection (this process's writes and
    DDL on other threads, the maintenance process, other processes: the backend's
    `data_version`, read on this thread, whose own ticks and hold moves do not move it) or a
    timestamp the oracle handed out or observed came after the last tick — so a write is
    followed by a tick within `interval`, as without it — and otherwise only once
    `idle_interval` has passed since the last tick. Nothing a read needs waits longer: while no
    write was stamped since the last tick, the oracle's `read_ts` is that tick's time, which
    every table is complete through; what slows is the wall-clock movement of idle uppers
    (freshness lag and SUBSCRIBE progress while nothing is written). A backend without
    `data_version` (memory, PostgreSQL) ticks every `interval` regardless."""

    def __init__(self, storage: Storage, interval: float = 0.1,
                 holds: ControllerHolds | None = None,
                 idle_interval: float | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"ticker interval must be positive, got {interval}")
        self._storage = storage
        self.interval = interval
        self.idle_interval = idle_interval
        self.holds = holds
        self.skipped = 0  # rounds that skipped their tick (`idle_interval`)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ticked = threading.Condition()
        self.ticks = 0
        self.last_error: BaseException | None = None

    def tick(self) -> int:
        """Advance every table once; return the timestamp the tables are now complete through."""
        ts = self._storage.oracle.write_ts()
        # One backend round for all tables, not a compare-and-append per table.
        self._storage.advance_tables(Frontier.at(ts + 1))
        with self._ticked:
            self.ticks += 1
            self._ticked.notify_all()
        return ts

    def wait_for_ticks(self, count: int, timeout: float | None = None) -> bool:
        """Wait until `ticks >= count`; `False` on timeout."""
        with self._ticked:
            return self._ticked.wait_for(lambda: self.ticks >= count, timeout)

    def _idle(self, version: int | None, last_ts: int, last_tick: float) -> bool:
        """Whether this round may skip its tick (`idle_interval`): the backend's data version
        `version` (taken before the round) and the oracle are where the last tick left
        them, and the last tick is recent."""
        idle = self.idle_interval
        return (idle is not None and version is not None
                and self._storage.oracle.read_ts() == last_ts
                and time.monotonic() - last_tick < idle)

    def _run(self) -> None:
        next_hold = time.monotonic()
        data_version = getattr(self._storage.backend, "data_version", None)
        seen: int | None = None  # the data version before the last tick
        last_ts, last_tick = -1, 0.0
        while not self._stop.wait(self.interval):
            try:
                # Taken before the tick: a commit after it moves the next round's.
                version = (None if data_version is None or self.idle_interval is None
                           else data_version())
                if version is not None and version == seen and self._idle(
                        version, last_ts, last_tick):
                    self.skipped += 1
                else:
                    seen = version
                    last_ts, last_tick = self.tick(), time.monotonic()
                if self.holds is not None and time.monotonic() >= next_hold:
                    self.holds.step()
                    next_hold = time.monotonic() + self.holds.every
            except StorageClosed:
                return
            except Exception as e:  # a failed round must not stop time; the next one retries
                self.last_error = e
                _log.warning("ticker: %s", e)

    def start(self) -> Ticker:
        if self._thread is not None:
            raise RuntimeError("ticker already started")
        self._thread = threading.Thread(target=self._run, name="twofold-ticker", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop ticking and join the thread (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Ticker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
