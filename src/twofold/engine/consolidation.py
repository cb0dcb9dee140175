"""Consolidation: summing the diffs of identical updates and dropping zero sums.

Done by sorting on a u64 code (`hashing`) — and, where distinct rows share a code, on their
full 64-bit row hash — so identical rows become adjacent, then one linear pass that compares
each candidate pair exactly (codes only nominate candidates, so a hash
collision can never merge distinct rows) and sums runs with `np.add.reduceat`. On this machine
that is several times faster than a hash group-by over all columns, and for inputs made of
already-sorted runs (a spine merge) the sort itself is near-linear.

"Identical" is by stored value, not SQL equality: floats compare (and hash, `bits=True`) by
their bits with NaN payloads canonicalised, so -0.0 and 0.0 stay separate records — merging
them would keep the first's bits and turn one value into the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from twofold.engine.frames import DIFF
from twofold.engine.hashing import canonical_float_bits, mix, row_hash

_NUMPY_EXACT = (pl.Int64, pl.UInt64, pl.Boolean)


def take_rows(frame: pl.DataFrame, idx: np.ndarray) -> pl.DataFrame:
    """`frame[idx]` for int row indexes (as a UInt32 series: polars gathers by its own index
    type markedly faster than by an int64 array it must convert first)."""
    return frame[pl.Series(idx.astype(np.uint32, copy=False))]


def equal_pairs(a: pl.Series, ia: np.ndarray, b: pl.Series, ib: np.ndarray) -> np.ndarray:
    """Whether `a[ia[i]]` is the same stored value as `b[ib[i]]`, per `i`: NULL equal to NULL,
    floats by their bits with every NaN one value (so -0.0 and 0.0 differ: consolidation must
    never turn one stored value into another), everything else by equality."""
    if a.dtype == pl.Float64:
        sa, sb = a.gather(pl.Series(ia)), b.gather(pl.Series(ib))
        na, nb = sa.is_null().to_numpy(), sb.is_null().to_numpy()
        va = canonical_float_bits(sa.fill_null(0.0).to_numpy() if a.null_count() else sa.to_numpy())
        vb = canonical_float_bits(sb.fill_null(0.0).to_numpy() if b.null_count() else sb.to_numpy())
        same: np.ndarray = (na == nb) & (na | (va == vb))
        return same
    if a.dtype in _NUMPY_EXACT and a.null_count() == 0 and b.null_count() == 0:
        eq: np.ndarray = a.to_numpy()[ia] == b.to_numpy()[ib]
        return eq
    return a.gather(pl.Series(ia)).eq_missing(b.gather(pl.Series(ib))).to_numpy()


def consolidate_sorted(
    frame: pl.DataFrame, codes: np.ndarray, hashes: np.ndarray, *, stable: bool = True
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray]:
    """Sort `frame` (and its per-row `codes`, `hashes`) by code, then merge adjacent rows equal
    in every column but `diff`, dropping zero diffs. Returns the three, aligned.

    `stable=False` when the input order among equal codes carries nothing (no time order to
    keep): numpy's unstable sort is several times faster on unsorted codes. The frame itself
    is gathered once, at the end: comparisons read the unsorted columns through `order`."""
    n = frame.height
    order: np.ndarray | None = None
    if n > 1:
        order = np.argsort(codes, kind="stable" if stable else None)
        if np.array_equal(order, np.arange(n)):
            order = None
        else:
            codes, hashes = codes.take(order), hashes.take(order)
    diffs = frame.get_column(DIFF).to_numpy()
    keep: np.ndarray | None = None
    if n > 1:
        cand = np.flatnonzero(codes[1:] == codes[:-1]) + 1
        mixed = cand[hashes.take(cand) != hashes.take(cand - 1)]
        if len(mixed):
            # Distinct rows share a code (its row bits are short) and may interleave: within
            # just those runs of equal codes, order by the full row hash (stably, so times
            # stay ordered).
            run = np.cumsum(np.concatenate([[True], codes[1:] != codes[:-1]]))
            rows = np.flatnonzero(np.isin(run, run[mixed]))
            within = np.arange(n)
            within[rows] = rows[np.lexsort((hashes[rows], run[rows]))]
            order = within if order is None else order.take(within)
            codes, hashes = codes.take(within), hashes.take(within)
        if order is not None:
            diffs = diffs.take(order)
        if len(cand):
            src = order if order is not None else np.arange(n)
            a, b = src.take(cand), src.take(cand - 1)
            same = np.ones(len(cand), dtype=bool)
            for c in frame.columns:
                if c != DIFF:
                    col = frame.get_column(c)
                    same &= equal_pairs(col, a, col, b)
            starts_mask = np.ones(n, dtype=bool)
            starts_mask[cand[same]] = False
            starts = np.flatnonzero(starts_mask)
            if len(starts) < n:
                diffs = np.add.reduceat(diffs, starts)
                keep = starts
    nonzero = diffs != 0
    if keep is None and nonzero.all():
        if order is not None:
            frame = take_rows(frame, order)
        return frame, codes, hashes
    idx = keep[nonzero] if keep is not None else np.flatnonzero(nonzero)
    rows = order.take(idx) if order is not None else idx
    frame = take_rows(frame, rows).with_columns(pl.Series(DIFF, diffs[nonzero], pl.Int64))
    return frame, codes.take(idx), hashes.take(idx)


def consolidate(frame: pl.DataFrame, cols: Sequence[str]) -> pl.DataFrame:
    """Sum `diff` over equal `cols` (include `time` for update frames), drop zero sums, and
    keep only `cols` and `diff`. Output order is unspecified."""
    frame = frame.select([*cols, DIFF])
    if frame.height <= 1:
        return frame.filter(pl.col(DIFF) != 0)
    hashes = row_hash(frame, cols, bits=True)
    # Every column that matters (time included, when given) is compared: order is free.
    out, _, _ = consolidate_sorted(frame, mix(hashes), hashes, stable=False)
    return out
