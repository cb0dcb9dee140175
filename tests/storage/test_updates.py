"""The update-table format: conversion, validation and consolidation."""

from __future__ import annotations

import re
from collections import Counter

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import ColumnType, RelationDesc
from twofold.storage import (
    InvalidUpdates,
    SchemaMismatch,
    consolidate,
    to_tuples,
    to_update_table,
    update_schema,
)
from twofold.testing.profiles import examples

from .helpers import DESC

ALL = RelationDesc(
    names=["i", "f", "s", "b", "o"],
    types=[ColumnType("int"), ColumnType("float"), ColumnType("str"), ColumnType("bytes"),
           ColumnType("bool", nullable=False)],
)


def test_type_mapping() -> None:
    schema = update_schema(ALL)
    assert [f.type for f in schema] == [
        pa.int64(), pa.float64(), pa.large_string(), pa.large_binary(), pa.bool_(),
        pa.uint64(), pa.int64(),
    ]
    assert [f.nullable for f in schema] == [True, True, True, True, False, False, False]


def test_tuples_round_trip() -> None:
    updates = [([1, 1.5, "a", b"x", True], 3, 2), ([None, None, None, None, False], 4, -1)]
    table = to_update_table(updates, ALL)
    assert table.schema == update_schema(ALL)
    assert to_tuples(table) == updates


def test_int_feeds_float_column() -> None:
    table = to_update_table([([1, 2, "a", b"", True], 0, 1)], ALL)
    assert to_tuples(table)[0][0][1] == 2.0


def test_arrow_polars_and_record_batch_inputs_agree() -> None:
    data = {"s": ["a", None], "k": [1, 2], "time": [5, 6], "diff": [1, -1]}  # any column order
    arrow = pa.table({"s": pa.array(data["s"], pa.string()), "k": pa.array(data["k"], pa.int32()),
                      "time": pa.array(data["time"], pa.int64()),
                      "diff": pa.array(data["diff"], pa.int8())})
    expected = [([1, "a"], 5, 1), ([2, None], 6, -1)]
    for source in (arrow, arrow.to_batches()[0], pl.DataFrame(data)):
        table = to_update_table(source, DESC)
        assert table.schema == update_schema(DESC)
        assert to_tuples(table) == expected


@pytest.mark.parametrize(
    ("updates", "error", "needle"),
    [
        ([([1], 0, 1)], SchemaMismatch, "2 values"),
        ([(["x", "a"], 0, 1)], SchemaMismatch, "'k' is int"),
        ([([True, "a"], 0, 1)], SchemaMismatch, "'k' is int"),
        ([([1.5, "a"], 0, 1)], SchemaMismatch, "'k' is int"),
        ([([None, "a"], 0, 1)], SchemaMismatch, "'k' is not nullable"),
        ([([1, 2], 0, 1)], SchemaMismatch, "'s' is str"),
        ([([1, "a"], 0, 0)], InvalidUpdates, "non-zero"),
        ([([1, "a"], -1, 1)], InvalidUpdates, "times"),
        ([([1, "a"], 0)], InvalidUpdates, "triples"),
        ("not updates", InvalidUpdates, "sequence"),
        (pa.table({"k": [1], "time": pa.array([0], pa.uint64()), "diff": [1]}), SchemaMismatch,
         "missing ['s']"),
        (pa.table({"k": [1], "s": ["a"], "x": [1], "time": [0], "diff": [1]}), SchemaMismatch,
         "unexpected ['x']"),
        (pa.table({"k": [1], "s": ["a"], "time": [None], "diff": [1]},
                  schema=pa.schema([("k", pa.int64()), ("s", pa.string()),
                                    ("time", pa.int64()), ("diff", pa.int64())])),
         SchemaMismatch, "'time' is not nullable"),
        (pa.table({"k": [1], "s": ["a"], "time": [0.0], "diff": [1]}), SchemaMismatch,
         "'time' must be an integer"),
        (pa.table({"k": pa.array([2**64 - 1], pa.uint64()), "s": ["a"], "time": [0], "diff": [1]}),
         SchemaMismatch, "'k' cannot be stored"),
    ],
)
def test_bad_input_is_a_typed_error(updates: object, error: type[Exception], needle: str) -> None:
    with pytest.raises(error, match=re.escape(needle)):
        to_update_table(updates, DESC)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("k", "time", "diff", "error", "needle"),
    [
        ([1, None], [0, 0], [1, 1], SchemaMismatch, "'k' is not nullable but holds 1 NULLs"),
        ([1, 2], [0, None], [1, 1], SchemaMismatch, "'time' is not nullable"),
        ([1, 2], [0, 0], [1, None], SchemaMismatch, "'diff' is not nullable"),
        ([1, 2], [0, 0], [1, 0], InvalidUpdates, "non-zero"),
    ],
)
def test_a_table_of_the_canonical_schema_is_still_checked(
        k: list[int | None], time: list[int | None], diff: list[int | None],
        error: type[Exception], needle: str) -> None:
    # The schema says not nullable; the arrays may still hold NULLs (and zero diffs).
    table = pa.Table.from_arrays(
        [pa.array(k, pa.int64()), pa.array(["a", None]), pa.array(time, pa.uint64()),
         pa.array(diff, pa.int64())], schema=update_schema(DESC))
    with pytest.raises(error, match=re.escape(needle)):
        to_update_table(table, DESC)
    fine = pa.Table.from_arrays(
        [pa.array([1, 2], pa.int64()), pa.array(["a", None]), pa.array([0, 0], pa.uint64()),
         pa.array([1, -1], pa.int64())], schema=update_schema(DESC))
    assert to_update_table(fine, DESC) is fine


def test_dictionary_columns_are_decoded() -> None:
    frame = pl.DataFrame({"k": [1], "s": ["a"], "time": [0], "diff": [1]}).with_columns(
        pl.col("s").cast(pl.Categorical)
    )
    assert to_tuples(to_update_table(frame, DESC)) == [([1, "a"], 0, 1)]


def test_rows_must_be_sequences() -> None:
    with pytest.raises(SchemaMismatch, match="list of scalars"):
        to_update_table([(1, 0, 1)], DESC)  # type: ignore[list-item]


def test_reserved_and_duplicate_column_names() -> None:
    with pytest.raises(SchemaMismatch, match="reserved"):
        update_schema(RelationDesc(names=["time"], types=[ColumnType("int")]))
    with pytest.raises(SchemaMismatch, match="duplicate"):
        update_schema(RelationDesc(names=["a", "a"], types=[ColumnType("int")] * 2))


def test_zero_column_relation() -> None:
    desc = RelationDesc(names=[], types=[])
    table = to_update_table([([], 1, 2), ([], 1, -1), ([], 2, 1)], desc)
    assert sorted(to_tuples(consolidate(table))) == [([], 1, 1), ([], 2, 1)]
    assert to_tuples(consolidate(table, as_of=5)) == [([], 5, 2)]


update_lists = st.lists(
    st.tuples(
        st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None])),
        st.integers(0, 5),
        st.integers(-2, 2).filter(bool),
    ),
    max_size=30,
)


@settings(max_examples=examples(60))
@given(update_lists, st.integers(0, 6))
def test_consolidate_matches_reference(updates: list, as_of: int) -> None:
    table = to_update_table([(list(r), t, d) for r, t, d in updates], DESC)
    by_time: Counter[tuple] = Counter()
    at: Counter[tuple] = Counter()
    for row, t, d in updates:
        by_time[(row, t)] += d
        if t <= as_of:
            at[row] += d
    got = Counter({(tuple(r), t): d for r, t, d in to_tuples(consolidate(table))})
    assert got == Counter({k: v for k, v in by_time.items() if v})
    snap = to_tuples(consolidate(table, as_of=as_of))
    assert all(t == as_of for _, t, _ in snap)
    assert Counter({tuple(r): d for r, _, d in snap}) == Counter({k: v for k, v in at.items() if v})
    assert len(snap) == len({tuple(r) for r, _, _ in snap})


FLOATS = RelationDesc(names=["f", "s"], types=[ColumnType("float"), ColumnType("str")])


@settings(max_examples=examples(60))
@given(st.lists(st.tuples(st.sampled_from([0.5, float("nan"), None, -1.5]),
                          st.sampled_from(["a", None]), st.integers(-2, 2).filter(bool)),
                max_size=30))
def test_consolidate_groups_nulls_and_nans(updates: list) -> None:
    # NaN never equals itself, so these rows take the exact (polars group-by) path; NaNs group
    # together, as in SQL GROUP BY.
    table = to_update_table([([f, s], 0, d) for f, s, d in updates], FLOATS)
    expected: Counter[tuple] = Counter()
    for f, s, d in updates:
        expected[(repr(f), s)] += d
    got = Counter({(repr(r[0]), r[1]): d for r, _, d in to_tuples(consolidate(table))})
    assert got == Counter({k: v for k, v in expected.items() if v})
