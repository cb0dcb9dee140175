"""Immutable, consolidated batches of updates: the unit an arrangement's spine is made of.

A `Batch` holds an update frame (`c*`, `time`, `diff`) sorted by each row's *sort code*
(`hashing.sort_code`: key hash high, row hash low) and then by time, the sorted codes as a
read-only numpy array for binary search, and each row's value hash. It is consolidated:
identical `(row, time)` updates appear once with their summed, non-zero diff. Its description is
`[lower, upper)` (`upper is None`: the empty frontier) and `since`, the time its times were
advanced to.

Invariant: a `Batch` is never mutated after construction (its arrays are read-only; its `memo`
only ever gains forms derived from its rows), so any number of readers may share it with the
writer on other threads.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from twofold.engine.consolidation import consolidate_sorted, take_rows
from twofold.engine.frames import DIFF, TIME, advance_times
from twofold.engine.hashing import key_range, row_and_key_hash, sort_code

_NO_BOUND = 1 << 64


@dataclass(frozen=True, slots=True, eq=False)
class Batch:
    """Consolidated updates sorted by sort code, valid for times in `[lower, upper)`."""

    data: pl.DataFrame
    codes: np.ndarray
    hashes: np.ndarray
    lower: int
    upper: int | None
    since: int
    # Bounds on the times held (possibly loose after consolidation drops rows); the defaults
    # claim nothing, so every merge involving the batch consolidates.
    tmin: int = 0
    tmax: int = _NO_BOUND
    # Derived forms computed on first use by readers (e.g. the collection summed over all
    # times); the batch itself never changes, so an entry never goes stale. Readers on several
    # threads may race to fill an entry: each computes the same value, either may win.
    memo: dict[str, Any] = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return self.data.height

    def with_upper(self, upper: int | None) -> Batch:
        return Batch(
            self.data,
            self.codes,
            self.hashes,
            self.lower,
            upper,
            self.since,
            self.tmin,
            self.tmax,
            self.memo,  # same rows, same derived forms
        )


def _freeze(*arrays: np.ndarray) -> None:
    for a in arrays:
        a.flags.writeable = False


def _sorted_consolidated(
    frame: pl.DataFrame,
    codes: np.ndarray,
    hashes: np.ndarray,
    lower: int,
    upper: int | None,
    since: int,
    tmin: int = 0,
    tmax: int = _NO_BOUND,
    *,
    stable: bool = True,
) -> Batch:
    frame, codes, hashes = consolidate_sorted(frame, codes, hashes, stable=stable)
    _freeze(codes, hashes)
    return Batch(frame, codes, hashes, lower, upper, since, tmin, tmax)


def build_batch(
    updates: pl.DataFrame, key_cols: Sequence[str], lower: int, upper: int | None, since: int
) -> Batch:
    """A batch from arbitrary updates: advance to `since`, hash, sort, consolidate."""
    frame = updates
    times = frame.get_column(TIME).to_numpy()
    if since > 0 and len(times) and int(times.min()) < since:
        frame = advance_times(updates, since)
        times = frame.get_column(TIME).to_numpy()
    cols = [c for c in frame.columns if c not in (TIME, DIFF)]
    hashes, key_hashes = row_and_key_hash(frame, cols, key_cols)
    codes = sort_code(key_hashes, hashes)
    tmin, tmax = (int(times.min()), int(times.max())) if len(times) else (0, _NO_BOUND)
    if frame.height > 1 and tmin != tmax:
        # Order by time first; the stable sort by code in consolidation keeps it within codes.
        by_time = np.argsort(times, kind="stable")
        frame, codes, hashes = take_rows(frame, by_time), codes[by_time], hashes[by_time]
    # One time: no time order to keep within a code, so the (faster) unstable sort will do.
    return _sorted_consolidated(
        frame, codes, hashes, lower, upper, since, tmin, tmax, stable=tmin != tmax
    )


def _needs_advance(batch: Batch, since: int) -> bool:
    # `tmin` is a lower bound on the times held: at or past `since`, nothing moves.
    if batch.since >= since or len(batch) == 0 or batch.tmin >= since:
        return False
    earliest = batch.data.get_column(TIME).min()
    return isinstance(earliest, int) and earliest < since


def merge_batches(batches: Sequence[Batch], since: int) -> Batch:
    """One batch equal (at every time `>= since`) to the union of adjacent `batches`, given in
    time order (so each code's rows stay in time order after the stable sort)."""
    advance = [_needs_advance(b, since) for b in batches]
    frames = [
        advance_times(b.data, since) if a else b.data for b, a in zip(batches, advance, strict=True)
    ]
    frame = pl.concat(frames, how="vertical", rechunk=False)
    codes = np.concatenate([b.codes for b in batches])
    hashes = np.concatenate([b.hashes for b in batches])
    tmin = min(max(b.tmin, since) for b in batches)
    tmax = max(max(b.tmax, since) for b in batches)
    disjoint = not any(advance) and all(a.tmax < b.tmin for a, b in itertools.pairwise(batches))
    if disjoint:
        # Each batch is consolidated and no time is shared between batches or moved by the
        # merge, so no two rows can consolidate: the merge is only an interleave by code
        # (stable, so each code's rows stay in time order).
        order = np.argsort(codes, kind="stable")
        codes, hashes, frame = codes.take(order), hashes.take(order), take_rows(frame, order)
        _freeze(codes, hashes)
        return Batch(frame, codes, hashes, batches[0].lower, batches[-1].upper, since, tmin, tmax)
    return _sorted_consolidated(
        frame, codes, hashes, batches[0].lower, batches[-1].upper, since, tmin, tmax
    )


def filter_time(
    frame: pl.DataFrame, *, le: int | None = None, ge: int | None = None, lt: int | None = None
) -> pl.DataFrame:
    """The updates of `frame` whose time satisfies every given bound."""
    preds = []
    if le is not None:
        preds.append(pl.col(TIME) <= le)
    if lt is not None:
        preds.append(pl.col(TIME) < lt)
    if ge is not None:
        preds.append(pl.col(TIME) >= ge)
    return frame.filter(*preds) if preds else frame


def key_slices(batch: Batch, key_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end row of each key hash's range in `batch` (`key_hashes` sorted, unique)."""
    lo, hi = key_range(key_hashes)
    return (np.searchsorted(batch.codes, lo, "left"), np.searchsorted(batch.codes, hi, "right"))


def gather_hashes(
    batch: Batch, key_hashes: np.ndarray
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray] | None:
    """The rows of `batch` in the ranges of `key_hashes` (sorted, unique) with their codes and
    hashes, or `None`. Rows of other keys sharing a key hash prefix may be included."""
    if len(batch) == 0:
        return None
    starts, ends = key_slices(batch, key_hashes)
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return None
    if len(starts) == 1:
        s = int(starts[0])
        return batch.data.slice(s, total), batch.codes[s : s + total], batch.hashes[s : s + total]
    keep = lens > 0
    starts, lens = starts[keep], lens[keep]
    # Row indexes of every range laid end to end: each range's start, offset by the running
    # total of the lengths before it.
    idx = np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(total)
    return take_rows(batch.data, idx), batch.codes.take(idx), batch.hashes.take(idx)
