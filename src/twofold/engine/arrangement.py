"""Arrangements: a collection indexed by key, as a spine of immutable batches, plus lock-free
snapshots of it.

An `Arrangement` has one writer. It holds two spines — the data (`c*` columns) and the error
collection (`error` column) — a `since` (reads before it are refused; merges advance times to
it) and an `upper` (every update at a time before it is present). `insert` appends a batch
covering `[upper, new_upper)`; batches merge geometrically (a batch merges into its left
neighbour while that neighbour is at most twice its size), so each update is merged O(log n)
times. With `defer_merges()`, `insert` only appends and `maintain()` does those merges later —
a runtime then reports the new upper before it spends time merging (`runtime/worker.py`);
the contents at every time at or after `since` are the same either way. `snapshot()` returns
an `ArrangementSnapshot`: the current batch tuples plus `since` and `upper`. It is immutable
and holds only references to immutable batches, so another thread may
read it while the writer keeps inserting, merging and compacting (reads live in `snapshot`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, TypeAlias

import polars as pl
import pyarrow as pa

from twofold.engine.batch import Batch, build_batch, merge_batches
from twofold.engine.errors import InputError
from twofold.engine.frames import (
    ERROR,
    TIME,
    empty,
    error_schema,
    schema,
    update_schema,
    updates_from_arrow,
    updates_from_rows,
)
from twofold.engine.snapshot import ArrangementSnapshot
from twofold.protocol import Frontier, RelationDesc

Updates: TypeAlias = (
    pl.DataFrame | pa.Table | pa.RecordBatch | Iterable[tuple[Sequence[Any], int, int]]
)
"""Updates at the boundary: an update frame, Arrow data with `time`/`diff`, or tuples."""


def as_update_frame(desc: RelationDesc, updates: Updates) -> pl.DataFrame:
    """Normalise any accepted update form to an update frame of `desc`."""
    if isinstance(updates, pl.DataFrame):
        expected = update_schema(desc.types)
        if dict(updates.schema) != expected:
            raise InputError(f"update frame schema {dict(updates.schema)} != {expected}")
        return updates
    if isinstance(updates, pa.Table | pa.RecordBatch):
        return updates_from_arrow(desc, updates)
    return updates_from_rows(desc, updates)


MAX_UNMERGED: Final = 8
"""Batches a spine that defers merges appends before it merges on insert anyway (a bound on
what a read walks if nobody calls `maintain`)."""


class Spine:
    """A single-writer list of batches, merged geometrically. Internal to arrangements and
    operators; `batches` is replaced (never mutated) on every change. With `deferred`, `insert`
    appends and `maintain` merges (the batches from `settled` on are the unmerged ones)."""

    __slots__ = ("batches", "deferred", "key_cols", "sch", "settled", "since")

    def __init__(self, sch: dict[str, pl.DataType], key_cols: Sequence[str]) -> None:
        self.sch = sch
        self.key_cols = list(key_cols)
        self.batches: tuple[Batch, ...] = ()
        self.since = 0
        self.deferred = False
        self.settled = 0

    def insert(self, updates: pl.DataFrame, lower: int, upper: int | None) -> None:
        if updates.height == 0:
            if self.batches:
                self.batches = (*self.batches[:-1], self.batches[-1].with_upper(upper))
            return
        batch = build_batch(updates, self.key_cols, lower, upper, self.since)
        if len(batch) == 0:
            return
        self.batches = (*self.batches, batch)
        if not self.deferred or len(self.batches) - self.settled > MAX_UNMERGED:
            self.maintain()

    def maintain(self) -> bool:
        """Merge the batches appended since the last merge, each as an eager `insert` would
        have; True if the batches changed."""
        if self.settled >= len(self.batches):
            return False
        batches = list(self.batches[: self.settled])
        for batch in self.batches[self.settled :]:
            batches.append(batch)
            while len(batches) >= 2 and len(batches[-2]) <= 2 * len(batches[-1]):
                merged = merge_batches(batches[-2:], self.since)
                batches[-2:] = [merged] if len(merged) else []
        changed = len(batches) != len(self.batches)
        self.batches = tuple(batches)
        self.settled = len(batches)
        return changed

    def merge_all(self) -> None:
        """Merge every batch into one (fully compacted to `since`)."""
        if len(self.batches) > 1 or (self.batches and self.batches[0].since < self.since):
            merged = merge_batches(self.batches, self.since)
            self.batches = (merged,) if len(merged) else ()
        self.settled = len(self.batches)

    def __len__(self) -> int:
        return sum(len(b) for b in self.batches)


class Arrangement:
    """A single-writer arrangement of a relation by `key` columns, with its error collection."""

    def __init__(
        self, desc: RelationDesc, key: Sequence[int], *, since: Frontier | None = None
    ) -> None:
        for k in key:
            if not 0 <= k < desc.arity:
                raise InputError(f"arrangement key column {k} outside relation of {desc.arity}")
        self.desc = desc
        self.key = tuple(key)
        self._data = Spine(schema(desc.types), [f"c{i}" for i in key])
        self._errors = Spine({ERROR: pl.String()}, [])
        self._since = since if since is not None else Frontier.minimum()
        self._upper = self._since if not self._since.is_empty else Frontier.minimum()
        self._set_spine_since()

    @property
    def since(self) -> Frontier:
        return self._since

    @property
    def upper(self) -> Frontier:
        return self._upper

    def __len__(self) -> int:
        return len(self._data)

    @property
    def batch_count(self) -> int:
        return len(self._data.batches)

    @property
    def size_bytes(self) -> int:
        """The bytes its batches hold (columns as polars estimates them, sort codes, hashes)."""
        return sum(int(b.data.estimated_size()) + int(b.codes.nbytes) + int(b.hashes.nbytes)
                   for spine in (self._data, self._errors) for b in spine.batches)

    def insert(self, updates: Updates, upper: Frontier, errors: pl.DataFrame | None = None) -> None:
        """Append updates at times in `[self.upper, upper)` and advance the upper to `upper`.

        `errors` is an error update frame (`error`, `time`, `diff`). Raises `InputError` (and
        applies nothing) if `upper` regresses or an update's time lies outside the window."""
        lower = self._upper
        if not lower.less_equal(upper):
            raise InputError(f"upper would regress from {lower} to {upper}")
        frame = as_update_frame(self.desc, updates)
        err = errors if errors is not None else empty(error_schema())
        lo = lower.time if lower.time is not None else 0
        for f, what in ((frame, "update"), (err, "error")):
            if f.height:
                tmin, tmax = f[TIME].min(), f[TIME].max()
                assert isinstance(tmin, int) and isinstance(tmax, int)
                if tmin < lo or upper.contains(tmax):
                    raise InputError(
                        f"{what} times [{tmin}, {tmax}] lie outside [{lower}, {upper})"
                    )
        if lower.is_empty:
            if frame.height or err.height:
                raise InputError(
                    "the arrangement is closed (its upper is empty): no updates may follow"
                )
            return
        up = upper.time
        self._data.insert(frame, lo, up)
        self._errors.insert(err, lo, up)
        self._upper = upper

    def advance_upper(self, upper: Frontier) -> None:
        """Advance the upper with no updates."""
        self.insert(empty(update_schema(self.desc.types)), upper)

    def compact(self, since: Frontier) -> None:
        """Allow compaction: reads before `since` are refused from now on and later merges
        advance earlier times to it. `since` never regresses (a lower one is ignored)."""
        if self._since.less_equal(since):
            self._since = since
            self._set_spine_since()

    def _set_spine_since(self) -> None:
        s = self._since.time
        # An empty since (the collection is dropped) compacts to the last readable time.
        s = s if s is not None else (self._upper.step_back() or 0)
        self._data.since = self._errors.since = s

    def merge_all(self) -> None:
        """Merge every batch into one (physical compaction to `since`)."""
        self._data.merge_all()
        self._errors.merge_all()

    def defer_merges(self) -> None:
        """From now on `insert` appends without merging (beyond `MAX_UNMERGED` pending
        batches) and `maintain` merges: a writer can publish the new upper first."""
        self._data.deferred = self._errors.deferred = True

    def maintain(self) -> bool:
        """Do the merges `insert` deferred; True if the batches changed (the contents did not)."""
        data = self._data.maintain()
        errors = self._errors.maintain()
        return data or errors

    def adopt(self, taken: ArrangementSnapshot, twin: ArrangementSnapshot) -> None:
        """Replace each batch of `taken` (a snapshot of this arrangement) still in the spines by
        the batch at the same position in `twin`, which must hold the same rows (e.g. a copy
        of it in shared memory). Batches are immutable, so readers see no difference."""
        for spine, old, new in ((self._data, taken.data, twin.data),
                                (self._errors, taken.errors, twin.errors)):
            swap = {id(a): b for a, b in zip(old, new, strict=True) if a is not b}
            if swap:
                spine.batches = tuple(swap.get(id(b), b) for b in spine.batches)

    def snapshot(self) -> ArrangementSnapshot:
        """An immutable snapshot; O(number of batches), never a copy of data."""
        return ArrangementSnapshot(
            self.desc,
            self.key,
            self._data.batches,
            self._errors.batches,
            self._since,
            self._upper,
        )
