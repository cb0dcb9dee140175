"""`fsum`: exact float sums per group equal Python's exact rational arithmetic, rounded once.

Checked against `fractions.Fraction` for any finite doubles (subnormals and the largest values
included) with any int64 multiplicities (large ones take the digit-splitting path), split into
several groups, in any order and in any split across accumulations (adding accumulator blocks is
the maintained path), plus the special-value rules of `docs/semantics.md`.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine import fsum
from twofold.testing.profiles import examples

FINITE = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([1e16, 1.0, -1e16, 0.1, 5e-324, -5e-324, 1.7976931348623157e308, -0.0]),
)
DIFFS = st.one_of(st.sampled_from([1, -1, 2]), st.integers(-(2**63), 2**63 - 1))
_OVERFLOW = Fraction(2) ** 1024 - Fraction(2) ** 970  # the exact sums that round to inf


def rounded(exact: Fraction) -> float:
    if abs(exact) >= _OVERFLOW:
        return math.inf if exact > 0 else -math.inf
    return float(exact)


def _int64(n: int) -> int:
    return (n + 2**63) % 2**64 - 2**63


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (
        a == b and math.copysign(1, a) == math.copysign(1, b)
    )


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), FINITE, DIFFS), min_size=1, max_size=30), st.randoms())
def test_group_sums_are_exact_and_order_independent(
    rows: list[tuple[int, float, int]], rnd: random.Random
) -> None:
    g = np.array([r[0] for r in rows], np.int64)
    x = np.array([r[1] for r in rows], np.float64)
    d = np.array([r[2] for r in rows], np.int64)
    got, _ = fsum.group_sums(g, 4, x, np.ones(len(rows), bool), d)
    for group in range(4):
        members = [(v, m) for k, v, m in rows if k == group]
        exact = sum((Fraction(v) * m for v, m in members), Fraction(0))
        # -0.0 exactly when every value summed is -0.0 (PostgreSQL's sum of those).
        # (Counts of diffs are int64, wrapping as numpy's do.)
        counted = _int64(sum(m for _, m in members))
        only_negative_zeros = counted > 0 and counted == _int64(sum(
            m for v, m in members if v == 0 and math.copysign(1, v) < 0))
        assert same(float(got[group]), -0.0 if only_negative_zeros else rounded(exact) + 0.0)
    perm = list(range(len(rows)))
    rnd.shuffle(perm)
    again, _ = fsum.group_sums(g[perm], 4, x[perm], np.ones(len(rows), bool), d[perm])
    assert again.tobytes() == got.tobytes()


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(FINITE, DIFFS), min_size=1, max_size=20), st.integers(0, 20))
def test_blocks_added_later_give_the_same_value(rows: list[tuple[float, int]], cut: int) -> None:
    """The maintained path: two accumulations added (and normalised) equal one over all rows."""
    x = np.array([v for v, _ in rows], np.float64)
    d = np.array([m for _, m in rows], np.int64)
    keep = x != 0
    mant, p = fsum.decompose(x[keep])
    if not len(mant):
        return
    lo, hi = fsum.limb_range(p, d[keep])
    g = np.zeros(len(mant), np.int64)
    whole = fsum.scatter(g, 1, mant, p, d[keep], lo, hi - lo)
    c = min(cut, len(mant))
    parts = fsum.scatter(g[:c], 1, mant[:c], p[:c], d[keep][:c], lo, hi - lo)
    parts = fsum.normalize(
        parts + fsum.scatter(g[c:], 1, mant[c:], p[c:], d[keep][c:], lo, hi - lo)
    )
    assert fsum.to_float(parts, lo).tobytes() == fsum.to_float(whole, lo).tobytes()
    exact = sum((Fraction(v) * m for v, m in rows), Fraction(0))
    assert fsum.to_float(whole, lo)[0] == rounded(exact)


def test_textbook_cancellations_are_exact() -> None:
    cases = [
        ([1e16, 1.0, -1e16], 1.0),
        ([0.1] * 10, 1.0),
        ([0.1, 0.2, -0.3], 2.7755575615628914e-17),
        (
            [1.7976931348623157e308, 1.7976931348623157e308, -1.7976931348623157e308],
            1.7976931348623157e308,
        ),
    ]
    for xs, want in cases:
        got, _ = fsum.group_sums(
            np.zeros(len(xs), np.int64),
            1,
            np.array(xs),
            np.ones(len(xs), bool),
            np.ones(len(xs), np.int64),
        )
        assert got[0] == want
        if want != 1.7976931348623157e308:  # math.fsum overflows on the intermediate sum
            assert want == math.fsum(xs)


def test_special_values() -> None:
    def one(xs: list[float], valid: list[bool] | None = None) -> float:
        got, _ = fsum.group_sums(
            np.zeros(len(xs), np.int64),
            1,
            np.array(xs, np.float64),
            np.array(valid or [True] * len(xs)),
            np.ones(len(xs), np.int64),
        )
        return float(got[0])

    assert same(one([-0.0, -0.0]), -0.0)  # PostgreSQL's sum of only -0.0
    assert same(one([-0.0, 5.0], [True, False]), -0.0)
    assert same(one([-0.0, 0.0]), 0.0)
    assert same(one([-0.0, 1.0, -1.0]), 0.0)
    assert same(one([1.0, -1.0]), 0.0)
    assert same(one([-1.0, 5.0], [True, False]), -1.0)  # the NULL does not count
    assert same(one([math.inf, 1.0]), math.inf)
    assert same(one([-math.inf, 1.0]), -math.inf)
    assert math.isnan(one([math.inf, -math.inf]))
    assert math.isnan(one([math.nan, 1.0]))
    assert same(one([1e308, 1e308]), math.inf)  # the exact sum is beyond the largest double
