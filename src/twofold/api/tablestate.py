"""A table's contents as this process last read them, indexed by key: what checked writes read.

Contract: a `TableState` mirrors one table's shard. `sync()` brings it to the shard's current
upper by reading only what was appended since it last synced (a `Listener` over the shard), so
its cost follows the writes since, never the table's size; afterwards `frontier` is that upper
and the state holds exactly the table's contents at `frontier - 1`. A writer that read the state
at `frontier` writes with compare-and-append at `frontier` (`Table.compare_and_write`), so its
read and its write are at one timestamp.

Rows are indexed by their *key* — the primary key's columns, or every column for a table
without one — in a `GroupTable` (the engine's vectorised hash map from key tuples to dense ids):
`ids(keys)` costs time in proportion to the keys asked for. Per id the state keeps the net
multiplicity (`counts`) and where its row is stored (`row_at`, into an append-only `RowStore`),
so a write can retract the row exactly as stored. A primary key's equality is SQL's, as in
grouping: NULL equals NULL, -0.0 equals 0.0, one NaN (so `-0.0` and `0.0` are one key, as in a
PostgreSQL unique index). Without a primary key a row is its own key, by *stored identity*, as
in consolidation: floats by their bits with every NaN one value, so `0.0` and `-0.0` are two rows
(each id then holds copies of exactly one stored value, and retracting `n` copies of it cancels
exactly what is there). `same_rows` compares rows by that identity.

Ids of keys that are no longer (or never were) in the table, and rows no id points at, are
garbage; the state compacts itself when garbage outweighs what is live (amortised O(1) per row).
Not thread-safe: its owner (`TableWriter`) serialises access.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import polars as pl
import pyarrow as pa

from twofold.engine.frames import DTYPES
from twofold.engine.groups import GroupTable
from twofold.engine.hashing import stored_identity
from twofold.protocol import Frontier
from twofold.storage import DIFF, TIME, InvalidUpdates, Listener, SinceViolation
from twofold.storage import Table as StorageTable

_SLACK: Final = 4096
"""Garbage tolerated before a compaction is considered at all."""
_RELOADS: Final = 10
"""Loads `sync` tries when compaction passes what it has seen again and again (no hold keeps
since back on SQLite or memory storage: there only an explicit `downgrade_since` moves it)."""


class RowStore:
    """Rows appended in parts merged geometrically (each row copied O(log n) times); read back
    by position with `take`."""

    def __init__(self, schema: dict[str, pl.DataType]) -> None:
        self.schema = schema
        self._parts: list[pl.DataFrame] = []
        self.frame = pl.DataFrame(schema=schema)

    def __len__(self) -> int:
        return self.frame.height

    def append(self, rows: pl.DataFrame) -> np.ndarray:
        """Store `rows`; return their positions."""
        start = self.frame.height
        parts = [*self._parts, rows]
        while len(parts) >= 2 and parts[-2].height <= 2 * parts[-1].height:
            parts[-2:] = [pl.concat(parts[-2:], how="vertical", rechunk=True)]
        self._parts = parts
        self.frame = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical",
                                                                 rechunk=False)
        return np.arange(start, start + rows.height, dtype=np.int64)

    def take(self, positions: np.ndarray) -> pl.DataFrame:
        return self.frame[pl.Series(positions, dtype=pl.UInt32)]


class TableState:
    """The contents of one table, indexed by `key` (see the module docstring)."""

    def __init__(self, table: StorageTable, key: Sequence[str] | None) -> None:
        self.table = table
        desc = table.desc
        self.names: list[str] = list(desc.names)
        self.schema: dict[str, pl.DataType] = {
            n: DTYPES[t.scalar] for n, t in zip(desc.names, desc.types, strict=True)}
        self.key: list[str] = list(key) if key else list(self.names)
        self._by_identity = not key
        """No primary key: rows are keyed by stored identity (`stored_identity`), not SQL
        equality."""
        self.frontier = Frontier.minimum()
        self.version = 0
        """Bumped whenever the contents change: a plan made at one version holds while it
        stands, whatever the frontier (the ticker advances uppers without writing)."""
        self._listener: Listener | None = None
        self._reset()

    def _reset(self) -> None:
        key_sch = {k: self.schema[k] for k in self.key}
        if self._by_identity:
            key_sch = {k: pl.UInt64() if dt == pl.Float64 else dt for k, dt in key_sch.items()}
        self._groups = GroupTable(key_sch)
        self.counts = np.zeros(1024, np.int64)
        self.row_at = np.full(1024, -1, np.int64)
        self.rows = RowStore(self.schema)
        self._live = 0  # ids with a non-zero count, kept by `_apply`

    # -- following the shard ----------------------------------------------------------------

    def sync(self) -> Frontier:
        """Catch up with the shard; return the upper the state now reflects."""
        if self._listener is None:
            self._load()
        assert self._listener is not None
        for _ in range(_RELOADS):
            try:
                batches = self._listener.poll()
                break
            except SinceViolation:
                self._load()  # compacted past what we saw: start again from a snapshot
                assert self._listener is not None
        else:
            batches = self._listener.poll()
        for batch in batches:
            if len(batch):
                self._apply(batch.updates)
                self.version += 1
        self.frontier = self._listener.frontier
        return self.frontier

    def _load(self) -> None:
        self._reset()
        self.version += 1
        if self._listener is not None:
            self._listener.close()  # release its lease now, not when it is collected
            self._listener = None
        upper = self.table.upper
        if upper == Frontier.minimum():
            # Nothing complete yet: make time 0 complete (and empty) so there is a time to
            # read at and to listen from.
            self.table.advance_to(Frontier.at(1))
            upper = self.table.upper
        if upper.time is None:
            raise InvalidUpdates(f"table {self.table.name!r} is closed to writes")
        # Not upper, then snapshot, then listen: `since` could pass the time read between them
        # (`Shard.snapshot_and_listen`).
        _, snapshot, listener = self.table.shard.snapshot_and_listen()
        self._apply(snapshot)
        self._listener = listener
        self.frontier = listener.frontier

    def _apply(self, updates: pa.Table) -> None:
        frame = pl.from_arrow(updates.drop_columns([TIME]))
        assert isinstance(frame, pl.DataFrame)
        ids = self.ids(frame)
        diff = frame.get_column(DIFF).to_numpy()
        before = self.counts[ids] != 0
        np.add.at(self.counts, ids, diff)
        after = self.counts[ids] != 0
        _, first = np.unique(ids, return_index=True)
        self._live += int(after[first].sum() - before[first].sum())
        positive = diff > 0
        if positive.any():
            at = np.flatnonzero(positive)
            self.row_at[ids[at]] = self.rows.append(frame.select(self.names)[pl.Series(
                at, dtype=pl.UInt32)])
        self._maybe_compact()

    # -- reading ----------------------------------------------------------------------------

    def ids(self, frame: pl.DataFrame) -> np.ndarray:
        """The id of each row's key (columns named like the table's; others are ignored)."""
        keys = frame.select(self.key)
        ids = self._groups.ids(stored_identity(keys) if self._by_identity else keys)
        need = self._groups.count
        if need > len(self.counts):
            size = max(need, 2 * len(self.counts))
            self.counts = np.concatenate([self.counts, np.zeros(size - len(self.counts),
                                                                 np.int64)])
            self.row_at = np.concatenate([self.row_at, np.full(size - len(self.row_at), -1,
                                                               np.int64)])
        return ids

    def same_rows(self, rows: pl.DataFrame, ids: np.ndarray) -> np.ndarray:
        """Whether each of `rows` is the stored row of the id beside it (every id with a
        positive count), by stored identity: floats by their bits, every NaN one value, NULL
        equal to NULL."""
        probe = stored_identity(rows.select(self.names))
        held = stored_identity(self.stored(ids))
        same = np.ones(len(ids), dtype=bool)
        for c in self.names:
            same &= probe.get_column(c).eq_missing(held.get_column(c)).to_numpy()
        return same

    def stored(self, ids: np.ndarray) -> pl.DataFrame:
        """The stored row of each id (every id must have a positive count)."""
        return self.rows.take(self.row_at[ids])

    def live(self) -> tuple[np.ndarray, pl.DataFrame]:
        """Every id with a positive count and its row: the table's contents (O(table))."""
        ids = np.flatnonzero(self.counts[: self._groups.count] > 0)
        return ids, self.stored(ids)

    # -- compaction -------------------------------------------------------------------------

    def _maybe_compact(self) -> None:
        held = self._groups.count
        if held <= 2 * self._live + _SLACK and len(self.rows) <= 2 * self._live + _SLACK:
            return
        keep = self.counts[:held] != 0
        old = self._groups.compact(keep)
        counts = self.counts[old]
        row_at = self.row_at[old]
        rows = RowStore(self.schema)
        has_row = row_at >= 0
        new_at = np.full(len(old), -1, np.int64)
        if has_row.any():
            new_at[has_row] = rows.append(self.rows.take(row_at[has_row]))
        size = max(1024, 2 * len(old))
        self.counts = np.zeros(size, np.int64)
        self.counts[: len(old)] = counts
        self.row_at = np.full(size, -1, np.int64)
        self.row_at[: len(old)] = new_at
        self.rows = rows
