"""Operator state: a collection arranged by key, accumulated over all times processed so far.

Operators process times in order and only ever need "the collection before the current time",
so a `KeyedState` keeps its spine compacted to the latest time (merges collapse history) and
answers batched key lookups in O(keys looked up + rows found), independent of the state's size.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from twofold.engine.arrangement import Spine, lookup_batches
from twofold.engine.frames import DIFF, TIME, consolidate, empty, schema
from twofold.protocol import ColumnType


class KeyedState:
    """The accumulated collection of one operator input, arranged by `key` columns."""

    def __init__(self, types: Sequence[ColumnType], key: Sequence[int]) -> None:
        self.types = list(types)
        self.cols = [f"c{i}" for i in range(len(types))]
        self.key_cols = [f"c{i}" for i in key]
        self.spine = Spine(schema(types), self.key_cols)

    def __len__(self) -> int:
        return len(self.spine)

    def insert(self, t: int, delta: pl.DataFrame) -> None:
        """Add the collection frame `delta` (the change at `t`)."""
        if delta.height == 0:
            return
        self.spine.since = t
        self.spine.insert(delta.with_columns(pl.lit(t, pl.UInt64).alias(TIME)), t, t + 1)

    def lookup(self, keys: pl.DataFrame, *, nulls_equal: bool) -> pl.DataFrame:
        """The accumulated rows (collection frame, consolidated) whose key equals a row of
        `keys` (distinct, columns positional to the key)."""
        found = None
        if keys.height:
            found = lookup_batches(self.spine.batches, self.key_cols, keys,
                                   nulls_equal=nulls_equal)
        if found is None:
            return empty({**schema(self.types), DIFF: pl.Int64()})
        return consolidate(found.select([*self.cols, DIFF]), self.cols)

    def accumulated(self) -> pl.DataFrame:
        """The whole accumulated collection (consolidated)."""
        parts = [b.data for b in self.spine.batches]
        if not parts:
            return empty({**schema(self.types), DIFF: pl.Int64()})
        frame = pl.concat(parts, how="vertical") if len(parts) > 1 else parts[0]
        return consolidate(frame.select([*self.cols, DIFF]), self.cols)

    def lookup_unconsolidated(self, keys: pl.DataFrame) -> pl.DataFrame | None:
        """Like `lookup` with NULL keys matching nothing, rows not consolidated (for joins,
        where multiplying unconsolidated diffs gives the same result)."""
        if keys.height == 0:
            return None
        found = lookup_batches(self.spine.batches, self.key_cols, keys, nulls_equal=False)
        return None if found is None else found.drop(TIME)


def distinct_keys(frame: pl.DataFrame, key_cols: Sequence[str]) -> pl.DataFrame:
    """The distinct key tuples of `frame`, as columns `k0..`."""
    return frame.select([pl.col(c).alias(f"k{j}") for j, c in enumerate(key_cols)]).unique()


def consolidated_union(parts: Sequence[pl.DataFrame], cols: Sequence[str]) -> pl.DataFrame:
    present = [p for p in parts if p.height]
    if not present:
        return parts[0]
    frame = present[0] if len(present) == 1 else pl.concat(present, how="vertical")
    return consolidate(frame, cols)
