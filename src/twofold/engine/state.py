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

import polars as pl

from twofold.engine.arrangement import Spine
from twofold.engine.consolidation import consolidate, consolidate_sorted
from twofold.engine.frames import DIFF, TIME, empty, schema
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


class WholeState:
    """`KeyedState`'s interface over the accumulated collection kept as the frames inserted:
    every lookup answers with all of it (valid candidates: operators tolerate rows of other
    keys), O(state) per lookup. For dataflows that step one time only — a peek dataflow —
    where arranging the state by key is work no later step reads."""

    def __init__(self, sch: dict[str, pl.DataType], key_cols: Sequence[str]) -> None:
        self.sch = dict(sch)
        self.cols = list(sch)
        self.key_cols = list(key_cols)
        self._target = {**self.sch, DIFF: pl.Int64()}
        self._parts: list[pl.DataFrame] = []

    @classmethod
    def of(cls, types: Sequence[ColumnType], key: Sequence[int]) -> WholeState:
        return cls(schema(types), [f"c{i}" for i in key])

    @classmethod
    def like(cls, state: KeyedState) -> WholeState:
        return cls(state.sch, state.key_cols)

    def __len__(self) -> int:
        return sum(p.height for p in self._parts)

    def insert(self, t: int, delta: pl.DataFrame) -> None:
        if delta.height:
            if dict(delta.schema) != self._target:
                delta = delta.cast(self._target)  # type: ignore[arg-type]
            self._parts.append(delta.select([*self.cols, DIFF]))

    def _whole(self) -> pl.DataFrame | None:
        parts = self._parts
        if not parts:
            return None
        if len(parts) > 1:
            self._parts = parts = [pl.concat(parts, how="vertical")]
        return parts[0]

    def lookup(self, keys: pl.DataFrame) -> pl.DataFrame:
        whole = self._whole() if keys.height else None
        return empty(self._target) if whole is None else consolidate(whole, self.cols)

    def accumulated(self) -> pl.DataFrame:
        whole = self._whole()
        return empty(self._target) if whole is None else consolidate(whole, self.cols)

    def lookup_unconsolidated(self, keys: pl.DataFrame | None) -> pl.DataFrame | None:
        return self._whole() if keys is None or keys.height else None


def distinct_keys(frame: pl.DataFrame, key_cols: Sequence[str]) -> pl.DataFrame:
    """The distinct key tuples of `frame`, as columns `k0..`."""
    return frame.select([pl.col(c).alias(f"k{j}") for j, c in enumerate(key_cols)]).unique()


def consolidated_union(parts: Sequence[pl.DataFrame], cols: Sequence[str]) -> pl.DataFrame:
    present = [p for p in parts if p.height]
    if not present:
        return parts[0]
    frame = present[0] if len(present) == 1 else pl.concat(present, how="vertical")
    return consolidate(frame, cols)
