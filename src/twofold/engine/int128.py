"""Integers mod 2^128 as numpy array pairs `(hi int64, lo uint64)`: the running sums of
accumulated `sum` aggregates.

A value is `hi * 2^64 + lo` (two's complement over 128 bits). Addition carries exactly, so a
running sum may leave the 64-bit range and come back and still be exact; results are only ever
read when they fit in int64 (`fits_int64`), and a sum that does not fit is reported as an
error, never wrapped. (Only a running sum beyond +-2^127 — more than 2^63 rows of extreme
products — would wrap.)

`sum_products` sums per-row products `values * diffs` per group: in int64 when a bound on the
inputs proves no partial sum can overflow (the common case: small values, diffs of +-1), else
through polars' Int128 arithmetic.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import polars as pl

_I64_MAX: Final = 2**63 - 1
_LOW: Final = 2**64 - 1


def from_int64(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int64 values as 128-bit pairs (sign-extended)."""
    return values >> np.int64(63), values.view(np.uint64)


def add(
    hi: np.ndarray, lo: np.ndarray, dhi: np.ndarray, dlo: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`(hi, lo) + (dhi, dlo)` mod 2^128, elementwise (new arrays)."""
    with np.errstate(over="ignore"):
        new_lo = lo + dlo
        carry = (new_lo < lo).astype(np.int64)
        new_hi = hi + dhi + carry
    return new_hi, new_lo


def fits_int64(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """Whether each value lies in the int64 range (then `lo.view(int64)` is the value)."""
    out: np.ndarray = hi == (lo.view(np.int64) >> np.int64(63))
    return out


def to_ints(hi: np.ndarray, lo: np.ndarray) -> list[int]:
    """The values as Python ints (for tests and error messages; not for hot paths)."""
    out = []
    for h, low in zip(hi.tolist(), lo.tolist(), strict=True):
        v = (h << 64) | low
        out.append(v - (1 << 128) if v >= 1 << 127 else v)
    return out


def _bound(a: np.ndarray) -> int:
    return max(int(a.max()), -int(a.min())) if len(a) else 0


def sum_products(
    groups: np.ndarray, n_groups: int, values: np.ndarray, diffs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per group `g` in `0..n_groups-1`: the sum of `values[i] * diffs[i]` over rows with
    `groups[i] == g` (int64 inputs), mod 2^128."""
    if _bound(values) * _bound(diffs) * len(values) <= _I64_MAX:
        # No product and no partial sum can leave int64.
        sums = np.zeros(n_groups, np.int64)
        np.add.at(sums, groups, values * diffs)
        return from_int64(sums)
    frame = pl.DataFrame({"g": groups, "v": values, "d": diffs})
    agg = frame.group_by("g").agg(
        (pl.col("v").cast(pl.Int128) * pl.col("d").cast(pl.Int128)).sum().alias("s")
    )
    split = agg.select(
        pl.col("g"),
        (pl.col("s") // (1 << 64)).cast(pl.Int64).alias("hi"),
        (pl.col("s") & pl.lit(_LOW, pl.Int128)).cast(pl.UInt64).alias("lo"),
    )
    hi = np.zeros(n_groups, np.int64)
    lo = np.zeros(n_groups, np.uint64)
    at = split.get_column("g").to_numpy()
    hi[at] = split.get_column("hi").to_numpy()
    lo[at] = split.get_column("lo").to_numpy()
    return hi, lo
