"""Operator state: a collection arranged by key, accumulated over all times processed so far.

Operators process times in order and only ever need "the collection before the current time",
so a `KeyedState` keeps its spine compacted to the latest time (merges collapse history) and
answers batched key lookups in O(keys looked up + rows found), independent of the state's size.

Lookups return *candidates*: every row of the asked keys, plus possibly rows of other keys
whose hash shares the prefix. Operators are written so such extra rows cancel (a keyed
operator emits `f(new) - f(old)` over the same extra rows) or cannot match (a join compares the
actual key values), which saves an exact filtering join per step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from twofold.engine.arrangement import Spine
from twofold.engine.consolidation import consolidate, consolidate_sorted
from twofold.engine.frames import DIFF, TIME, empty, schema
from twofold.engine.hashing import row_hash, sorted_unique
from twofold.engine.snapshot import gather_keys
from twofold.protocol import ColumnType


class KeyedState:
    """The accumulated collection of one operator input, arranged by `key_cols`."""

    def __init__(self, sch: dict[str, pl.DataType], key_cols: Sequence[str]) -> None:
        self.sch = dict(sch)
        self.cols = list(sch)
        self.key_cols = list(key_cols)
        self.spine = Spine(self.sch, self.key_cols)

    @classmethod
    def of(cls, types: Sequence[ColumnType], key: Sequence[int]) -> KeyedState:
        """State for a relation of `types` keyed by the columns `key`."""
        return cls(schema(types), [f"c{i}" for i in key])

    def __len__(self) -> int:
        return len(self.spine)

    def _empty(self) -> pl.DataFrame:
        return empty({**self.sch, DIFF: pl.Int64()})

    def insert(self, t: int, delta: pl.DataFrame) -> None:
        """Add the collection frame `delta` (the change at `t`)."""
        if delta.height == 0:
            return
        # Only the accumulation matters, never when: storing every update at time 0 lets
        # merges cancel retractions without ever advancing times.
        self.spine.insert(delta.with_columns(pl.lit(0, pl.UInt64).alias(TIME)), t, t + 1)

    def lookup(self, keys: pl.DataFrame) -> pl.DataFrame:
        """Candidate accumulated rows (collection frame, consolidated) of the key rows in
        `keys` (columns positional to the key). NULL keys are keys like any other."""
        found = gather_keys(self.spine.batches, keys) if keys.height else None
        if found is None:
            return self._empty()
        frame, codes, hashes = found
        # Codes ignore time, so updates of one row at different times become adjacent and
        # sum once `time` is dropped.
        out, _, _ = consolidate_sorted(frame.select([*self.cols, DIFF]), codes, hashes)
        return out

    def accumulated(self) -> pl.DataFrame:
        """The whole accumulated collection (consolidated)."""
        parts = [b.data for b in self.spine.batches]
        if not parts:
            return self._empty()
        frame = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
        return consolidate(frame, self.cols)

    def lookup_unconsolidated(self, keys: pl.DataFrame) -> pl.DataFrame | None:
        """Like `lookup`, rows not consolidated (for joins, where multiplying unconsolidated
        diffs gives the same result)."""
        found = gather_keys(self.spine.batches, keys) if keys.height else None
        return None if found is None else found[0].drop(TIME)


def distinct_keys(frame: pl.DataFrame, key_cols: Sequence[str]) -> pl.DataFrame:
    """The distinct key tuples of `frame`, as columns `k0..`."""
    return frame.select([pl.col(c).alias(f"k{j}") for j, c in enumerate(key_cols)]).unique()


def consolidated_union(parts: Sequence[pl.DataFrame], cols: Sequence[str]) -> pl.DataFrame:
    present = [p for p in parts if p.height]
    if not present:
        return parts[0]
    frame = present[0] if len(present) == 1 else pl.concat(present, how="vertical")
    return consolidate(frame, cols)


_NUMPY_EXACT = (pl.Int64, pl.UInt64, pl.Boolean)


class _Versions:
    """One immutable level of a `LatestState`: rows sorted by `codes` (their key hash)."""

    __slots__ = ("codes", "frame")

    def __init__(self, frame: pl.DataFrame, codes: np.ndarray) -> None:
        self.frame = frame
        self.codes = codes

    def __len__(self) -> int:
        return self.frame.height


class LatestState:
    """The latest row of each key, for operators whose state is one row per key (accumulators).

    Rows are written whole (`upsert`), never retracted: a level written later shadows every
    earlier level for the same key, so merges keep one row per key and never carry a retraction
    to cancel (about half the rows a retract-and-insert `KeyedState` merges). Levels merge
    geometrically like a spine. A row whose `live` column is 0 is a tombstone: it shadows older
    rows, reads skip it, and merging into the oldest level drops it.

    Invariant: a key has at most one row per level, and the row of the newest level holding the
    key is its current row. Key equality is exact (hashes only nominate candidates).
    """

    def __init__(self, sch: dict[str, pl.DataType], key_cols: Sequence[str], live: str) -> None:
        self.sch = dict(sch)
        self.key_cols = list(key_cols)
        self.live = live
        self.levels: list[_Versions] = []

    def __len__(self) -> int:
        return sum(len(v) for v in self.levels)

    def _codes(self, frame: pl.DataFrame) -> np.ndarray:
        return row_hash(frame, self.key_cols)

    def lookup(self, keys: pl.DataFrame) -> pl.DataFrame:
        """The current live rows of the distinct key rows in `keys` (named like the state's
        key columns), plus possibly live rows of other keys sharing a hash."""
        if not self.levels or keys.height == 0:
            return empty(self.sch)
        probe = sorted_unique(self._codes(keys))
        parts: list[pl.DataFrame] = []
        part_codes: list[np.ndarray] = []
        for level in reversed(self.levels):  # newest first
            lo = np.searchsorted(level.codes, probe, "left")
            hi = np.searchsorted(level.codes, probe, "right")
            lens = hi - lo
            total = int(lens.sum())
            if total == 0:
                continue
            if total == int((lens > 0).sum()):
                idx = lo[lens > 0]
            else:
                keep = lens > 0
                starts, lens = lo[keep], lens[keep]
                idx = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(total)
            parts.append(level.frame[idx])
            part_codes.append(level.codes[idx])
        if not parts:
            return empty(self.sch)
        frame = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
        if len(parts) > 1:
            frame = _first_per_key(frame, np.concatenate(part_codes), self.key_cols)
        return frame.filter(pl.col(self.live) != 0)

    def upsert(self, rows: pl.DataFrame) -> None:
        """Make `rows` (distinct keys; `live` 0 for deleted keys) the current rows of their
        keys."""
        if rows.height == 0:
            return
        codes = self._codes(rows)
        if rows.height > 1:
            # Keys are distinct: the order among equal codes carries nothing.
            order = np.argsort(codes)
            rows, codes = rows[order], codes[order]
        if not self.levels:
            keep = (rows.get_column(self.live) != 0).to_numpy()
            if not keep.all():
                rows, codes = rows.filter(pl.Series(keep)), codes[keep]
            if rows.height == 0:
                return
        levels = [*self.levels, _Versions(rows, codes)]
        while len(levels) >= 2 and len(levels[-2]) <= 2 * len(levels[-1]):
            merged = self._merge(levels[-2], levels[-1], bottom=len(levels) == 2)
            levels[-2:] = [merged] if len(merged) else []
        self.levels = levels

    def _merge(self, old: _Versions, new: _Versions, *, bottom: bool) -> _Versions:
        frame = pl.concat([old.frame, new.frame], how="vertical", rechunk=False)
        codes = np.concatenate([old.codes, new.codes])
        # Stable: of equal codes, the older level's rows come first.
        order = np.argsort(codes, kind="stable")
        sorted_codes = codes[order]
        n = len(order)
        keep = np.ones(n, dtype=bool)
        dup = np.flatnonzero(sorted_codes[1:] == sorted_codes[:-1])
        if len(dup):
            same = np.ones(len(dup), dtype=bool)
            for c in self.key_cols:
                same &= _equal_at(frame.get_column(c), order[dup], order[dup + 1])
            runs_of_two = len(dup) < 2 or not (dup[1:] == dup[:-1] + 1).any()
            if runs_of_two and same.all():
                keep[dup] = False  # the older version of each key
            else:
                # Hash collisions between distinct keys: exact dedup, newest version wins.
                merged = frame[order].with_columns(pl.Series("_c", sorted_codes))
                merged = merged.unique(self.key_cols, keep="last", maintain_order=True)
                if bottom:
                    merged = merged.filter(pl.col(self.live) != 0)
                return _Versions(merged.drop("_c"), merged.get_column("_c").to_numpy())
        if bottom:
            keep &= frame.get_column(self.live).to_numpy()[order] != 0
        idx = order[keep]
        return _Versions(frame[idx], codes[idx])


def _equal_at(col: pl.Series, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether `col[a[i]]` equals `col[b[i]]` (NULL equal to NULL), per `i`."""
    if col.dtype in _NUMPY_EXACT and col.null_count() == 0:
        values = col.to_numpy()
        eq: np.ndarray = values[a] == values[b]
        return eq
    return col.gather(pl.Series(a)).eq_missing(col.gather(pl.Series(b))).to_numpy()


def _first_per_key(frame: pl.DataFrame, codes: np.ndarray, key_cols: Sequence[str]) -> pl.DataFrame:
    """The first row of each key in `frame` (exact key equality; `codes` are key hashes)."""
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    dup = np.flatnonzero(sorted_codes[1:] == sorted_codes[:-1])
    if len(dup) == 0:
        return frame
    same = np.ones(len(dup), dtype=bool)
    for c in key_cols:
        same &= _equal_at(frame.get_column(c), order[dup], order[dup + 1])
    if not same.all():
        return frame.unique(list(key_cols), keep="first", maintain_order=True)
    # Within a run of equal codes (one key), stable order puts the first row first.
    keep = np.ones(len(order), dtype=bool)
    keep[dup + 1] = False
    return frame[np.sort(order[keep])]
