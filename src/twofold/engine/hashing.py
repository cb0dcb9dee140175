"""Row hashing and the sort code of arranged rows.

`row_hash(frame, cols)` is a u64 per row that depends only on the *values* in `cols` (and
their dtypes) — not on column names, not on which other rows or NULLs the frame holds — so a
lookup probe hashes exactly like the arranged rows it should find. Fixed-width columns hash in
numpy (splitmix64 over the value bits); strings and bytes use polars' value hash.

An arranged row's *sort code* puts the key hash in the high `KEY_BITS` bits and a hash of the
whole row in the low bits. Sorting by (code, time) groups each key's rows into one contiguous
range (found by binary search between `key & KEY_MASK` and `key | ROW_MASK`) and makes identical
`(row, time)` updates adjacent, so consolidation is one linear pass. Codes do not depend on
time, so advancing times (compaction) never reorders a batch and a merge of batches in time
order is a merge of sorted runs. The key hash is by SQL equality (-0.0 = 0.0, one NaN) so key
lookups and matching find both zeros; the row hash is by bits (NaNs canonicalised), because
consolidation must keep -0.0 and 0.0 apart, and identical rows must stay adjacent (one code and
one row hash) for it to merge them. Distinct
keys or rows may share bits: every reader filters by exact equality, so a collision costs time,
never correctness.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
import polars as pl

KEY_BITS: Final = 40
ROW_MASK: Final = np.uint64((1 << (64 - KEY_BITS)) - 1)
KEY_MASK: Final = np.uint64(~((1 << (64 - KEY_BITS)) - 1) & ((1 << 64) - 1))
_NULL: Final = np.uint64(0x9E3779B97F4A7C15)
_SEED: Final = 0x51ED2701
_M1: Final = np.uint64(0xBF58476D1CE4E5B9)
_M2: Final = np.uint64(0x94D049BB133111EB)
_GOLDEN: Final = np.uint64(0x9E3779B97F4A7C15)
_FIXED: Final = (pl.Int64, pl.Float64, pl.UInt64, pl.Boolean, pl.Int32, pl.Int128)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (u64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _M1
        x = x ^ (x >> np.uint64(27))
        x = x * _M2
        out: np.ndarray = x ^ (x >> np.uint64(31))
        return out


def column_hash(series: pl.Series, *, bits: bool = False) -> np.ndarray:
    """A u64 hash of each value of `series` (NULL hashes to a constant).

    By SQL equality (-0.0 hashes as 0.0, every NaN alike) unless `bits`: then floats hash by
    their bits after NaN canonicalisation, so -0.0 and 0.0 hash apart — the identity
    consolidation keeps (it never merges two stored values into one)."""
    nulls = series.null_count()
    dtype = series.dtype
    if dtype in _FIXED and dtype != pl.Int128:
        # polars' fill_null copies even when there is nothing to fill: only call it if needed.
        if dtype == pl.Boolean:
            raw = (series.fill_null(False) if nulls else series).to_numpy().astype(np.uint64)
        elif dtype == pl.Float64:
            floats = (series.fill_null(0.0) if nulls else series).to_numpy()
            if bits:
                raw = canonical_float_bits(floats)
            else:
                # SQL equality: -0.0 = 0.0 (adding 0.0 turns -0.0 into 0.0), and one NaN.
                with np.errstate(invalid="ignore"):  # a signalling NaN is still just NaN here
                    raw = canonical_float_bits(floats + 0.0)
        else:
            raw = (series.fill_null(0) if nulls else series).to_numpy().view(np.uint64)
        out = mix(raw ^ _GOLDEN)
    else:
        out = series.hash(seed=_SEED).to_numpy()
    if nulls:
        out = np.where(series.is_null().to_numpy(), _NULL, out)
    return out


def canonical_float_bits(floats: np.ndarray) -> np.ndarray:
    """The u64 bits of float64 `floats`, every NaN (any payload or sign) as numpy's one NaN;
    -0.0 and 0.0 keep their distinct bits."""
    return np.where(np.isnan(floats), np.nan, floats).view(np.uint64)


def stored_identity(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each Float64 column replaced by its `canonical_float_bits` (UInt64, NULLs
    kept): equality of the result's rows is identity of stored values — -0.0 and 0.0 differ,
    every NaN is one value — where `frame`'s own equality is SQL's. Other columns as they are."""
    floats = [c for c, dt in frame.schema.items() if dt == pl.Float64]
    if not floats:
        return frame
    replaced = []
    for c in floats:
        col = frame.get_column(c)
        bits = pl.Series(c, canonical_float_bits(
            (col.fill_null(0.0) if col.null_count() else col).to_numpy()), pl.UInt64)
        if col.null_count():
            bits = pl.select(pl.when(col.is_null()).then(None).otherwise(bits).alias(c)).to_series()
        replaced.append(bits)
    return frame.with_columns(replaced)


def row_hash(frame: pl.DataFrame, cols: Sequence[str], *, bits: bool = False) -> np.ndarray:
    """A u64 per row of the values in `cols` (in order); zeros when `cols` is empty.

    Value hash (SQL equality) for matching keys; `bits=True` for consolidation's row identity
    (`column_hash`)."""
    h = np.zeros(frame.height, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for c in cols:
            h = mix(h * _M1 + column_hash(frame.get_column(c), bits=bits))
    return h


def row_and_key_hash(
    frame: pl.DataFrame, cols: Sequence[str], key_cols: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """`(row_hash(frame, cols, bits=True), row_hash(frame, key_cols))`, hashing each column
    once per kind (only float columns differ between the two): the row hash identifies stored
    values for consolidation, the key hash matches keys by SQL equality."""
    per_col: dict[tuple[str, bool], np.ndarray] = {}

    def fold(names: Sequence[str], bits: bool) -> np.ndarray:
        h = np.zeros(frame.height, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for c in names:
                col = frame.get_column(c)
                kind = (c, bits and col.dtype == pl.Float64)
                if kind not in per_col:
                    per_col[kind] = column_hash(col, bits=kind[1])
                h = mix(h * _M1 + per_col[kind])
        return h

    return fold(cols, True), fold(key_cols, False)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """`np.unique` of a u64 array by an unstable sort (numpy's `unique` is many times slower
    at the sizes of a step's keys)."""
    out = np.sort(values)
    if len(out) > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out


def sort_code(key_hash: np.ndarray, row_hash_: np.ndarray) -> np.ndarray:
    """The sort code: key hash in the high bits, row hash in the low bits."""
    return (key_hash & KEY_MASK) | (mix(row_hash_) & ROW_MASK)


def key_range(key_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive bounds of the sort codes of rows with these key hashes."""
    lo = key_hashes & KEY_MASK
    return lo, lo | ROW_MASK


_U64: Final = (1 << 64) - 1
_PM1: Final = int(_M1)
_PM2: Final = int(_M2)
_PGOLDEN: Final = int(_GOLDEN)
_PNULL: Final = int(_NULL)


def _mix_int(x: int) -> int:
    x ^= x >> 30
    x = (x * _PM1) & _U64
    x ^= x >> 27
    x = (x * _PM2) & _U64
    return x ^ (x >> 31)


_F64: Final = struct.Struct("<d")
_BITS: Final = struct.Struct("<Q")
_NAN_BITS: Final = int(np.array([np.nan], dtype=np.float64).view(np.uint64)[0])


def _hash_bool(value: object) -> int:
    return _mix_int(int(bool(value)) ^ _PGOLDEN)


def _hash_int(value: object) -> int:
    return _mix_int((int(value) & _U64) ^ _PGOLDEN)  # type: ignore[call-overload]


def _hash_float(value: object) -> int:
    # As `column_hash`: -0.0 hashes as 0.0 (adding 0.0), and every NaN as numpy's one NaN.
    f = float(value) + 0.0  # type: ignore[arg-type]
    bits = _NAN_BITS if f != f else _BITS.unpack(_F64.pack(f))[0]
    return _mix_int(bits ^ _PGOLDEN)


@functools.lru_cache(maxsize=4096, typed=True)
def _hash_other(value: object, dtype: pl.DataType) -> int:
    # Strings and bytes: polars' value hash, through a one-value Series (~10 us), so the
    # latest few thousand probed values are remembered.
    return int(column_hash(pl.Series([value], dtype=dtype))[0])


def _hasher(dtype: pl.DataType) -> Callable[[object], int]:
    if dtype == pl.Boolean:
        return _hash_bool
    if dtype == pl.Int64:
        return _hash_int
    if dtype == pl.Float64:
        return _hash_float
    return functools.partial(_hash_other, dtype=dtype)


def _scalar_hash(value: object, dtype: pl.DataType) -> int:
    """`column_hash` of one value of `dtype`, in plain Python (no array round trip)."""
    return _PNULL if value is None else _hasher(dtype)(value)


def scalar_hashers(dtypes: Sequence[pl.DataType]) -> tuple[Callable[[object], int], ...]:
    """Per column, `column_hash` of one non-NULL value of its dtype (`scalar_row_hash_with`)."""
    return tuple(_hasher(dt) for dt in dtypes)


def scalar_row_hash_with(values: Sequence[object],
                         hashers: Sequence[Callable[[object], int]]) -> int:
    """`scalar_row_hash(values, dtypes)` with the dtypes' `scalar_hashers` worked out before:
    the per-lookup path."""
    h = 0
    for v, hash_one in zip(values, hashers, strict=True):
        h = _mix_int((h * _PM1 + (_PNULL if v is None else hash_one(v))) & _U64)
    return h


def scalar_row_hash(values: Sequence[object], dtypes: Sequence[pl.DataType]) -> int:
    """`row_hash` of one row, in plain Python: the fast path of single-key lookups."""
    return scalar_row_hash_with(values, scalar_hashers(dtypes))
