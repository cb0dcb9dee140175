"""A map from group keys to dense group ids: a vectorised open-addressing hash table.

`GroupTable.ids(keys)` returns, for every row of a key frame, the id of its key's group,
allocating ids `0, 1, 2, ...` for keys never seen; an operator keeps per-group state in plain
numpy arrays indexed by these ids. A step costs O(rows looked up), never O(groups held), except
for the amortised doublings of the table and the compactions the owner asks for (`compact`).

Each key has a u64 *code*. For a single Int64 key column the value's bits are the code, which is
exact (NULL, which has no bits of its own, gets a group outside the table); otherwise the code
is `row_hash` of the key columns and every code match is confirmed by comparing the stored key
of the candidate group with the probe's key (NULL equal to NULL), so distinct keys sharing a code
get distinct groups. Slots are probed linearly from `mix(code)`; a lookup runs in rounds over
the shrinking set of unresolved probes (the first round looks up each probe's home slot, later
ones scan windows of 4 slots, a cache line), and in each round the probes that stop at one free
slot elect one of them (the write that sticks) to allocate the group, the others re-examine the
slot next round — so duplicates within one call resolve to one group without a sort.

Invariant: a group id, once given out, maps from exactly one key until `compact` renumbers
(the table holds each non-NULL group once; the load factor stays at most 1/2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import polars as pl

from twofold.engine.hashing import mix, row_hash

_MIN_CAPACITY: Final = 1024
_EMPTY: Final = -1


def _capacity_for(groups: int) -> int:
    cap = _MIN_CAPACITY
    while cap < 2 * groups:
        cap *= 2
    return cap


class GroupTable:
    """Group ids of the key tuples of columns named `key_sch` (in order)."""

    def __init__(self, key_sch: dict[str, pl.DataType]) -> None:
        self.cols = list(key_sch)
        self.sch = dict(key_sch)
        # A single Int64 column: the value is the code, and equal codes are equal keys.
        self.exact = len(self.cols) == 1 and self.sch[self.cols[0]] == pl.Int64
        self.count = 0  # ids given out: 0 .. count-1
        self.null_id = _EMPTY  # exact mode: the group of the NULL key, if any
        self.codes = np.zeros(0, np.uint64)  # by id (capacity grows by doubling)
        # Stored keys by id, for the equality check of hashed codes (not kept in exact mode):
        # parts merged geometrically, so each key is copied O(log groups) times, never per step.
        self.keys = pl.DataFrame(schema=self.sch)
        self._key_parts: list[pl.DataFrame] = []
        self._alloc(_MIN_CAPACITY)

    def _alloc(self, cap: int) -> None:
        self.mask = np.uint64(cap - 1)
        # Slot i's group id and code side by side (flat 2i, 2i+1): one cache line per probe.
        self.slots = np.zeros(2 * cap, np.int64)
        self.slots[0::2] = _EMPTY
        self.slot_id = self.slots[0::2]
        self.slot_code = self.slots[1::2].view(np.uint64)
        self._claim = np.zeros(cap, np.int32)  # per-round scratch: probe index per slot
        self.used = 0

    def __len__(self) -> int:
        return self.count

    def key_codes(self, keys: pl.DataFrame) -> np.ndarray:
        """The code of each key row (exact mode: NULL rows get 0 and are routed apart)."""
        if self.exact:
            col = keys.get_column(self.cols[0])
            if col.null_count():
                col = col.fill_null(0)
            return col.to_numpy().view(np.uint64)
        return row_hash(keys, self.cols)

    def ids(self, keys: pl.DataFrame) -> np.ndarray:
        """The group id of each row of `keys` (columns named like the table's), allocating
        ids for new keys."""
        if keys.columns != self.cols:
            keys = keys.select(self.cols)
        n = keys.height
        out = np.empty(n, np.int64)
        codes = self.key_codes(keys)
        rows: np.ndarray | None = None
        if self.exact and keys.get_column(self.cols[0]).null_count():
            null = keys.get_column(self.cols[0]).is_null().to_numpy()
            if self.null_id == _EMPTY:
                self.null_id = self._new_ids(1, np.zeros(1, np.uint64))[0]
            out[null] = self.null_id
            rows = np.flatnonzero(~null)
        self._reserve(n if rows is None else len(rows))
        self._probe(keys, codes, rows, out)
        return out

    def _probe(
        self, keys: pl.DataFrame, codes: np.ndarray, rows: np.ndarray | None, out: np.ndarray
    ) -> None:
        # Positions are int64 (numpy indexes with uint64 several times slower).
        mask = len(self.slot_id) - 1
        if rows is None:
            rows = np.arange(len(codes))
            q = codes
        else:
            q = codes.take(rows)
        pos = (mix(q) & self.mask).view(np.int64)
        # Round one: each probe's home slot, where most resolve.
        at2 = 2 * pos
        found = self.slots.take(at2)
        hit = self.slots.take(at2 + 1).view(np.uint64) == q
        hit &= found != _EMPTY
        if not self.exact and hit.any():
            at = np.flatnonzero(hit)
            hit[at[~self._same_keys(keys, rows.take(at), found.take(at))]] = False
        at = np.flatnonzero(hit)
        out[rows.take(at)] = found.take(at)
        left = np.flatnonzero(~hit)
        rows, pos, q = rows.take(left), pos.take(left), q.take(left)
        width = 4
        offsets = np.arange(width)
        while len(rows):
            window = (pos[:, None] + offsets) & mask
            found2 = self.slot_id[window]
            free2 = found2 == _EMPTY
            stop2 = free2 | (self.slot_code[window] == q[:, None])
            # A probe stops at its window's first slot that is free or holds its code: its
            # key is in no later slot (slots are never freed, only rebuilt).
            first = stop2.argmax(axis=1)
            r = np.arange(len(rows))
            stopped = stop2[r, first]
            slot = window[r, first]
            got = found2[r, first]
            is_free = stopped & free2[r, first]
            hit = stopped & ~is_free
            nxt = pos + width  # no stop in the window: scan the next one
            if not self.exact and hit.any():
                at = np.flatnonzero(hit)
                other = at[~self._same_keys(keys, rows[at], got[at])]
                if len(other):
                    # A distinct key with the same code: keep scanning after it.
                    hit[other] = False
                    nxt[other] = slot[other] + 1
            out[rows[hit]] = got[hit]
            done = hit
            at = np.flatnonzero(is_free)
            if len(at):
                # Probes stopping at one free slot: the write that sticks elects the one that
                # allocates the group; the rest re-examine the slot (now taken) next round.
                slots = slot[at]
                self._claim[slots] = at
                won = at[self._claim[slots] == at]
                new = self._new_ids(len(won), q[won])
                self.slot_id[slot[won]] = new
                self.slot_code[slot[won]] = q[won]
                self.used += len(won)
                if not self.exact:
                    self._store_keys(keys, rows[won])
                out[rows[won]] = new
                done[won] = True
                nxt[at] = slot[at]
            left = np.flatnonzero(~done)
            rows, pos, q = rows[left], nxt[left] & mask, q[left]

    def _same_keys(self, keys: pl.DataFrame, rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Whether key row `rows[i]` of `keys` equals the stored key of group `ids[i]`."""
        probe = keys[pl.Series(rows, dtype=pl.UInt32)]
        stored = self.keys[pl.Series(ids, dtype=pl.UInt32)]
        same = np.ones(len(rows), dtype=bool)
        for c in self.cols:
            same &= probe.get_column(c).eq_missing(stored.get_column(c)).to_numpy()
        return same

    def _store_keys(self, keys: pl.DataFrame, rows: np.ndarray) -> None:
        parts = [*self._key_parts, keys[pl.Series(rows, dtype=pl.UInt32)]]
        while len(parts) >= 2 and parts[-2].height <= 2 * parts[-1].height:
            parts[-2:] = [pl.concat(parts[-2:], how="vertical", rechunk=True)]
        self._key_parts = parts
        self.keys = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical", rechunk=False)

    def _new_ids(self, n: int, codes: np.ndarray) -> np.ndarray:
        start = self.count
        if start + n > len(self.codes):
            grown = np.zeros(max(2 * len(self.codes), start + n, 64), np.uint64)
            grown[:start] = self.codes[:start]
            self.codes = grown
        self.codes[start : start + n] = codes
        self.count = start + n
        return np.arange(start, start + n, dtype=np.int64)

    def _reserve(self, more: int) -> None:
        """Room for `more` new groups at load factor <= 1/2 (doubling: amortised O(1))."""
        if 2 * (self.used + more) <= len(self.slot_id):
            return
        self._rebuild(_capacity_for(self.used + more))

    def _rebuild(self, cap: int) -> None:
        """Re-place every group in a table of `cap` slots (ids and codes unchanged)."""
        ids = np.arange(self.count, dtype=np.int64)
        if self.null_id != _EMPTY:
            ids = ids[ids != self.null_id]
        self._alloc(cap)
        self._place(ids)

    def _place(self, ids: np.ndarray) -> None:
        """Put groups `ids` (distinct, none in the table) into free slots."""
        mask = len(self.slot_id) - 1
        pos = (mix(self.codes[ids]) & self.mask).view(np.int64)
        while len(ids):
            free = self.slot_id[pos] == _EMPTY
            at = np.flatnonzero(free)
            placed = np.zeros(len(ids), dtype=bool)
            if len(at):
                slots = pos[at]
                self._claim[slots] = at
                won = at[self._claim[slots] == at]
                self.slot_id[pos[won]] = ids[won]
                self.slot_code[pos[won]] = self.codes[ids[won]]
                placed[won] = True
            self.used += int(placed.sum())
            move = ~free
            pos[move] = (pos[move] + 1) & mask
            ids, pos = ids[~placed], pos[~placed]

    def compact(self, keep: np.ndarray) -> np.ndarray:
        """Keep only the groups whose `keep` (bool, by id) is set, renumbered in id order;
        returns the kept old ids (new id `i` was old id `result[i]`). O(groups held)."""
        old = np.flatnonzero(keep[: self.count])
        self.codes = self.codes[old].copy()
        if not self.exact:
            self.keys = self.keys[pl.Series(old, dtype=pl.UInt32)]
            self._key_parts = [self.keys]
        if self.null_id != _EMPTY:
            where = np.flatnonzero(old == self.null_id)
            self.null_id = int(where[0]) if len(where) else _EMPTY
        self.count = len(old)
        self._rebuild(_capacity_for(self.count))
        return old


def key_frame(frame: pl.DataFrame, cols: Sequence[str], names: Sequence[str]) -> pl.DataFrame:
    """The columns `cols` of `frame` renamed to `names` (no copy)."""
    return pl.DataFrame(
        [frame.get_column(c).alias(n) for c, n in zip(cols, names, strict=True)]
    )
