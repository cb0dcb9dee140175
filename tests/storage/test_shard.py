"""Shard semantics (`spec/storage.md`): compare-and-append, snapshot, listen, since, compaction."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twofold.protocol import Frontier
from twofold.storage import (
    BeyondUpper,
    CorruptStorage,
    InvalidUpdates,
    Part,
    SchemaMismatch,
    SinceViolation,
    Storage,
    UpperMismatch,
    to_update_table,
)
from twofold.storage.listener import tile_batches
from twofold.testing.profiles import examples

from .helpers import DESC, Update, fresh_id, reference_at, snapshot_counter

SHARED = settings(
    max_examples=examples(25),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
    deadline=None,
)


def test_new_shard_frontiers_start_at_minimum(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    assert shard.desc == DESC
    assert shard.upper == Frontier.minimum()
    assert shard.since == Frontier.minimum()


def test_compare_and_append_advances_upper(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    shard.compare_and_append([([1, "a"], 0, 1), ([2, None], 2, 1)], Frontier.at(0), Frontier.at(3))
    assert shard.upper == Frontier.at(3)
    assert snapshot_counter(shard, 2) == Counter({(1, "a"): 1, (2, None): 1})
    assert snapshot_counter(shard, 1) == Counter({(1, "a"): 1})


def test_mismatch_carries_actual_upper_and_writes_nothing(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    shard.compare_and_append([([1, "a"], 0, 1)], 0, 5)
    with pytest.raises(UpperMismatch) as info:
        shard.compare_and_append([([9, "z"], 1, 1)], 1, 6)
    assert info.value.actual == Frontier.at(5)
    assert info.value.expected == Frontier.at(1)
    assert "'s'" in str(info.value)
    assert shard.upper == Frontier.at(5)
    assert snapshot_counter(shard, 4) == Counter({(1, "a"): 1})
    assert shard.listen(0).poll()[0].to_tuples() == []  # nothing after time 0 either


def test_empty_append_only_advances_upper(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    shard.compare_and_append([], 0, 10)
    assert shard.upper == Frontier.at(10)
    assert snapshot_counter(shard, 9) == Counter()


def test_no_op_append_is_a_fence(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    shard.compare_and_append([], 0, 4)
    shard.compare_and_append([], 4, 4)  # checks the upper, writes nothing
    assert shard.upper == Frontier.at(4)
    with pytest.raises(UpperMismatch):
        shard.compare_and_append([], 3, 3)
    with pytest.raises(InvalidUpdates, match="must lie in"):
        shard.compare_and_append([([1, "a"], 4, 1)], 4, 4)


@pytest.mark.parametrize(
    ("updates", "lower", "new_upper", "error", "needle"),
    [
        ([([1, "a"], 5, 1)], 0, 5, InvalidUpdates, "must lie in"),
        ([([1, "a"], 0, 1), ([1, "a"], 9, 1)], 1, 5, InvalidUpdates, "span [0, 9]"),
        ([], 3, 2, InvalidUpdates, "below lower"),
        ([(["x", "a"], 0, 1)], 0, 5, SchemaMismatch, "'k'"),
        ([([None, "a"], 0, 1)], 0, 5, SchemaMismatch, "not nullable"),
        ([([1, "a"], 0, 0)], 0, 5, InvalidUpdates, "non-zero"),
        ([], "0", 5, InvalidUpdates, "lower must be a Frontier"),
    ],
)
def test_bad_appends_write_nothing(storage: Storage, updates: list[Update], lower: object,
                                   new_upper: int, error: type[Exception], needle: str) -> None:
    shard = storage.create_shard("s", DESC)
    with pytest.raises(error, match=re.escape(needle)):
        shard.compare_and_append(updates, lower, new_upper)  # type: ignore[arg-type]
    assert shard.upper == Frontier.minimum()
    shard.compare_and_append([], 0, 1)  # the shard is still writable from its old upper
    assert snapshot_counter(shard, 0) == Counter()


def test_closing_the_shard_with_an_empty_upper(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    shard.compare_and_append([([1, "a"], 7, 1)], 0, Frontier.empty())
    assert shard.upper == Frontier.empty()
    assert snapshot_counter(shard, 2**64 - 1) == Counter({(1, "a"): 1})
    with pytest.raises(UpperMismatch):
        shard.compare_and_append([], 8, 9)


def test_snapshot_outside_the_readable_window(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    with pytest.raises(BeyondUpper, match="not yet complete"):
        shard.snapshot(0)
    shard.compare_and_append([([1, "a"], 0, 1)], 0, 10)
    shard.downgrade_since(5)
    with pytest.raises(SinceViolation, match="before since") as info:
        shard.snapshot(4)
    assert info.value.since == Frontier.at(5) and info.value.as_of == 4
    with pytest.raises(BeyondUpper):
        shard.snapshot(10)
    assert snapshot_counter(shard, 5) == Counter({(1, "a"): 1})
    with pytest.raises(InvalidUpdates):
        shard.snapshot(-1)


@SHARED
@given(downgrades=st.lists(st.one_of(st.integers(0, 100), st.none()), max_size=10))
def test_since_is_the_running_maximum_of_downgrades(shared_storage: Storage,
                                                    downgrades: list[int | None]) -> None:
    shard = shared_storage.create_shard(fresh_id(), DESC)
    shard.compare_and_append([([1, "a"], 0, 1)], 0, 101)
    expected = Frontier.minimum()
    for d in downgrades:
        target = Frontier.empty() if d is None else Frontier.at(d)
        expected = expected.join(target)
        assert shard.downgrade_since(target) == expected
        assert shard.since == expected


def test_since_never_goes_backwards(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    shard.compare_and_append([], 0, 100)
    assert shard.downgrade_since(10) == Frontier.at(10)
    assert shard.downgrade_since(3) == Frontier.at(10)
    assert shard.since == Frontier.at(10)
    assert shard.downgrade_since(Frontier.empty()) == Frontier.empty()
    assert shard.downgrade_since(50) == Frontier.empty()


# -- histories: random appends, checked against a reference accumulation ---------------------

rows = st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None]))
steps = st.lists(
    st.tuples(
        st.integers(1, 4),  # width of the batch's time range
        st.lists(st.tuples(rows, st.integers(0, 3), st.integers(-2, 2).filter(bool)),
                 max_size=6),  # (row, offset into the range, diff)
    ),
    min_size=1, max_size=8,
)


def apply_history(shard, steps):  # type: ignore[no-untyped-def]
    """Append each step as one batch; return all updates and the batches' bounds."""
    updates: list[Update] = []
    bounds: list[tuple[int, int, list[Update]]] = []
    lower = shard.upper.time
    for width, batch in steps:
        upper = lower + width
        ups = [(list(r), lower + off % width, d) for r, off, d in batch]
        shard.compare_and_append(ups, lower, upper)
        updates += ups
        bounds.append((lower, upper, ups))
        lower = upper
    return updates, bounds


@SHARED
@given(steps=steps)
def test_snapshot_at_every_readable_time_matches_reference(shared_storage: Storage,
                                                           steps: list) -> None:
    shard = shared_storage.create_shard(fresh_id(), DESC)
    updates, _ = apply_history(shard, steps)
    upper = shard.upper.time
    for t in range(upper):
        assert snapshot_counter(shard, t) == reference_at(updates, t)


@SHARED
@given(steps=steps, as_of=st.integers(0, 12))
def test_listen_yields_exactly_the_appended_batches(shared_storage: Storage, steps: list,
                                                    as_of: int) -> None:
    shard = shared_storage.create_shard(fresh_id(), DESC)
    listener = shard.listen(as_of)
    updates, bounds = apply_history(shard, steps)
    upper = shard.upper.time
    got = listener.poll()
    assert listener.frontier == shard.upper.join(Frontier.at(as_of + 1))
    if as_of + 1 >= upper:
        assert got == []
        return
    # The batches tile [as_of + 1, upper) contiguously.
    assert got[0].lower == Frontier.at(as_of + 1)
    assert all(a.upper == b.lower for a, b in itertools.pairwise(got))
    assert got[-1].upper == shard.upper
    # Every appended batch after as_of comes back whole, with its bounds; a batch straddling
    # as_of comes back without its updates at or before as_of.
    data = [b for b in got if len(b)]
    expected = [
        (max(lo, as_of + 1), up, Counter((tuple(r), t, d) for r, t, d in ups if t > as_of))
        for lo, up, ups in bounds if up > as_of + 1
    ]
    expected = [e for e in expected if e[2]]
    assert [(b.lower.time, b.upper.time, Counter((tuple(r), t, d) for r, t, d in b.to_tuples()))
            for b in data] == expected
    # Snapshot at as_of plus the listened updates equals the collection at every later time.
    base = reference_at(updates, as_of)
    listened = [u for b in got for u in b.to_tuples()]
    for t in range(as_of + 1, upper):
        acc = Counter(base)
        for row, time, d in listened:
            if time <= t:
                acc[tuple(row)] += d
        assert Counter({k: v for k, v in acc.items() if v}) == reference_at(updates, t)


@SHARED
@given(steps=steps, sinces=st.lists(st.integers(0, 30), min_size=1, max_size=4))
def test_compaction_preserves_every_read_at_or_after_since(shared_storage: Storage, steps: list,
                                                           sinces: list[int]) -> None:
    shard = shared_storage.create_shard(fresh_id(), DESC)
    updates, _ = apply_history(shard, steps)
    upper = shard.upper.time
    for since in sinces:
        target = min(since, upper - 1)
        shard.downgrade_since(target)
        current = shard.since.time
        assert current is not None and current >= target
        for t in range(current, upper):
            assert snapshot_counter(shard, t) == reference_at(updates, t)
        if current > 0:
            with pytest.raises(SinceViolation):
                shard.snapshot(current - 1)
    # Compaction actually merged: parts wholly behind since number O(log n) and are consolidated.
    _, infos = shard.backend.part_infos(shard.shard_id)
    behind = [p for p in infos if p.upper.time is not None and p.upper.time <= shard.since.time]
    assert len(behind) <= 4


@SHARED
@given(steps=steps, lags=st.lists(st.integers(0, 3), min_size=8, max_size=8))
def test_listener_stays_exact_while_since_trails_it(shared_storage: Storage, steps: list,
                                                    lags: list[int]) -> None:
    # A reader snapshots at 0, then listens, while since follows it (compacting behind it):
    # what it assembles equals the collection at every time it has seen.
    shard = shared_storage.create_shard(fresh_id(), DESC)
    shard.compare_and_append([], 0, 1)
    base = snapshot_counter(shard, 0)
    listener = shard.listen(0)
    seen: list[Update] = []
    updates: list[Update] = []
    for (width, batch), lag in zip(steps, lags, strict=False):
        lower = shard.upper.time
        assert lower is not None
        ups = [(list(r), lower + off % width, d) for r, off, d in batch]
        shard.compare_and_append(ups, lower, lower + width)
        updates += ups
        seen += [u for b in listener.poll() for u in b.to_tuples()]
        delivered = listener.frontier.time
        assert delivered is not None
        shard.downgrade_since(max(0, delivered - 1 - lag))
    upper = shard.upper.time
    assert upper is not None and listener.frontier.time == upper
    for t in range(upper):
        acc = Counter(base)
        for row, time, d in seen:
            if time <= t:
                acc[tuple(row)] += d
        assert Counter({k: v for k, v in acc.items() if v}) == reference_at(updates, t)


def test_compaction_drops_cancelled_history(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    for t in range(40):  # each row is inserted, then deleted two steps later
        shard.compare_and_append([([t % 2, "a"], t, 1 if t % 4 < 2 else -1)], t, t + 1)
    shard.compare_and_append([([7, "kept"], 40, 1)], 40, 41)
    shard.downgrade_since(40)
    _, infos = shard.backend.part_infos("s")
    assert [p.count for p in infos] == [1]  # only the part at since: the history vanished
    assert snapshot_counter(shard, 40) == Counter({(7, "kept"): 1})


def test_storage_does_not_grow_with_history(storage: Storage) -> None:
    # A table-like workload: each step replaces one of 8 rows; since trails the upper by 3.
    shard = storage.create_shard("s", DESC)
    for t in range(150):
        batch = [([t % 8, str(t)], t, 1)]
        if t >= 8:
            batch.append(([t % 8, str(t - 8)], t, -1))
        shard.compare_and_append(batch, t, t + 1)
        if t >= 3:
            shard.downgrade_since(t - 3)
    _, infos = shard.backend.part_infos("s")
    behind = [p for p in infos if p.upper.time is not None and p.upper.time <= 146]
    assert len(behind) <= 10, [p.count for p in infos]  # O(log n) parts, not 150
    assert sum(p.count for p in behind) <= 8 * len(behind)  # ~ live rows, not history
    assert len(snapshot_counter(shard, 149)) == 8


def test_downgrade_without_compaction_keeps_parts(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    for t in range(5):
        shard.compare_and_append([([t, "a"], t, 1)], t, t + 1)
    shard.downgrade_since(4, compact=False)
    assert len(shard.backend.part_infos("s")[1]) == 5
    assert shard.compact() == 4
    assert len(shard.backend.part_infos("s")[1]) == 2
    assert snapshot_counter(shard, 4) == Counter({(t, "a"): 1 for t in range(5)})


def test_compaction_loses_races_harmlessly(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    for t in range(6):
        shard.compare_and_append([([t, "a"], t, 1)], t, t + 1)
    shard.downgrade_since(5, compact=False)
    _, infos = shard.backend.part_infos("s")
    stale = shard.backend.load_parts("s", [p.part_id for p in infos[:2]])
    assert stale is not None
    assert shard.compact() > 0  # another compactor wins first
    merged = stale[0]
    assert not shard.backend.replace_parts("s", [p.part_id for p in stale], merged)
    assert shard.backend.load_parts("s", [infos[0].part_id]) is None
    assert snapshot_counter(shard, 5) == Counter({(t, "a"): 1 for t in range(6)})


def test_concurrent_appends_downgrades_compactions_and_reads(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    updates: list[Update] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def compactor() -> None:
        try:
            while not stop.is_set():
                shard.compact()
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=compactor) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for t in range(60):
            batch = [([t % 7, "a"], t, 1), ([(t + 3) % 7, "a"], t, -1)]
            shard.compare_and_append(batch, t, t + 1)
            updates += batch
            if t % 5 == 4:
                shard.downgrade_since(t - 2, compact=False)
                since = shard.since.time
                assert since is not None
                assert snapshot_counter(shard, t) == reference_at(updates, t)
                assert snapshot_counter(shard, since) == reference_at(updates, since)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    assert snapshot_counter(shard, 59) == reference_at(updates, 59)


# -- listening -------------------------------------------------------------------------------


def test_tile_batches_clips_straddlers_and_fills_gaps() -> None:
    def part(pid: int, lower: int, upper: int, times: list[int]) -> Part:
        table = to_update_table([([t, "x"], t, 1) for t in times], DESC)
        return Part(pid, lower, Frontier.at(upper), 0, len(times), table)

    empty = to_update_table([], DESC)
    parts = [part(1, 0, 4, [1, 3]), part(2, 6, 8, [6, 7])]
    batches = tile_batches(2, Frontier.at(10), parts, empty, "s")
    assert [(b.lower.time, b.upper.time, [t for _, t, _ in b.to_tuples()]) for b in batches] == [
        (2, 4, [3]), (4, 6, []), (6, 8, [6, 7]), (8, 10, []),
    ]
    with pytest.raises(CorruptStorage, match="beyond the upper"):
        tile_batches(2, Frontier.at(7), parts, empty, "s")


def test_listen_waits_for_appends_from_another_thread(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    listener = shard.listen(0)
    assert listener.next_batch(timeout=0) is None
    waiting = threading.Event()
    got: list = []

    def consume() -> None:
        waiting.set()
        got.append(listener.next_batch(timeout=30))

    thread = threading.Thread(target=consume)
    thread.start()
    waiting.wait()
    shard.compare_and_append([([1, "a"], 1, 1)], 0, 2)
    thread.join()
    assert got[0] is not None and got[0].to_tuples() == [([1, "a"], 1, 1)]


def test_listen_before_since_fails_and_listener_falls_behind(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    shard.compare_and_append([([1, "a"], 1, 1)], 0, 5)
    listener = shard.listen(2)
    listener.close()  # gives up its hold on since, on backends whose listeners hold leases
    shard.downgrade_since(3)
    with pytest.raises(SinceViolation, match="past this listener"):
        listener.poll()
    with pytest.raises(SinceViolation, match="cannot listen"):
        shard.listen(2)
    assert [b.to_tuples() for b in shard.listen(3).poll()] == [[]]


def test_listener_ends_when_the_shard_closes(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    listener = shard.listen(0)
    shard.compare_and_append([([1, "a"], 3, 1)], 0, 4)
    shard.compare_and_append([], 4, Frontier.empty())
    batches = list(listener)
    assert [(b.lower, b.upper) for b in batches] == [
        (Frontier.at(1), Frontier.at(4)), (Frontier.at(4), Frontier.empty()),
    ]
    assert listener.done
    assert listener.next_batch(timeout=10) is None


def test_async_listen_and_cancel_safety(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    listener = shard.listen(0)

    async def main() -> list:
        pending = asyncio.ensure_future(listener.anext_batch())
        await asyncio.sleep(0)
        pending.cancel()  # cancelling a waiting read loses nothing
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert await listener.anext_batch(timeout=0) is None
        task = asyncio.ensure_future(listener.anext_batch(timeout=30))
        await asyncio.sleep(0)
        await asyncio.to_thread(shard.compare_and_append, [([1, "a"], 1, 1)], 0, 2)
        first = await task
        shard.compare_and_append([([2, "b"], 2, 1)], 2, Frontier.empty())
        return [first] + [b async for b in listener]

    batches = asyncio.run(main())
    assert [b.to_tuples() for b in batches] == [[([1, "a"], 1, 1)], [([2, "b"], 2, 1)]]
