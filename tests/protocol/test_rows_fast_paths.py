"""`check_rows`' one-short-row fast path and `engine_peek_rows` (the replica's unchecked
`PeekRows` for the engine's own results) change nothing that can be observed: the same rows are
accepted, the same are refused with the same error, and decoding from the wire still checks."""

from itertools import chain
from typing import Any
from uuid import UUID

import msgspec
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from twofold.protocol import DecodeError, PeekResponse, PeekRows
from twofold.protocol.base import INT64_MAX, INT64_MIN, SCALAR_PY_TYPES, check_rows
from twofold.protocol.codec import decode_response, encode
from twofold.protocol.responses import engine_peek_rows


def reference(rows: list[list[Any]], what: str) -> None:
    """`check_rows` as it was before its fast path: the set and filter passes only."""
    seen = set(map(type, chain.from_iterable(rows)))
    if not seen <= SCALAR_PY_TYPES:
        bad = sorted(t.__name__ for t in seen - SCALAR_PY_TYPES)
        raise TypeError(f"{what}: rows may hold only scalars, found {', '.join(bad)}")
    ints = [v for v in chain.from_iterable(rows) if isinstance(v, int)]
    if ints and (min(ints) < INT64_MIN or max(ints) > INT64_MAX):
        lo, hi = min(ints), max(ints)
        bad_int = lo if lo < INT64_MIN else hi
        raise ValueError(f"{what}: int {bad_int} is outside the 64-bit signed range")


def verdict(check: Any, rows: list[list[Any]]) -> tuple[str, str] | None:
    try:
        check(rows, "R")
    except (TypeError, ValueError) as e:
        return type(e).__name__, str(e)
    return None


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=INT64_MIN, max_value=INT64_MAX),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.binary(max_size=5),
)
anything = st.one_of(
    scalars,
    st.integers(min_value=INT64_MAX + 1, max_value=2**70),
    st.integers(min_value=-(2**70), max_value=INT64_MIN - 1),
    st.builds(np.int64, st.integers(min_value=-5, max_value=5)),
    st.lists(st.integers(), max_size=2),
    st.tuples(st.integers()),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
rows_of = st.lists(st.lists(anything, max_size=10), min_size=0, max_size=3)


@given(rows_of)
def test_check_rows_matches_the_plain_passes(rows: list[list[Any]]) -> None:
    assert verdict(check_rows, rows) == verdict(reference, rows)


@given(st.lists(anything, min_size=1, max_size=8))
def test_check_rows_one_short_row_matches_the_plain_passes(row: list[Any]) -> None:
    assert verdict(check_rows, [row]) == verdict(reference, [row])


@given(st.lists(st.tuples(st.lists(scalars, max_size=6), st.integers(1, 5)), max_size=4))
def test_engine_peek_rows_is_peek_rows(rows: list[tuple[list[Any], int]]) -> None:
    fast = engine_peek_rows(rows)
    assert type(fast) is PeekRows
    assert fast.rows is rows
    resp = PeekResponse(UUID(int=7), fast)
    assert encode(resp) == encode(PeekResponse(UUID(int=7), PeekRows(rows)))
    back = decode_response(encode(resp))
    assert isinstance(back, PeekResponse) and isinstance(back.result, PeekRows)
    assert msgspec.msgpack.encode(back.result.rows) == msgspec.msgpack.encode(rows)


@pytest.mark.parametrize("bad", [2**63, 2**64 - 1])  # MessagePack has no ints below -2**63
def test_decoded_peek_rows_are_still_checked(bad: int) -> None:
    wire = {"type": "PeekResponse", "uuid": bytes(16),
            "result": {"type": "PeekRows", "rows": [[[bad], 1]]}}  # fmt: skip
    with pytest.raises(DecodeError, match="64-bit"):
        decode_response(msgspec.msgpack.encode(wire))
