"""`int128` pairs agree with Python's exact integers (mod 2^128), on both summing paths."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine import int128
from twofold.testing.profiles import examples

I64 = st.integers(-(2**63), 2**63 - 1)
EDGES = st.sampled_from([-(2**63), -(2**63) + 1, -1, 0, 1, 2**62, 2**63 - 1])
INT128 = st.integers(-(2**127), 2**127 - 1)


def pair(values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    hi = np.array([v >> 64 for v in values], np.int64)
    lo = np.array([v & ((1 << 64) - 1) for v in values], np.uint64)
    return hi, lo


def wrap(v: int) -> int:
    v %= 1 << 128
    return v - (1 << 128) if v >= 1 << 127 else v


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(INT128, INT128), min_size=1, max_size=20))
def test_add_carries_like_python(pairs: list[tuple[int, int]]) -> None:
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    hi, lo = int128.add(*pair(a), *pair(b))
    assert int128.to_ints(hi, lo) == [wrap(x + y) for x, y in pairs]
    fits = int128.fits_int64(hi, lo).tolist()
    assert fits == [-(2**63) <= wrap(x + y) < 2**63 for x, y in pairs]
    sums = [wrap(x + y) for x, y in pairs]
    for f, v, low in zip(fits, sums, lo.view(np.int64).tolist(), strict=True):
        if f:
            assert low == v


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.one_of(I64, EDGES), min_size=1, max_size=20))
def test_from_int64_round_trips(values: list[int]) -> None:
    hi, lo = int128.from_int64(np.array(values, np.int64))
    assert int128.to_ints(hi, lo) == values
    assert int128.fits_int64(hi, lo).all()


rows = st.lists(
    st.tuples(st.integers(0, 4), st.one_of(I64, EDGES, st.integers(-5, 5)), st.one_of(
        st.integers(-3, 3), EDGES
    )),
    min_size=1,
    max_size=30,
)


@settings(max_examples=examples(200), deadline=None)
@given(rows)
def test_sum_products_is_exact(data: list[tuple[int, int, int]]) -> None:
    groups = np.array([g for g, _, _ in data], np.int64)
    values = np.array([v for _, v, _ in data], np.int64)
    diffs = np.array([d for _, _, d in data], np.int64)
    hi, lo = int128.sum_products(groups, 5, values, diffs)
    expected = [wrap(sum(v * d for g, v, d in data if g == grp)) for grp in range(5)]
    assert int128.to_ints(hi, lo) == expected


def test_both_summing_paths_are_used_and_agree() -> None:
    rng = np.random.default_rng(3)
    groups = rng.integers(0, 50, 1000)
    small = rng.integers(-1000, 1000, 1000)
    diffs = rng.choice([-1, 1], 1000)
    fast = int128.sum_products(groups, 50, small, diffs)
    # One extreme value forces the Int128 path over the same rows.
    big = np.append(small, 2**63 - 1)
    slow = int128.sum_products(np.append(groups, 0), 50, big, np.append(diffs, 0))
    assert int128.to_ints(*fast) == int128.to_ints(*slow)
    assert int128.to_ints(*fast) == [
        int(np.sum(small[groups == g] * diffs[groups == g])) for g in range(50)
    ]


def test_running_sum_leaves_int64_and_comes_back() -> None:
    hi, lo = int128.from_int64(np.zeros(1, np.int64))
    total = 0
    for step in [2**62, 2**62, 2**62, -(2**62), -(2**62), -(2**62) + 5]:
        dhi, dlo = int128.sum_products(
            np.zeros(1, np.int64), 1, np.array([step], np.int64), np.ones(1, np.int64)
        )
        hi, lo = int128.add(hi, lo, dhi, dlo)
        total += step
        assert int128.to_ints(hi, lo) == [total]
        assert bool(int128.fits_int64(hi, lo)[0]) == (-(2**63) <= total < 2**63)
    assert total == 5 and lo.view(np.int64)[0] == 5
