"""Sample and population variance per group, in numpy, as functions of the multiset alone.

Contract: `group_variance(groups, m, x, valid, diffs, sample)` gives per group `0..m-1` the
variance of its valid values (each counted `diffs` times), a validity mask (NULL below two
values for the sample variance, below one for the population's) and an overflow mask. It is
computed in two passes over exact sums (`fsum`): the mean is the exactly rounded sum over the
count, then the squared deviations from it are summed exactly, corrected by the square of the
deviations' own exact sum over `n` (the corrected two-pass algorithm), and divided by `n - 1`
(or `n`). Every step is either elementwise or an exact sum, so the result depends only on the
multiset of values — not on row order, step boundaries or what was retracted — and a
maintained variance equals a one-off one bit for bit; it is as accurate as the corrected
two-pass algorithm is (far closer to the exact variance than PostgreSQL's one-pass Youngs–Cramer
update when the mean is large against the spread). As in PostgreSQL,
a NaN or an infinity among the values makes the variance NaN, and squared deviations of
finite values that overflow the double range are an error (the `overflow` mask:
`value out of range: overflow`) rather than an infinite variance.
"""

from __future__ import annotations

import numpy as np

from twofold.engine import fsum


def group_variance(
    groups: np.ndarray, m: int, x: np.ndarray, valid: np.ndarray, diffs: np.ndarray,
    sample: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(variance, valid, overflow)` per group (see the module docstring)."""
    n = np.zeros(m, np.int64)
    np.add.at(n, groups[valid], diffs[valid])
    with np.errstate(invalid="ignore"):
        finite = valid & np.isfinite(x)
    special = np.zeros(m, bool)
    special[groups[valid & ~finite]] = True
    nf = np.zeros(m, np.int64)
    np.add.at(nf, groups[finite], diffs[finite])
    total, _ = fsum.group_sums(groups, m, x, finite, diffs)
    with np.errstate(all="ignore"):
        mean = total / np.maximum(nf, 1)
        dev = x - mean[groups]
        squares = dev * dev
        sxx, _ = fsum.group_sums(groups, m, squares, finite, diffs)
        # The corrected two-pass form: the deviations from the rounded mean sum to `c`, not
        # 0; subtracting c^2 / n removes the mean's rounding error.
        c, _ = fsum.group_sums(groups, m, dev, finite, diffs)
        sxx = np.maximum(sxx - c * c / np.maximum(nf, 1), 0.0)
        out = sxx / np.maximum(n - (1 if sample else 0), 1)
    overflow = ~special & (n > 0) & ~np.isfinite(out)
    out = np.where(special, np.nan, out)
    ok = n > (1 if sample else 0)
    return out, ok, overflow & ok
