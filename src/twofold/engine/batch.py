"""Immutable, consolidated batches of updates: the unit an arrangement's spine is made of.

A `Batch` holds an update frame (`c*`, `time`, `diff`) consolidated (no two rows agree on all
columns and `time`; no zero diffs) and sorted by the u64 hash of its key columns, with that hash
column beside it as a read-only numpy array for binary search. Its description is `[lower,
upper)` (`upper is None` meaning the empty frontier) and `since`, the time all its times were
advanced to (times `< since` became `since`).

Ordering by key *hash* rather than key value makes every row type (strings, several columns,
nulls) searchable with one `np.searchsorted`: equal keys hash equal, so a key's rows are the rows
of its hash's range, filtered by exact key equality (which resolves the rare hash collision).

Invariant: a `Batch` is never mutated after construction (its arrays are read-only), so any
number of readers may share it with the writer on other threads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from twofold.engine.frames import DIFF, TIME, advance_times, consolidate, key_hash


@dataclass(frozen=True, slots=True, eq=False)
class Batch:
    """Consolidated updates sorted by key hash, valid for times in `[lower, upper)`."""

    data: pl.DataFrame
    hashes: np.ndarray
    lower: int
    upper: int | None
    since: int

    def __len__(self) -> int:
        return self.data.height

    def with_upper(self, upper: int | None) -> Batch:
        return Batch(self.data, self.hashes, self.lower, upper, self.since)


def build_batch(
    updates: pl.DataFrame,
    key_cols: Sequence[str],
    lower: int,
    upper: int | None,
    since: int,
    *,
    consolidated: bool = False,
) -> Batch:
    """A batch from arbitrary updates: advance to `since`, consolidate, sort by key hash."""
    frame = advance_times(updates, since) if since > 0 else updates
    if not consolidated:
        frame = consolidate(frame, [c for c in frame.columns if c != DIFF])
    hashes = key_hash(frame, key_cols)
    if frame.height > 1:
        order = np.argsort(hashes, kind="stable")
        hashes = hashes[order]
        frame = frame[order]
    hashes.flags.writeable = False
    return Batch(frame, hashes, lower, upper, since)


def merge_batches(batches: Sequence[Batch], key_cols: Sequence[str], since: int) -> Batch:
    """One batch equal (at every time `>= since`) to the union of adjacent `batches`."""
    frame = pl.concat([b.data for b in batches], how="vertical", rechunk=False)
    upper = batches[-1].upper
    return build_batch(frame, key_cols, batches[0].lower, upper, since)


def filter_time(frame: pl.DataFrame, *, le: int | None = None, ge: int | None = None,
                lt: int | None = None) -> pl.DataFrame:
    """The updates of `frame` whose time satisfies every given bound."""
    preds = []
    if le is not None:
        preds.append(pl.col(TIME) <= le)
    if lt is not None:
        preds.append(pl.col(TIME) < lt)
    if ge is not None:
        preds.append(pl.col(TIME) >= ge)
    return frame.filter(*preds) if preds else frame


def gather_hashes(batch: Batch, query: np.ndarray) -> pl.DataFrame | None:
    """The rows of `batch` whose key hash is in `query` (sorted, unique u64), or `None`."""
    hashes = batch.hashes
    if len(hashes) == 0:
        return None
    if len(query) == 1:
        q = query[0]
        lo = int(np.searchsorted(hashes, q, "left"))
        hi = int(np.searchsorted(hashes, q, "right"))
        if lo == hi:
            return None
        return batch.data.slice(lo, hi - lo)
    los = np.searchsorted(hashes, query, "left")
    lens = np.searchsorted(hashes, query, "right") - los
    total = int(lens.sum())
    if total == 0:
        return None
    keep = lens > 0
    los, lens = los[keep], lens[keep]
    # Row indexes of every range, laid end to end: offset each range's start by the running
    # total of the lengths before it.
    starts = np.repeat(los - (np.cumsum(lens) - lens), lens)
    idx = starts + np.arange(total)
    return batch.data[idx]
