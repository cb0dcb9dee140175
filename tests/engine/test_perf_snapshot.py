"""Snapshot reads through per-batch memoised collections equal uncached reads.

`ArrangementSnapshot.read` memoises each batch's all-times collection on the (immutable)
batch and folds batch collections by binary search. Properties checked here, over random
insert/compact/merge scripts:

- at every readable time, in any order, and again once memos are filled (including memos
  filled through an earlier snapshot sharing the batches), a read equals both the naive sum of
  updates and the plain concatenate-and-consolidate read;
- the same holds when sort codes collide all the time (codes only nominate candidates;
  equality stays exact);
- a single batch with one time is read without copying: the memo shares its columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.engine.test_arrangement import (
    DESC_INT,
    DESC_STR,
    naive,
    replay,
    rows_int,
    rows_str,
    scripts,
)

from twofold.engine import Arrangement
from twofold.engine import batch as batch_mod
from twofold.engine.frames import TIME, schema
from twofold.engine.hashing import mix
from twofold.engine.snapshot import ArrangementSnapshot, _accumulate, _collect
from twofold.protocol import Frontier, RelationDesc
from twofold.testing.profiles import examples


def _plain_read(snap: ArrangementSnapshot, t: int) -> list[str]:
    """The read without memos or folding: concatenate, filter by time, consolidate."""
    frame = _accumulate(_collect(snap.data, schema(snap.desc.types), le=t), snap.columns)
    return _rows(frame)


def _rows(frame: pl.DataFrame) -> list[str]:
    return sorted(repr(r) for r in frame.iter_rows())


@contextmanager
def _weak_codes() -> Iterator[None]:
    """Sort codes of 2 key bits and 1 row bit: distinct keys and rows share codes all the
    time (only the full 64-bit row hash and exact equality tell them apart). Reads only: key
    lookups would probe with real codes."""

    def weak(key_hash: np.ndarray, row_hash_: np.ndarray) -> np.ndarray:
        out: np.ndarray = ((key_hash & np.uint64(3)) << np.uint64(62)) | (
            mix(row_hash_) & np.uint64(1)
        )
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(batch_mod, "sort_code", weak)
        yield


def _check(desc: RelationDesc, key: list[int], ops: list[tuple[str, Any]], order: int) -> None:
    for snap, history in replay(desc, key, ops):
        since, upper = snap.since.time, snap.upper.time
        assert since is not None and upper is not None
        times = list(range(since, upper))
        times = times if order == 0 else times[::-1] if order == 1 else times[1::2] + times
        for _ in range(2):  # the second round reads through filled memos
            for t in times:
                got = snap.read(t)
                assert _rows(got) == _plain_read(snap, t)
                assert snap.read_rows(t) == naive(history, t)


@settings(max_examples=examples(50), deadline=None)
@given(scripts(rows_int), st.sampled_from([[0], [1], []]), st.integers(0, 2))
def test_memoised_reads_equal_plain_reads(
    ops: list[tuple[str, Any]], key: list[int], order: int
) -> None:
    _check(DESC_INT, key, ops, order)


@settings(max_examples=examples(40), deadline=None)
@given(scripts(rows_str), st.sampled_from([[0], [2]]), st.integers(0, 2))
def test_memoised_reads_exact_under_code_collisions(
    ops: list[tuple[str, Any]], key: list[int], order: int
) -> None:
    with _weak_codes():
        _check(DESC_STR, key, ops, order)


def test_single_compacted_batch_is_read_without_copy() -> None:
    arr = Arrangement(DESC_INT, [0])
    arr.insert([([k, k % 3], k % 4, 1) for k in range(100)], Frontier.at(5))
    arr.compact(Frontier.at(4))
    arr.merge_all()
    snap = arr.snapshot()
    (only,) = snap.data
    assert only.tmin == only.tmax == 4
    first = snap.read(4)
    second = arr.snapshot().read(4)
    assert first.height == 100
    # The memo's frame is the batch's own columns (no consolidation, no copy).
    assert second.get_column("c0").equals(only.data.get_column("c0"))
    assert TIME not in first.columns
