"""The self-correcting materialized-view sink (`spec/catalog.md`, "Materialized views correct
themselves"): whatever its shard held before — rows of an earlier life of the view, of another
definition, or a stretch another writer appended — the shard ends up holding exactly the view's
contents, at every time from the sink's first write on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from itertools import pairwise

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine import SinkChunk
from twofold.engine.frames import empty, error_schema, update_schema
from twofold.protocol import ColumnType, Frontier, GlobalId, RelationDesc
from twofold.runtime.sinks import MaterializedViewState
from twofold.storage import Storage, drop_memory_store, open_storage, to_tuples
from twofold.storage.view_errors import error_shard_id
from twofold.testing.profiles import examples

DESC = RelationDesc(names=["x"], types=[ColumnType(scalar="int", nullable=False)])
Update = tuple[int, int, int]  # (x, time, diff)


@pytest.fixture
def storage() -> Iterator[Storage]:
    with open_storage("memory://mv-sink") as s:
        yield s
    drop_memory_store("mv-sink")


def chunk(lower: int, upper: int, updates: list[Update]) -> SinkChunk:
    frame = pl.DataFrame([list(u) for u in updates], schema=update_schema(DESC.types),
                         orient="row")
    return SinkChunk(Frontier.at(lower), Frontier.at(upper), frame, empty(error_schema()))


def contents(storage: Storage, t: int) -> Counter[int]:
    out: Counter[int] = Counter()
    for row, _, diff in to_tuples(storage.shard("mv").snapshot(t)):
        out[row[0]] += diff
    return out


def sink(storage: Storage, as_of: int = 0) -> MaterializedViewState:
    s = MaterializedViewState(GlobalId.user(1), storage, "mv", DESC, as_of)
    s.allow_writes()
    return s


def test_a_resumed_view_writes_nothing_twice(storage: Storage) -> None:
    first = sink(storage)
    first.on_chunks([chunk(5, 10, [(1, 5, 1), (2, 5, 1)])])
    assert contents(storage, 9) == Counter({1: 1, 2: 1})
    # The view restarts at an as_of before the shard's upper (10): its snapshot again, then a
    # change.
    again = sink(storage)
    again.on_chunks([chunk(8, 12, [(1, 8, 1), (2, 8, 1), (3, 11, 1)])])
    assert contents(storage, 10) == Counter({1: 1, 2: 1})
    assert contents(storage, 11) == Counter({1: 1, 2: 1, 3: 1})
    # ... and at an as_of after it (the process was down a while): the old sink appended the
    # whole snapshot once more, [(1,), (2,)] read back as [(1,), (1,), (2,), (2,)].
    third = sink(storage)
    third.on_chunks([chunk(20, 21, [(1, 20, 1), (2, 20, 1), (3, 20, 1)])])
    assert contents(storage, 20) == Counter({1: 1, 2: 1, 3: 1})


def test_times_between_the_shards_upper_and_a_later_as_of_keep_the_last_contents(
        storage: Storage) -> None:
    sink(storage).on_chunks([chunk(0, 12, [(1, 5, 1), (2, 5, 1), (3, 5, 1)])])
    # Restored at 20 (an input's since passed the shard's upper): nothing is known of 12..19.
    late = sink(storage, as_of=20)
    late.on_chunks([chunk(20, 22, [(1, 20, 1), (3, 20, 1), (5, 20, 1), (5, 21, 1)])])
    assert contents(storage, 15) == Counter({1: 1, 2: 1, 3: 1})   # not empty
    assert contents(storage, 20) == Counter({1: 1, 3: 1, 5: 1})
    assert contents(storage, 21) == Counter({1: 1, 3: 1, 5: 2})


def test_a_shard_holding_another_definitions_rows_is_corrected(storage: Storage) -> None:
    storage.create_shard("mv", DESC).compare_and_append([([7], 0, 1), ([1], 0, 2)], 0, 3)
    s = sink(storage)
    s.on_chunks([chunk(4, 6, [(1, 4, 1), (2, 5, 1)])])
    assert contents(storage, 4) == Counter({1: 1})
    assert contents(storage, 5) == Counter({1: 1, 2: 1})


def test_two_writers_of_one_view_never_duplicate(storage: Storage) -> None:
    a, b = sink(storage), sink(storage)
    steps = [chunk(0, 3, [(1, 1, 1)]), chunk(3, 5, [(2, 4, 1)]), chunk(5, 9, [(1, 6, -1)]),
             chunk(9, 10, [(4, 9, 1)])]
    a.on_chunks(steps[:2])
    b.on_chunks(steps[:1])
    b.on_chunks(steps[1:3])
    a.on_chunks(steps[2:])
    b.on_chunks(steps[3:])
    assert contents(storage, 9) == Counter({2: 1, 4: 1})
    assert contents(storage, 5) == Counter({1: 1, 2: 1})


@settings(max_examples=examples(30), deadline=None)
@given(
    old=st.lists(st.integers(0, 4), max_size=6),
    updates=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 12), st.sampled_from([1, -1])),
                     max_size=20),
    cuts=st.lists(st.integers(1, 13), max_size=4),
    writers=st.lists(st.integers(0, 1), min_size=1, max_size=8),
)
def test_shard_equals_the_view_whatever_it_held(old: list[int], updates: list[Update],
                                                cuts: list[int], writers: list[int]) -> None:
    name = "mv-sink-prop"
    with open_storage(f"memory://{name}") as storage:
        try:
            shard = storage.create_shard("mv", DESC)
            if old:
                shard.compare_and_append([([x], 0, 1) for x in old], 0, 1)
            # A collection: never negative at any time (the engine only emits such).
            net: Counter[int] = Counter()
            valid: list[Update] = []
            for x, t, d in sorted(updates, key=lambda u: u[1]):
                if net[x] + d >= 0:
                    net[x] += d
                    valid.append((x, t, d))
            bounds = sorted({1, *cuts, 14})
            chunks = [chunk(lo, hi, [u for u in valid if lo <= u[1] < hi])
                      for lo, hi in pairwise(bounds)]
            sinks = [sink(storage), sink(storage)]
            fed = [0, 0]
            for w in writers:
                if fed[w] < len(chunks):
                    sinks[w].on_chunks([chunks[fed[w]]])
                    fed[w] += 1
            sinks[0].on_chunks(chunks[fed[0]:])
            upper = storage.shard("mv").upper.time
            assert upper == 14
            for t in range(1, 14):
                want: Counter[int] = Counter()
                for x, ut, d in valid:
                    if ut <= t:
                        want[x] += d
                assert contents(storage, t) == +want, t
        finally:
            drop_memory_store(name)


# -- the error part (storage/view_errors.py) ---------------------------------------------------


def error_chunk(lower: int, upper: int, errors: list[tuple[str, int, int]]) -> SinkChunk:
    frame = pl.DataFrame([list(e) for e in errors], schema=error_schema(), orient="row")
    return SinkChunk(Frontier.at(lower), Frontier.at(upper), empty(update_schema(DESC.types)),
                     frame)


def errors_at(storage: Storage, t: int) -> Counter[str]:
    out: Counter[str] = Counter()
    for row, _, diff in to_tuples(storage.shard(error_shard_id("mv")).snapshot(t)):
        out[row[0]] += diff
    return out


def test_errors_are_written_past_and_retracted_and_a_resumed_sink_writes_them_once(
        storage: Storage) -> None:
    first = sink(storage)
    first.on_chunks([chunk(0, 5, [(1, 2, 1)]), error_chunk(5, 8, [("division by zero", 6, 2)]),
                     chunk(8, 10, [(2, 9, 1)])])
    # The sink wrote past the error: rows after it are there, the error is at its time.
    assert contents(storage, 9) == Counter({1: 1, 2: 1})
    assert errors_at(storage, 5) == Counter()
    assert errors_at(storage, 9) == Counter({"division by zero": 2})
    # A restart before the shard's upper re-derives the error; it is not written twice.
    again = sink(storage, as_of=7)
    again.on_chunks([error_chunk(7, 12, [("division by zero", 7, 2),
                                         ("division by zero", 11, -2)])])
    assert errors_at(storage, 10) == Counter({"division by zero": 2})
    assert +errors_at(storage, 11) == Counter()  # retracted with its rows


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 3)), min_size=1, max_size=8))
@settings(max_examples=examples(20), deadline=None)
def test_the_error_part_is_never_behind_the_rows(steps: list[tuple[bool, int]]) -> None:
    with open_storage("memory://") as storage:
        s = sink(storage)
        rows, errs = storage.shard("mv"), storage.shard(error_shard_id("mv"))
        t = 0
        for is_error, width in steps:
            c = (error_chunk(t, t + width, [("e", t, 1)]) if is_error
                 else chunk(t, t + width, [(t, t, 1)]))
            s.on_chunks([c])
            t += width
            assert rows.upper.less_equal(errs.upper)
            assert s.upper == rows.upper.meet(errs.upper) == Frontier.at(t)
