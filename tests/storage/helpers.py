"""Shared helpers for storage tests: the test relation, reference semantics, and the bodies of
worker processes (which must live in an importable module for the `spawn` start method)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from twofold.protocol import ColumnType, Frontier, RelationDesc
from twofold.storage import Shard, ShardState, Storage, UpperMismatch, open_storage, to_tuples

DESC = RelationDesc(
    names=["k", "s"], types=[ColumnType("int", nullable=False), ColumnType("str")]
)

Update = tuple[list[Any], int, int]


def fresh_id(prefix: str = "shard") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def reference_at(updates: Sequence[Update], as_of: int) -> Counter[tuple[Any, ...]]:
    """The collection at `as_of`: sum of diffs per row over times <= as_of, zeros dropped."""
    acc: Counter[tuple[Any, ...]] = Counter()
    for row, t, d in updates:
        if t <= as_of:
            acc[tuple(row)] += d
    return Counter({k: v for k, v in acc.items() if v})


def snapshot_counter(shard: Shard, as_of: int) -> Counter[tuple[Any, ...]]:
    rows = to_tuples(shard.snapshot(as_of))
    assert all(t == as_of for _, t, _ in rows)
    assert len(rows) == len({tuple(r) for r, _, _ in rows}), "snapshot is not consolidated"
    return Counter({tuple(r): d for r, _, d in rows})


# -- batches tagged by writer, for race and durability tests ---------------------------------

BIG = RelationDesc(
    names=["writer", "seq", "i", "pad"],
    types=[ColumnType("int", nullable=False), ColumnType("int", nullable=False),
           ColumnType("int", nullable=False), ColumnType("str", nullable=False)],
)


def tagged_batch(writer: int, seq: int, size: int, time: int) -> list[Update]:
    return [([writer, seq, i, "x" * 16], time, 1) for i in range(size)]


def append_with_retry(shard: Shard, writer: int, seq: int, size: int) -> int:
    """Append one tagged batch at the current upper, retrying lost races; return its time."""
    while True:
        upper = shard.upper
        assert upper.time is not None
        t = upper.time
        try:
            shard.compare_and_append(tagged_batch(writer, seq, size, t), upper, Frontier.at(t + 1))
            return t
        except UpperMismatch as e:
            assert e.actual != upper
            continue


def whole_batches(shard: Shard, size: int) -> set[tuple[int, int]]:
    """Assert every stored tagged batch is whole (`size` rows, nothing partial, no duplicate)
    and there is one per complete time; return the tags `(writer, seq)` present."""
    upper = shard.upper
    assert upper.time is not None
    if upper.time == 0:
        return set()
    counts: Counter[tuple[int, int]] = Counter()
    for row, _, d in to_tuples(shard.snapshot(upper.time - 1)):
        assert d == 1, "a batch was stored twice"
        counts[(row[0], row[1])] += 1
    assert all(c == size for c in counts.values()), f"partial batches: {counts}"
    assert len(counts) == upper.time, "one batch per time"
    return set(counts)


def process_writer(url: str, shard_id: str, writer: int, count: int, size: int,
                   ready: Any, start: Any, wins: Any) -> None:
    """Child process: signal `ready`, wait for `start`, append `count` tagged batches, report
    the time each landed at."""
    with open_storage(url) as storage:
        shard = storage.shard(shard_id)
        ready.release()
        start.wait()
        for seq in range(count):
            wins.put((writer, seq, append_with_retry(shard, writer, seq, size)))


def process_endless_writer(url: str, shard_id: str, size: int, appended: Any) -> None:
    """Child process: append tagged batches forever, setting `appended` after the third."""
    with open_storage(url) as storage:
        shard = storage.shard(shard_id)
        seq = 0
        while True:
            append_with_retry(shard, 0, seq, size)
            seq += 1
            if seq == 3:
                appended.set()


def process_reader(url: str, shard_id: str, size: int, target: int, ready: Any,
                   results: Any) -> None:
    """Child process: while a writer appends, check that every snapshot is a whole prefix and
    that a listener sees each batch once, in order; report what was seen."""
    with open_storage(url) as storage:
        shard = storage.shard(shard_id)
        listener = shard.listen(0)
        ready.set()
        seen_listen: list[int] = []
        snapshots = 0
        while True:
            upper = shard.upper.time
            assert upper is not None
            if upper > 1:
                rows = to_tuples(shard.snapshot(upper - 1))
                seqs = Counter(r[1] for r, _, _ in rows)
                # The writer appends seq s at time s: a consistent prefix is seqs 0..upper-1,
                # each whole.
                if sorted(seqs) != list(range(upper)) or set(seqs.values()) != {size}:
                    results.put(("bad snapshot", upper, sorted(seqs.items())))
                    return
                snapshots += 1
            batch = listener.next_batch(timeout=0.05)
            while batch is not None:  # drain: the frontier runs ahead of the buffered batches
                seen_listen.extend(sorted({r[1] for r, _, _ in batch.to_tuples()}))
                batch = listener.next_batch(timeout=0)
            if listener.frontier.time is not None and listener.frontier.time >= target:
                results.put(("ok", snapshots, seen_listen))
                return


# -- forcing interleavings ----------------------------------------------------------------

class AfterStateReads:
    """Runs `action` right after each of a backend's next `times` state reads that `when`
    accepts (the moment a reader has read the upper and not yet used it), except reads made
    by `action` itself, until `stop()`; `ran` counts the runs."""

    def __init__(self, storage: Storage, times: int, action: Callable[[], None],
                 when: Callable[[ShardState], bool] = lambda state: True) -> None:
        self.backend: Any = storage.backend
        self.real = self.backend.state
        self.times = times
        self.action = action
        self.when = when
        self.ran = 0
        self._acting = False
        self.backend.state = self._state

    def _state(self, shard_id: str) -> ShardState:
        out = self.real(shard_id)
        if self.ran < self.times and not self._acting and self.when(out):
            self.ran += 1
            self._acting = True
            try:
                self.action()
            finally:
                self._acting = False
        return out

    def stop(self) -> None:
        self.backend.state = self.real
