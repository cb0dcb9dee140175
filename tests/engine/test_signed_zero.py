"""Consolidation keeps stored float values exactly: -0.0 and 0.0 are separate records (merging
them would turn one value into the other, visible as PostgreSQL's `-0`), every NaN is one value.
Checked by bits over random update histories through the engine's consolidation, its batches
and merges, and storage's consolidation; key hashes still treat -0.0 = 0.0."""

from __future__ import annotations

import math
import struct
from collections import Counter
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine import Arrangement
from twofold.engine.batch import build_batch, merge_batches
from twofold.engine.consolidation import consolidate
from twofold.engine.hashing import row_and_key_hash, row_hash
from twofold.engine.ordering import order_frame, row_key
from twofold.protocol import ColumnType, Frontier, OrderKey, RelationDesc
from twofold.storage.updates import consolidate as storage_consolidate
from twofold.testing.profiles import examples

_ODD_NAN = float(np.array([0x7FF8DEADBEEF0001], dtype=np.uint64).view(np.float64)[0])
_NEG_NAN = float(np.array([0xFFF8000000000000], dtype=np.uint64).view(np.float64)[0])
FLOATS = [-0.0, 0.0, math.nan, _ODD_NAN, _NEG_NAN, math.inf, -math.inf, 1.5, None]


def bits(v: Any) -> Any:
    """A float's identity: its bits, every NaN as one."""
    if isinstance(v, float):
        return "nan" if math.isnan(v) else struct.pack("<d", v)
    return v


def by_bits(rows: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], int]:
    """(*values, diff) rows summed by the bits of their values, zero sums dropped."""
    out: Counter[tuple[Any, ...]] = Counter()
    for *vals, d in rows:
        out[tuple(bits(v) for v in vals)] += d
    return {k: d for k, d in out.items() if d}


def test_delete_then_insert_of_the_other_zero_reads_back_the_other_zero() -> None:
    frame = pl.DataFrame({"c0": [0, 0, 0], "c1": [-0.0, -0.0, 0.0], "diff": [1, -1, 1]})
    (row,) = consolidate(frame, ["c0", "c1"]).rows()
    assert math.copysign(1.0, row[1]) == 1.0
    timed = frame.with_columns(pl.Series("time", [1, 1, 1], pl.UInt64)).select(
        "c0", "c1", "time", "diff")
    (row,) = build_batch(timed, ["c0"], 0, None, 0).data.rows()
    assert math.copysign(1.0, row[1]) == 1.0
    (row,) = storage_consolidate(timed.to_arrow()).to_pylist()
    assert math.copysign(1.0, row["c1"]) == 1.0


def test_key_hashes_match_zeros_row_hashes_do_not() -> None:
    frame = pl.DataFrame({"c0": [-0.0, 0.0, math.nan, _ODD_NAN]})
    value = row_hash(frame, ["c0"])
    exact = row_hash(frame, ["c0"], bits=True)
    assert value[0] == value[1] and exact[0] != exact[1]
    assert value[2] == value[3] and exact[2] == exact[3]  # one NaN either way
    rows, keys = row_and_key_hash(frame, ["c0"], ["c0"])
    assert (rows == exact).all() and (keys == value).all()


updates = st.lists(
    st.tuples(st.integers(0, 1), st.sampled_from(FLOATS), st.integers(-2, 2), st.integers(1, 4)),
    max_size=40,
)


@settings(max_examples=examples(150), deadline=None)
@given(updates)
def test_consolidation_keeps_float_bits_at_every_time(
    history: list[tuple[int, float | None, int, int]],
) -> None:
    frame = pl.DataFrame(
        {"c0": [k for k, _, _, _ in history], "c1": [v for _, v, _, _ in history],
         "time": [t for _, _, _, t in history], "diff": [d for _, _, d, _ in history]},
        schema={"c0": pl.Int64, "c1": pl.Float64, "time": pl.UInt64, "diff": pl.Int64},
    )
    # Per-time batches (as a spine holds them), keyed by the float column or by the int one.
    for key in (["c1"], ["c0"]):
        batches = [
            build_batch(frame.filter(pl.col("time") == t), key, t, t + 1, 0) for t in range(1, 5)
        ]
        one = build_batch(frame, key, 1, 5, 0)
        for t in range(1, 5):
            want = by_bits([(k, v, d) for k, v, d, u in history if u <= t])
            upto = frame.filter(pl.col("time") <= t)
            got = consolidate(upto, ["c0", "c1"]).rows()
            assert by_bits(got) == want
            assert all(d != 0 for *_, d in got)
            assert len(got) == len(want)  # one record per distinct value (complete merge)
            merged = merge_batches(batches[:t], since=t).data
            assert merged.get_column("time").max() in (None, t)
            assert by_bits(merged.drop("time").rows()) == want
            assert merged.height == len(want)
            seen = one.data.filter(pl.col("time") <= t).drop("time")
            assert by_bits(consolidate(seen, ["c0", "c1"]).rows()) == want
            table = upto.to_arrow().cast(
                pa.schema([("c0", pa.int64()), ("c1", pa.float64()), ("time", pa.uint64()),
                           ("diff", pa.int64())]))
            stored = storage_consolidate(table, as_of=t).to_pylist()
            assert by_bits([(r["c0"], r["c1"], r["diff"]) for r in stored]) == want
            assert len(stored) == len(want)


def _signs(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [tuple(bits(v) for v in r) for r in rows]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.sampled_from(FLOATS)), min_size=1, max_size=12),
       st.randoms(use_true_random=False))
def test_the_row_order_is_a_function_of_the_rows(
    rows: list[tuple[int, float | None]], rnd: Any,
) -> None:
    # -0.0 and 0.0 compare equal, but they are different stored values: which comes first
    # (and so which a LIMIT keeps) must not depend on the order they were held in.
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    frames = [pl.DataFrame({"c0": [k for k, _ in rs], "c1": [x for _, x in rs],
                            "diff": [1] * len(rs)},
                           schema={"c0": pl.Int64, "c1": pl.Float64, "diff": pl.Int64})
              for rs in (rows, shuffled)]
    for order_by in ([], [OrderKey(1)], [OrderKey(1, desc=True)],
                     [OrderKey(1, desc=True, nulls_last=False)]):
        a, b = (order_frame(f, order_by, 2) for f in frames)
        assert _signs(a.rows()) == _signs(b.rows())
    # Every column ascending: NULLs last, NaN after every number, -0.0 right before 0.0.
    keyed = sorted(rows, key=row_key)
    for f in frames:
        assert _signs(order_frame(f, [], 2).select("c0", "c1").rows()) == _signs(keyed)


def test_row_key_orders_floats_as_postgresql_and_zeros_by_sign() -> None:
    values = [None, math.nan, math.inf, 1.0, 0.0, -0.0, -1.0, -math.inf]
    got = [r[0] for r in sorted([(v,) for v in values], key=row_key)]
    assert _signs([(v,) for v in got]) == _signs(
        [(v,) for v in [-math.inf, -1.0, -0.0, 0.0, 1.0, math.inf, math.nan, None]])


def test_lookup_rows_order_zeros_by_sign_whatever_the_batches() -> None:
    desc = RelationDesc(["k", "x"], [ColumnType("int"), ColumnType("float")])
    for first, second in ((-0.0, 0.0), (0.0, -0.0)):
        arr = Arrangement(desc, [0])
        arr.insert([([1, first], 0, 1), ([2, 1.0], 0, 1)], Frontier.at(1))
        arr.insert([([1, second], 1, 1), ([2, -0.0], 1, 1)], Frontier.at(2))
        snap = arr.snapshot()
        want = _signs([(1, -0.0), (1, 0.0)])
        assert _signs([tuple(r) for r, _ in snap.lookup_rows([[1]], 1)]) == want
        many = [[k] for k in range(1, 20)]  # the vectorised path
        assert _signs([tuple(r) for r, _ in snap.lookup_rows(many, 1)])[:2] == want
        assert _signs([tuple(r) for r, _ in snap.read_rows(1)])[:2] == want
