"""Deferred merges (`Arrangement.defer_merges`): `insert` appends, `maintain` merges later.

- Reads at every readable time equal the naive sum of updates, before and after `maintain`,
  whatever the interleaving of inserts, compactions, full merges and maintains.
- After `maintain` the spine is in the geometric shape an eager arrangement keeps (each batch
  more than twice the next), so reads walk O(log n) batches either way.
- Until `maintain`, an insert leaves its batch unmerged (what lets a runtime report the upper
  first); at most `MAX_UNMERGED` batches wait.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.engine.test_arrangement import DESC_INT, naive, rows_int, scripts

from twofold.engine import Arrangement
from twofold.engine.arrangement import MAX_UNMERGED
from twofold.protocol import Frontier
from twofold.testing.profiles import examples


def apply(arr: Arrangement, kind: str, arg: Any) -> None:
    if kind == "insert":
        ups, new_upper = arg
        arr.insert(ups, Frontier.at(new_upper))
    elif kind == "compact":
        arr.compact(Frontier.at(arg))
    else:
        arr.merge_all()


def check_reads(arr: Arrangement, history: list[tuple[list[Any], int, int]]) -> None:
    snap = arr.snapshot()
    since, upper = snap.since.time, snap.upper.time
    assert since is not None and upper is not None
    for t in range(since, upper):
        assert snap.read_rows(t) == naive(history, t)


@settings(max_examples=examples(60), deadline=None)
@given(scripts(rows_int), st.lists(st.booleans(), min_size=10, max_size=10),
       st.sampled_from([[0], [1], []]))
def test_deferred_merges_read_the_same_and_end_in_the_eager_shape(
    ops: list[tuple[str, Any]], maintain_after: list[bool], key: list[int],
) -> None:
    eager, deferred = Arrangement(DESC_INT, key), Arrangement(DESC_INT, key)
    deferred.defer_merges()
    history: list[tuple[list[Any], int, int]] = []
    for (kind, arg), maintain in zip(ops, maintain_after, strict=False):
        apply(eager, kind, arg)
        apply(deferred, kind, arg)
        if kind == "insert":
            history.extend(arg[0])
        check_reads(deferred, history)
        if maintain:
            deferred.maintain()
            check_reads(deferred, history)
    deferred.maintain()
    check_reads(deferred, history)
    # The geometric shape an eager spine keeps (each batch more than twice the next). Not the
    # eager spine's exact batches: a merge deferred past a compaction consolidates the times it
    # advanced, so sizes — and so later merge choices — may differ (found by hypothesis).
    for arr in (deferred, eager):
        lengths = [len(b) for b in arr.snapshot().data]
        assert all(a > 2 * b for a, b in itertools.pairwise(lengths)), lengths


def test_an_insert_waits_for_maintain_to_merge() -> None:
    arr = Arrangement(DESC_INT, [0])
    arr.defer_merges()
    arr.insert([([1, 1], 0, 1)], Frontier.at(1))
    arr.insert([([2, 2], 1, 1)], Frontier.at(2))
    assert arr.batch_count == 2, "an eager arrangement merges these at once"
    assert arr.upper == Frontier.at(2)
    assert arr.maintain() is True
    assert arr.batch_count == 1
    assert arr.maintain() is False, "nothing left to merge"
    assert arr.snapshot().read_rows(1) == [([1, 1], 1), ([2, 2], 1)]


def test_unmerged_batches_are_bounded_without_maintain() -> None:
    arr = Arrangement(DESC_INT, [0])
    arr.defer_merges()
    for t in range(100):
        arr.insert([([t % 7, t], t, 1)], Frontier.at(t + 1))
        assert arr.batch_count <= MAX_UNMERGED + 12
    assert len(arr.snapshot().read_rows(99)) == 100
