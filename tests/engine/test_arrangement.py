"""Arrangement invariants, as property tests against a naive list of updates.

- A read at any `t` with `since <= t < upper` equals the naive sum of updates at times `<= t`,
  however the spine has merged and compacted.
- A snapshot taken earlier keeps answering exactly as before after later inserts, merges and
  compactions (its batches are immutable).
- Reads outside the window raise `NotReadableError`; inserts outside `[upper, new_upper)` raise
  `InputError` and change nothing.
- Batched key lookups equal filtering the full read by key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine import Arrangement, EvalError, InputError, NotReadableError
from twofold.engine.snapshot import ArrangementSnapshot
from twofold.protocol import ColumnType, Frontier, RelationDesc
from twofold.testing.profiles import examples

DESC_INT = RelationDesc(["k", "v"], [ColumnType("int"), ColumnType("int")])
DESC_STR = RelationDesc(
    ["k", "n", "v"], [ColumnType("str"), ColumnType("int"), ColumnType("float")]
)
keys_int = st.one_of(st.none(), st.integers(-4, 4))
rows_int = st.tuples(keys_int, st.integers(0, 3)).map(list)
rows_str = st.tuples(
    st.one_of(st.none(), st.sampled_from(["a", "b", "ü", ""])),
    st.one_of(st.none(), st.integers(0, 2)),
    st.sampled_from([0.5, -1.0]),
).map(list)


def naive(updates: list[tuple[list[Any], int, int]], t: int) -> list[tuple[list[Any], int]]:
    acc: Counter[tuple[Any, ...]] = Counter()
    for r, time, d in updates:
        if time <= t:
            acc[tuple(r)] += d
    rows = [(list(r), d) for r, d in acc.items() if d]
    return sorted(rows, key=lambda rd: tuple((1, 0) if v is None else (0, v) for v in rd[0]))


@st.composite
def scripts(draw: st.DrawFn, rows: st.SearchStrategy[list[Any]]) -> list[tuple[str, Any]]:
    ops: list[tuple[str, Any]] = []
    upper = 0
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["insert", "insert", "insert", "compact", "merge"]))
        if kind == "insert":
            new_upper = upper + draw(st.integers(0, 3))
            ups = []
            if new_upper > upper:
                for _ in range(draw(st.integers(0, 8))):
                    t = draw(st.integers(upper, new_upper - 1))
                    ups.append((draw(rows), t, draw(st.sampled_from([1, 1, 2, -1]))))
            ops.append(("insert", (ups, new_upper)))
            upper = new_upper
        elif kind == "compact":
            ops.append(("compact", draw(st.integers(0, upper + 1))))
        else:
            ops.append(("merge", None))
    return ops


def replay(desc: RelationDesc, key: list[int], ops: list[tuple[str, Any]],
           ) -> Iterator[tuple[ArrangementSnapshot, list[tuple[list[Any], int, int]]]]:
    """Run a `scripts` op list on a fresh arrangement: after each op, its snapshot and (a copy
    of) every update inserted so far."""
    arr = Arrangement(desc, key)
    history: list[tuple[list[Any], int, int]] = []
    for kind, arg in ops:
        if kind == "insert":
            ups, new_upper = arg
            arr.insert(ups, Frontier.at(new_upper))
            history.extend(ups)
        elif kind == "compact":
            arr.compact(Frontier.at(arg))
        else:
            arr.merge_all()
        yield arr.snapshot(), list(history)


def run_script(desc: RelationDesc, key: list[int], ops: list[tuple[str, Any]]) -> None:
    snaps = list(replay(desc, key, ops))
    for snap, hist in snaps:
        since, upper = snap.since.time, snap.upper.time
        assert since is not None and upper is not None
        for t in range(since, upper):
            assert snap.read_rows(t) == naive(hist, t)
            if key:
                # One key at a time (the point-lookup path): each key present at t, NULL keys
                # (which match nothing) and a key no row has.
                live = naive(hist, t)
                probes = {tuple(r[i] for i in key) for r, _ in live} | {(None,) * len(key)}
                absent = {"int": 10**9, "str": "absent", "float": 1e300}
                probes.add(tuple(absent[desc.types[i].scalar] for i in key))
                for k in probes:
                    want = [(r, d) for r, d in live
                            if None not in k and all(r[i] == k[j] for j, i in enumerate(key))]
                    assert snap.lookup_rows([list(k)], t) == want, (k, t)
            if key == [0]:
                probe: list[list[Any]] = (
                    [[None], ["a"], ["ü"]] if desc is DESC_STR else [[None], [1], [2]]
                )
                found = snap.lookup(probe, t)
                got = sorted(repr(tuple(r)) for r in found.iter_rows())
                want = sorted(
                    repr((*r, d)) for r, d in naive(hist, t) if r[0] is not None and [r[0]] in probe
                )
                assert got == want
                want_rows = [
                    (r, d) for r, d in naive(hist, t) if r[0] is not None and [r[0]] in probe
                ]
                assert snap.lookup_rows(probe, t) == want_rows
                assert snap.lookup_rows(probe * 10 + [[k] for k in range(-30, 30)], t) == [
                    rd
                    for rd in naive(hist, t)
                    if rd[0][0] is not None and ([rd[0][0]] in probe or isinstance(rd[0][0], int))
                ]
        for bad in (since - 1, upper):
            if bad >= 0:
                with pytest.raises(NotReadableError):
                    snap.read(bad)


@settings(max_examples=examples(60), deadline=None)
@given(scripts(rows_int), st.sampled_from([[0], [1], [0, 1], []]))
def test_int_arrangement_matches_naive(ops: list[tuple[str, Any]], key: list[int]) -> None:
    run_script(DESC_INT, key, ops)


@settings(max_examples=examples(40), deadline=None)
@given(scripts(rows_str), st.sampled_from([[0], [0, 1], [2]]))
def test_string_arrangement_matches_naive(ops: list[tuple[str, Any]], key: list[int]) -> None:
    run_script(DESC_STR, key, ops)


def test_compaction_consolidates_on_merge() -> None:
    arr = Arrangement(DESC_INT, [0])
    ups = [([1, t], t, 1) for t in range(7)] + [([1, t], t + 1, -1) for t in range(6)]
    arr.insert(ups, Frontier.at(8))
    assert len(arr) == 13
    arr.compact(Frontier.at(7))
    arr.merge_all()
    assert arr.batch_count == 1
    # Everything before the since collapsed onto it and cancelled: one live row remains.
    assert len(arr) == 1
    assert arr.snapshot().read_rows(7) == [([1, 6], 1)]


def test_geometric_merging_bounds_batch_count() -> None:
    arr = Arrangement(DESC_INT, [0])
    for t in range(200):
        arr.insert([([t % 7, t], t, 1)], Frontier.at(t + 1))
    assert arr.batch_count <= 10
    assert len(arr.snapshot().read_rows(199)) == 200


def test_snapshot_survives_merge_and_compaction() -> None:
    arr = Arrangement(DESC_INT, [0])
    arr.insert([([1, 1], 0, 1), ([2, 2], 1, 1)], Frontier.at(2))
    snap = arr.snapshot()
    arr.insert([([1, 1], 2, -1)], Frontier.at(3))
    arr.compact(Frontier.at(2))
    arr.merge_all()
    assert snap.read_rows(0) == [([1, 1], 1)]
    assert snap.read_rows(1) == [([1, 1], 1), ([2, 2], 1)]
    assert arr.snapshot().read_rows(2) == [([2, 2], 1)]
    with pytest.raises(NotReadableError):
        arr.snapshot().read(1)


def test_insert_outside_window_is_refused_and_changes_nothing() -> None:
    arr = Arrangement(DESC_INT, [0])
    arr.insert([([1, 1], 0, 1)], Frontier.at(2))
    with pytest.raises(InputError):
        arr.insert([([1, 1], 1, 1)], Frontier.at(3))
    with pytest.raises(InputError):
        arr.insert([([1, 1], 3, 1)], Frontier.at(3))
    with pytest.raises(InputError):
        arr.insert([], Frontier.at(1))
    with pytest.raises(InputError):
        arr.insert([([1, "x"], 2, 1)], Frontier.at(3))
    assert arr.upper == Frontier.at(2)
    assert arr.snapshot().read_rows(1) == [([1, 1], 1)]


def test_arrow_and_frame_inputs() -> None:
    arr = Arrangement(DESC_INT, [0])
    table = pa.table(
        {
            "k": pa.array([1, 2], pa.int64()),
            "v": pa.array([5, 6], pa.int64()),
            "time": pa.array([0, 1], pa.uint64()),
            "diff": pa.array([1, 1], pa.int64()),
        }
    )
    arr.insert(table, Frontier.at(2))
    batch = pa.RecordBatch.from_pydict(
        {"k": [1], "v": [5], "time": pa.array([2], pa.uint64()), "diff": [-1]}
    )
    arr.insert(batch, Frontier.at(3))
    assert arr.snapshot().read_rows(2) == [([2, 6], 1)]
    with pytest.raises(InputError):
        arr.insert(
            pa.table({"k": [1], "time": pa.array([3], pa.uint64()), "diff": [1]}), Frontier.at(4)
        )
    with pytest.raises(InputError):
        arr.insert(pl.DataFrame({"x": [1]}), Frontier.at(4))


def test_errors_are_seen_by_reads() -> None:
    arr = Arrangement(DESC_INT, [0])
    errs = pl.DataFrame(
        {
            "error": ["division by zero", "division by zero"],
            "time": pl.Series([1, 2], dtype=pl.UInt64),
            "diff": [1, -1],
        }
    )
    arr.insert([([1, 1], 0, 1)], Frontier.at(3), errors=errs)
    snap = arr.snapshot()
    assert snap.read_rows(0) == [([1, 1], 1)]
    with pytest.raises(EvalError, match="division by zero"):
        snap.read(1)
    with pytest.raises(EvalError):
        snap.lookup([[1]], 1)
    assert snap.read_rows(2) == [([1, 1], 1)]
    assert snap.errors_at(1) == [("division by zero", 1)]


def test_updates_through_and_between_for_importers() -> None:
    arr = Arrangement(DESC_INT, [0])
    arr.insert([([1, 1], 0, 1), ([2, 2], 2, 1)], Frontier.at(3))
    arr.insert([([3, 3], 3, 1)], Frontier.at(5))
    snap = arr.snapshot()
    data, _ = snap.updates_through(2)
    assert sorted(data.rows()) == [(1, 1, 2, 1), (2, 2, 2, 1)]
    data, _ = snap.updates_between(3, Frontier.at(5))
    assert data.rows() == [(3, 3, 3, 1)]
    arr.compact(Frontier.at(3))
    arr.merge_all()
    with pytest.raises(NotReadableError):
        arr.snapshot().updates_between(3, Frontier.at(5))
    with pytest.raises(NotReadableError):
        snap.updates_between(3, Frontier.at(6))


def test_lookup_batched_across_keys_and_batches() -> None:
    arr = Arrangement(DESC_STR, [0, 1])
    for t in range(20):
        arr.insert([([f"k{t % 5}", t % 3, 1.0], t, 1)], Frontier.at(t + 1))
    snap = arr.snapshot()
    found = snap.lookup([["k1", 1], ["k2", 2], ["k9", 0], [None, 1]], 19)
    want = [r for r, _ in snap.read_rows(19) if (r[0], r[1]) in {("k1", 1), ("k2", 2)}]
    assert sorted(r[:-1] for r in found.rows()) == sorted(tuple(r) for r in want)
    with pytest.raises(InputError):
        snap.lookup([["k1"]], 19)


def test_snapshot_read_on_another_thread_while_writer_merges() -> None:
    import threading

    arr = Arrangement(DESC_INT, [0])
    arr.insert([([k, k], 0, 1) for k in range(50)], Frontier.at(1))
    snap = arr.snapshot()
    expected = snap.read_rows(0)
    taken = threading.Event()
    results: list[object] = []

    def reader() -> None:
        taken.set()
        for _ in range(20):
            results.append(
                snap.read_rows(0) == expected and snap.lookup_rows([[3]], 0) == [([3, 3], 1)]
            )

    thread = threading.Thread(target=reader)
    thread.start()
    taken.wait()
    for t in range(1, 40):
        arr.insert([([t % 50, t % 50], t, -1)], Frontier.at(t + 1))
        arr.compact(Frontier.at(t))
    arr.merge_all()
    thread.join()
    assert results and all(results)
    assert arr.snapshot().lookup_rows([[3]], 39) == []


def test_closed_arrangement_refuses_updates() -> None:
    arr = Arrangement(DESC_INT, [0])
    arr.insert([([1, 1], 0, 1)], Frontier.empty())
    arr.advance_upper(Frontier.empty())
    with pytest.raises(InputError, match="closed"):
        arr.insert([([1, 1], 5, 1)], Frontier.empty())
    assert arr.snapshot().read_rows(7) == [([1, 1], 1)]


DESC_FLOAT = RelationDesc(["k", "v"], [ColumnType("float"), ColumnType("int")])
_float_keys = st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5, -2.0, float("nan"),
                                                    float("inf")]))


@settings(max_examples=examples(60), deadline=None)
@given(
    which=st.sampled_from(["int", "str", "float"]),
    data=st.data(),
)
def test_lookup_rows_each_is_each_keys_lookup_rows(which: str, data: st.DataObject) -> None:
    """`lookup_rows_each` (many keys at once: `_lookup_each_single` on a one-column key) gives
    each key what `lookup_rows([key])` gives, over random histories — duplicates, NULL keys,
    absent keys, NaN (equal to NaN) and -0.0 (equal to 0.0, kept apart as a row), several
    batches and times, compactions and merges."""
    desc, rows, keys = {
        "int": (DESC_INT, rows_int, keys_int),
        "str": (DESC_STR, rows_str, st.one_of(st.none(), st.sampled_from(["a", "b", "ü", "",
                                                                            "absent"]))),
        "float": (DESC_FLOAT, st.tuples(_float_keys, st.integers(0, 2)).map(list),
                  _float_keys),
    }[which]
    ops = data.draw(scripts(rows))
    for snap, _ in replay(desc, [0], ops):
        since, upper = snap.since.time, snap.upper.time
        assert since is not None and upper is not None
        for t in range(since, upper):
            probe = [[k] for k in data.draw(st.lists(keys, min_size=1, max_size=12))]
            got = snap.lookup_rows_each(probe, t)
            want = [snap.lookup_rows([k], t) for k in probe]
            assert repr(got) == repr(want), (probe, t)  # repr: NaN and -0.0 compared exactly
