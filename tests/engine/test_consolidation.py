"""Consolidation and hashing: exact regardless of hash collisions; scalar and vector row
hashes agree (lookups depend on it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine.consolidation import consolidate, consolidate_sorted
from twofold.engine.hashing import row_hash, scalar_row_hash
from twofold.testing.profiles import examples

values = st.tuples(
    st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    st.one_of(st.none(), st.text(max_size=3)),
    st.one_of(st.none(), st.floats()),
    st.one_of(st.none(), st.booleans()),
    st.one_of(st.none(), st.binary(max_size=3)),
)
SCHEMA = {"c0": pl.Int64, "c1": pl.String, "c2": pl.Float64, "c3": pl.Boolean, "c4": pl.Binary}


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(values, max_size=10))
def test_scalar_and_vector_row_hashes_agree(rows: list[tuple[Any, ...]]) -> None:
    frame = pl.DataFrame(rows, schema=SCHEMA, orient="row")
    hashes = row_hash(frame, list(SCHEMA))
    for _ in range(2):  # the second time, string and bytes hashes come from the cache
        for i, row in enumerate(rows):
            assert scalar_row_hash(row, list(SCHEMA.values())) == int(hashes[i])


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2)), max_size=30), st.integers(1, 3))
def test_consolidation_is_exact_even_when_every_code_collides(
    rows: list[tuple[int, int]], distinct_codes: int
) -> None:
    frame = pl.DataFrame(
        {"c0": [r for r, _ in rows], "diff": [d for _, d in rows]},
        schema={"c0": pl.Int64, "diff": pl.Int64},
    )
    # Codes that collide across distinct rows (only `distinct_codes` values for 4 rows).
    codes = np.array([r % distinct_codes for r, _ in rows], dtype=np.uint64)
    hashes = np.array([r * 7919 + 1 for r, _ in rows], dtype=np.uint64)
    out, out_codes, out_hashes = consolidate_sorted(frame, codes, hashes)
    # Codes and hashes stay aligned with the rows they belong to, and sorted by code.
    ids = out.get_column("c0").to_list()
    assert out_codes.tolist() == [r % distinct_codes for r in ids]
    assert out_hashes.tolist() == [r * 7919 + 1 for r in ids]
    assert out_codes.tolist() == sorted(out_codes.tolist())
    want = Counter()
    for r, d in rows:
        want[r] += d
    assert sorted(out.rows()) == sorted((r, d) for r, d in want.items() if d)
    assert sorted(consolidate(frame, ["c0"]).rows()) == sorted(out.rows())


def test_every_nan_and_both_zeros_hash_alike_in_scalar_and_vector_form() -> None:
    # NaNs with other payloads and signs, as arithmetic or I/O may produce them.
    bits = np.array(
        [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF8DEADBEEF0001],
        dtype=np.uint64,
    )
    nans = [float(x) for x in bits.view(np.float64)]
    values = [*nans, 0.0, -0.0]
    frame = pl.DataFrame({"c": values}, schema={"c": pl.Float64})
    hashes = row_hash(frame, ["c"])
    scalar = [scalar_row_hash([v], [pl.Float64]) for v in values]
    assert scalar == [int(h) for h in hashes]
    assert len(set(scalar[: len(nans)])) == 1  # one NaN
    assert scalar[-1] == scalar[-2]  # -0.0 = 0.0
