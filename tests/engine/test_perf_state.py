"""Properties of the performance-motivated state and merge paths.

- `LatestState` (one row per key, newer levels shadow older ones) returns exactly the last row
  written for every key and nothing for deleted keys, however its levels merged — including
  when distinct keys share a hash (forced here with a 2-bit hash), which must never merge them.
- A spine merge of time-disjoint batches (the interleave-only fast path) gives the same batch
  contents as the general consolidating merge.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine.batch import build_batch, merge_batches
from twofold.engine.consolidation import consolidate
from twofold.engine.state import LatestState

SCH: dict[str, pl.DataType] = {"g0": pl.Int64(), "g1": pl.String(), "_n": pl.Int64()}
keys = st.tuples(st.one_of(st.none(), st.integers(-3, 3)), st.sampled_from([None, "a", "b"]))
# One write: distinct keys, each with a count (0 deletes the key).
writes = st.dictionaries(keys, st.integers(-2, 3), max_size=12)


def _frame(rows: dict[tuple[Any, ...], int]) -> pl.DataFrame:
    return pl.DataFrame([[g0, g1, n] for (g0, g1), n in rows.items()], schema=SCH, orient="row")


def _rows(frame: pl.DataFrame) -> dict[tuple[Any, ...], int]:
    out: dict[tuple[Any, ...], int] = {}
    for g0, g1, n in frame.iter_rows():
        assert (g0, g1) not in out, "a key was returned twice"
        out[(g0, g1)] = n
    return out


def _check(script: list[dict[tuple[Any, ...], int]], probes: list[tuple[Any, ...]]) -> None:
    state = LatestState(SCH, ["g0", "g1"], "_n")
    model: dict[tuple[Any, ...], int] = {}
    for w in script:
        state.upsert(_frame(w))
        for k, n in w.items():
            if n:
                model[k] = n
            else:
                model.pop(k, None)
        probe = pl.DataFrame([list(k) for k in probes], schema=["g0", "g1"], orient="row")
        probe = probe.cast({"g0": pl.Int64, "g1": pl.String}).unique()
        found = _rows(state.lookup(probe))
        # Lookups may return live rows of other keys (hash candidates), but each exactly.
        assert {k: v for k, v in found.items() if k in probes} == {
            k: model[k] for k in probes if k in model
        }
        assert all(model.get(k) == v for k, v in found.items())


@settings(max_examples=60, deadline=None)
@given(st.lists(writes, min_size=1, max_size=10), st.lists(keys, min_size=1, max_size=8))
def test_latest_state_matches_a_dict(
    script: list[dict[tuple[Any, ...], int]], probes: list[tuple[Any, ...]]
) -> None:
    _check(script, probes)


@settings(max_examples=60, deadline=None)
@given(st.lists(writes, min_size=1, max_size=10), st.lists(keys, min_size=1, max_size=8))
def test_latest_state_exact_under_hash_collisions(
    script: list[dict[tuple[Any, ...], int]], probes: list[tuple[Any, ...]]
) -> None:
    orig = LatestState._codes
    LatestState._codes = lambda self, f: orig(self, f) & np.uint64(3)  # type: ignore[method-assign,assignment]
    try:
        _check(script, probes)
    finally:
        LatestState._codes = orig  # type: ignore[method-assign]


def test_latest_state_drops_tombstones_at_the_bottom() -> None:
    state = LatestState(SCH, ["g0", "g1"], "_n")
    state.upsert(_frame({(i, "a"): 1 for i in range(8)}))
    state.upsert(_frame({(i, "a"): 0 for i in range(8)}))  # merges into the oldest level
    assert len(state) == 0


def _contents(frame: pl.DataFrame) -> list[tuple[Any, ...]]:
    return sorted(frame.iter_rows(), key=repr)


@pytest.mark.parametrize("since", [0, 2, 5])
def test_disjoint_merge_equals_consolidating_merge(since: int) -> None:
    rng = np.random.default_rng(7)
    batches = []
    for t in range(4):
        n = 50
        frame = pl.DataFrame(
            {
                "c0": rng.integers(0, 5, n),
                "c1": rng.integers(0, 3, n),
                "time": np.full(n, t, np.uint64),
                "diff": rng.choice([-1, 1], n),
            }
        )
        batches.append(build_batch(frame, ["c0"], t, t + 1, 0))
    fast = merge_batches(batches, since)
    # Without time bounds the merge takes the general, consolidating path.
    slow = merge_batches([replace(b, tmin=0, tmax=1 << 64) for b in batches], since)
    expected = consolidate(
        pl.concat([b.data for b in batches]).with_columns(pl.col("time").clip(since)),
        ["c0", "c1", "time"],
    )
    assert _contents(fast.data) == _contents(slow.data)
    assert _contents(fast.data) == _contents(expected.select(fast.data.columns))
    assert fast.data.equals(slow.data)
    assert np.array_equal(fast.codes, slow.codes)
    assert bool(np.all(fast.codes[1:] >= fast.codes[:-1]))
