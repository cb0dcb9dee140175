"""Exact sums of float64 values, per group, in numpy: the float `sum` of `docs/semantics.md`.

A float sum is the exact (real-number) sum of the group's finite values, rounded once to the
nearest double (ties to even), so it depends only on the multiset of values — not on the order
rows arrive, how steps split them, or what was retracted — and a maintained sum equals a one-off
one bit for bit. Special values are counted, not summed: NaN, or both infinities, give NaN; one
infinity gives it; a zero sum is -0.0 exactly when every value summed is -0.0 (PostgreSQL's
sum adds in order from the first value, and an IEEE sum is -0.0 only then), else 0.0
(`signed_zeros`).

Every finite double is `M * 2^(p - 1074)` with an odd integer `M` (|M| < 2^53) and a bit
position `0 <= p <= 2045`. Sums are fixed point over that range: int64 *limbs*, limb `i` weighing
`2^(32 (i + lo) - 1074)`, each value adding `M * diff` into the three limbs its mantissa spans.
Blocks are limb-major (`(limbs, groups)`: the carry loop runs over contiguous rows). Only the
window of limbs `[lo, lo + L)` the data has touched is stored (money amounts need
5-6 limbs, not 70). Limbs are kept small by `normalize` (carry each limb's high bits into the
next), so an accumulator survives ~2^29 rows per step and unbounded churn without overflow;
`to_float` rounds an accumulator to the nearest double with vectorised integer operations.
"""

from __future__ import annotations

from typing import Final

import numpy as np

LIMB: Final = 32
_MASK: Final = np.int64((1 << LIMB) - 1)
# Rows summed into one block before `normalize`: |contribution| < 2^33 * |diff|, so the sum of
# |diff| over the rows of one block must stay below 2^29 for a cell to stay inside int64.
_DIFF_BUDGET: Final = 1 << 29
# Digits a large diff is split into (base 2^21, so each digit times a contribution fits).
_DIGIT: Final = 21
# A value at position p touches limbs p // 32 .. p // 32 + 2 (a large diff's digits sit up to
# 63 bits higher); one more limb on top holds the carries and the sign.
_SPAN: Final = 63


def decompose(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Finite nonzero float64 `x` as `(M, p)`: `x == M * 2^(p - 1074)`, `M` odd int64."""
    f, e = np.frexp(x)
    m = (f * 2.0**53).astype(np.int64)
    p = e.astype(np.int64) + (1074 - 53)
    low = m & -m  # the lowest set bit (positive for negative m too)
    tz = np.frexp(low.astype(np.float64))[1].astype(np.int64) - 1
    return m >> tz, p + tz


def _large(diffs: np.ndarray) -> bool:
    """Whether rows with these diffs must be split into digits and blocks (`scatter`)."""
    size = np.abs(diffs.astype(np.float64))  # as floats: |int64 min| overflows int64
    return bool(size.max() >= 1 << _DIGIT or size.sum() >= _DIFF_BUDGET)


def limb_range(p: np.ndarray, diffs: np.ndarray) -> tuple[int, int]:
    """The limbs `[lo, hi)` that rows at bit positions `p` with `diffs` touch, plus a top
    limb for carries and the sign."""
    span = _SPAN if _large(diffs) else 0
    return int(p.min()) // LIMB, (int(p.max()) + span) // LIMB + 4


def scatter(
    groups: np.ndarray, m: int, mant: np.ndarray, p: np.ndarray, diffs: np.ndarray, lo: int, n: int
) -> np.ndarray:
    """The accumulator block of `sum(M * diff)` per group, limb-major (`(n, m)`: limb `i`
    of group `g` at `[i, g]`, limbs `lo..lo+n`), where row `i` adds
    `mant[i] * 2^(p[i] - 1074) * diffs[i]` to group `groups[i]`; normalised."""
    out = np.zeros((n, m), np.int64)
    if not len(mant):
        return out
    if not _large(diffs):
        _scatter_into(out, groups, mant, p, diffs, lo)
        return normalize(out)
    # Large diffs: diff = sum_k digit_k * 2^(21 k) with |digit_k| < 2^21, each digit a row at
    # position p + 21 k; then blocks of rows whose sum of |digit| stays within the budget.
    parts = []
    rest = diffs.copy()
    for k in range(4):
        if k < 3:
            digit = rest & ((1 << _DIGIT) - 1)
            rest = rest >> _DIGIT
        else:
            digit = rest  # -1 or 0: the sign left after 63 bits
        keep = digit != 0
        parts.append((groups[keep], mant[keep], p[keep] + _DIGIT * k, digit[keep]))
    g = np.concatenate([q[0] for q in parts])
    mm = np.concatenate([q[1] for q in parts])
    pp = np.concatenate([q[2] for q in parts])
    dd = np.concatenate([q[3] for q in parts])
    ends = np.cumsum(np.abs(dd))
    cuts = np.searchsorted(ends, np.arange(_DIFF_BUDGET // 2, int(ends[-1]), _DIFF_BUDGET // 2))
    start = 0
    for stop in [*np.unique(cuts).tolist(), len(dd)]:
        if stop > start:
            block = np.zeros_like(out)
            sl = slice(start, stop)
            _scatter_into(block, g[sl], mm[sl], pp[sl], dd[sl], lo)
            out = normalize(out + normalize(block))
        start = stop
    return out


def _scatter_into(
    out: np.ndarray, groups: np.ndarray, mant: np.ndarray, p: np.ndarray, d: np.ndarray, lo: int
) -> None:
    m = out.shape[1]
    a = np.abs(mant)
    sd = np.where(mant < 0, -d, d)
    li = p >> 5
    r = p & 31
    t0 = (a & _MASK) << r
    t1 = (a >> LIMB) << r
    c0 = t0 & _MASK
    c1 = (t0 >> LIMB) + (t1 & _MASK)
    c2 = t1 >> LIMB
    at = (li - lo) * m + groups
    flat = out.reshape(-1)
    np.add.at(flat, at, c0 * sd)
    np.add.at(flat, at + m, c1 * sd)
    np.add.at(flat, at + 2 * m, c2 * sd)


def normalize(acc: np.ndarray) -> np.ndarray:
    """Limb-major `acc` with every limb but the last in `[0, 2^32)`, each group's value
    unchanged; the last limb keeps the sign. Modifies and returns `acc`."""
    for i in range(len(acc) - 1):
        carry = acc[i] >> LIMB
        acc[i] &= _MASK
        acc[i + 1] += carry
    return acc


def to_float(acc: np.ndarray, lo: int) -> np.ndarray:
    """Each group of the limb-major accumulator `acc` (limbs from `lo`) rounded to the
    nearest double, ties to even (±inf beyond the double range; 0.0 for zero)."""
    m = acc.shape[1]
    if not m:
        return np.zeros(0, np.float64)
    # Two zero limbs below (the rounding window may reach under limb 0), two above (the top
    # limb's carries), then normalise: all limbs in [0, 2^32) but the signed top one.
    b = np.zeros((len(acc) + 4, m), np.int64)
    b[2:-2] = acc
    normalize(b)
    neg = b[-1] < 0
    if neg.any():
        b[:, neg] = normalize(-b[:, neg])
    nz = b != 0
    cols = np.arange(m)
    h = len(b) - 1 - np.argmax(nz[::-1], axis=0)  # the highest nonzero limb
    lowest = np.argmax(nz, axis=0)
    zero = ~nz[h, cols]
    h = np.where(zero, 2, h)
    u = b.view(np.uint64)
    top = u[h, cols]
    nbits = np.frexp(top.astype(np.float64))[1].astype(np.uint64)  # 1..32 (top < 2^32)
    nbits[zero] = 1
    u1, u2 = u[h - 1, cols], u[h - 2, cols]
    window = (top << (np.uint64(64) - nbits)) | (u1 << (np.uint64(32) - nbits)) | (u2 >> nbits)
    sticky = ((u2 & ((np.uint64(1) << nbits) - np.uint64(1))) != 0) | (lowest < h - 2)
    mant = window >> np.uint64(11)
    guard = (window >> np.uint64(10)) & np.uint64(1)
    rest = ((window & np.uint64(0x3FF)) != 0) | sticky
    up = (guard == 1) & (rest | ((mant & np.uint64(1)) == 1))
    mant = mant + up.astype(np.uint64)
    # Bit 0 of `window` sits at limb h's bit (nbits - 64), in a frame 2 limbs below `lo`.
    exp = LIMB * (h.astype(np.int64) + lo - 2) + nbits.astype(np.int64) - 64 + 11 - 1074
    with np.errstate(over="ignore"):
        out: np.ndarray = np.ldexp(mant.astype(np.float64), exp)
    out[zero] = 0.0
    out[neg] = -out[neg]
    return out


def finish(
    exact: np.ndarray,
    pinf: np.ndarray,
    ninf: np.ndarray,
    nan: np.ndarray,
) -> np.ndarray:
    """The float sums from the rounded exact sums of the finite values and the counts of
    +infs, -infs and NaNs summed."""
    out = exact.copy()
    out[pinf > 0] = np.inf
    out[ninf > 0] = -np.inf
    out[(nan > 0) | ((pinf > 0) & (ninf > 0))] = np.nan
    return out


def overflowed(sums: np.ndarray, pinf: np.ndarray, ninf: np.ndarray, nan: np.ndarray
               ) -> np.ndarray:
    """The groups whose float sum is infinite although no infinity or NaN was summed: the exact
    sum of finite values is beyond the double range (PostgreSQL's `value out of range:
    overflow`)."""
    out: np.ndarray = np.isinf(sums) & (pinf <= 0) & (ninf <= 0) & (nan <= 0)
    return out


def group_sums(
    groups: np.ndarray, m: int, values: np.ndarray, valid: np.ndarray, diffs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`(sums, n)` per group `0..m-1`: the float sum of the valid `values` (each counted
    `diffs` times) and the number of values summed (0: the sum is NULL). `checked_sums` also
    says which sums overflowed."""
    sums, n, _ = checked_sums(groups, m, values, valid, diffs)
    return sums, n


def checked_sums(
    groups: np.ndarray, m: int, values: np.ndarray, valid: np.ndarray, diffs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(sums, n, overflow)`: `group_sums` and the groups whose sum `overflowed`."""

    def count(mask: np.ndarray) -> np.ndarray:
        out = np.zeros(m, np.int64)
        np.add.at(out, groups[mask], diffs[mask])
        return out

    with np.errstate(invalid="ignore"):
        finite = valid & np.isfinite(values)
        nonzero = finite & (values != 0)
        mant, p = decompose(values[nonzero])
    exact = np.zeros(m, np.float64)
    if len(mant):
        lo, hi = limb_range(p, diffs[nonzero])
        acc = scatter(groups[nonzero], m, mant, p, diffs[nonzero], lo, hi - lo)
        exact = to_float(acc, lo)
    n = count(valid)
    pinf = count(valid & (values == np.inf))
    ninf = count(valid & (values == -np.inf))
    nan = count(valid & np.isnan(values))
    sums = finish(exact, pinf, ninf, nan)
    negative = valid & (values == 0)
    if negative.any():
        negative &= np.signbit(values)
        sums = signed_zeros(sums, n, count(negative))
    return sums, n, overflowed(sums, pinf, ninf, nan)


def signed_zeros(sums: np.ndarray, n: np.ndarray, negative_zeros: np.ndarray) -> np.ndarray:
    """`sums` with -0.0 for the groups whose `n` values summed are all -0.0 (`negative_zeros`
    of them): PostgreSQL's sum of those, and their IEEE sum in any order."""
    out: np.ndarray = np.where((n > 0) & (negative_zeros == n), -0.0, sums)
    return out
