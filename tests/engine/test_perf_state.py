"""Properties of the performance-motivated merge paths.

- A spine merge of time-disjoint batches (the interleave-only fast path) gives the same batch
  contents as the general consolidating merge.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl
import pytest

from twofold.engine.batch import build_batch, merge_batches
from twofold.engine.consolidation import consolidate


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
