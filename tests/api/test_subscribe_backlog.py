"""A subscription's bounded backlog (`AsyncSubscription.bound_backlog`; `twofold serve` bounds
every SUBSCRIBE): a reader that falls more than the bound behind ends with a typed error at its
next read, its queued batches dropped and the subscribe dataflow with them — bounded memory, and
never a gap the reader is not told of; a reader that keeps up never ends."""

from __future__ import annotations

import itertools
import time

import pytest

import twofold
from twofold.sql.errors import sqlstate_of


def _collections(db: twofold.Database) -> set[object]:
    ctl = db.controller
    assert ctl is not None
    return set(ctl.state.collections)


def test_a_reader_that_falls_behind_ends_with_a_typed_error(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int})
    sub = db.subscribe(t)
    sub.bound_backlog(20)  # well below the writes: a loaded replica folds some into one batch
    first = sub.next(timeout=20)  # the (empty) snapshot
    assert first.updates == []
    inner = sub._inner._inner
    assert inner.id in _collections(db)
    for i in range(300):  # 300 one-row writes, many batches, none read
        t.insert([(i,)])
    deadline = time.monotonic() + 30  # until they have reached the subscription, unread
    while not inner._overflowed and time.monotonic() < deadline:
        time.sleep(0.02)
    got = [first]
    with pytest.raises(twofold.SubscribeBacklogFull) as e:
        for _ in range(400):
            got.append(sub.next(timeout=20))
    assert sqlstate_of(e.value) == "53400"
    assert "20 updates behind" in str(e.value)
    # What came before the error is contiguous from the start: no gap it was not told of.
    for a, b in itertools.pairwise(got):
        assert a.upper == b.lower
    assert sum(len(b.updates) for b in got) < 300
    # The queue is dropped at once and the dataflow soon after: bounded memory.
    assert inner._queued == 0
    deadline = time.monotonic() + 20
    while inner.id in _collections(db) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert inner.id not in _collections(db)
    sub.close()
    # The database serves on: a new subscription starts at the latest contents.
    with db.subscribe(t) as again:
        snap = again.next(timeout=20)
        assert sorted(r for _, r, d in snap.updates if d > 0) == [(i,) for i in range(300)]


def test_a_reader_that_keeps_up_never_ends(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int})
    with db.subscribe(t) as sub:
        sub.bound_backlog(10)
        sub.next(timeout=20)
        seen: list[tuple[int, ...]] = []
        for i in range(40):
            t.insert([(i * 8 + j,) for j in range(8)])  # 8 updates a write, bound 10
            while len(seen) < (i + 1) * 8:
                seen.extend(r for _, r, _ in sub.next(timeout=20).updates)
        assert sorted(seen) == [(k,) for k in range(320)]


def test_a_large_first_batch_is_not_a_backlog(db: twofold.Database) -> None:
    """The batch a reader is on (the snapshot, say) does not count: only what waits behind it."""
    t = db.create_table("t", {"k": int})
    t.insert([(k,) for k in range(5000)])
    with db.subscribe(t) as sub:
        sub.bound_backlog(100)
        time.sleep(0.2)  # the snapshot batch queued, unread
        snap = sub.next(timeout=20)
        assert len(snap.updates) == 5000
