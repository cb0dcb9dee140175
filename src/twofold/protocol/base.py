"""Base classes for protocol values: frozen `msgspec.Struct`s.

`Value` is a plain immutable value; `Tagged` is a member of a tagged union, encoded as a map whose
`"type"` key is the class name. Unknown fields are refused on decode, so a misspelt or foreign
field is a `DecodeError` rather than silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any, Final

import msgspec

Scalar = None | bool | int | float | str | bytes
"""A row value: SQL NULL is `None`; ints are 64-bit signed."""

# On the wire a row is a MessagePack array of scalars. msgspec cannot decode a union holding both
# `str` and `bytes`, so rows are declared `list[Any]` to the decoder and checked by `check_rows`
# (one C-speed pass over the values' types) in the `__post_init__` of every value holding rows.
Row = list[Any]

SCALAR_PY_TYPES: Final = frozenset({type(None), bool, int, float, str, bytes})
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
_is_int: Final = int.__instancecheck__
_FEW: Final = 8
"""`check_rows` checks a single row of at most this many values one value at a time."""


def check_scalar(value: object, what: str) -> None:
    """Raise `TypeError`/`ValueError` unless `value` is a protocol scalar."""
    if type(value) not in SCALAR_PY_TYPES:
        raise TypeError(f"{what}: {type(value).__name__} is not a scalar type")
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"{what}: int {value} is outside the 64-bit signed range")


def check_rows(rows: Iterable[list[Any]], what: str) -> None:
    """Raise `TypeError` unless every value of every row is a protocol scalar, `ValueError` if
    an int lies outside the 64-bit signed range."""
    rows = rows if isinstance(rows, list) else list(rows)
    if len(rows) == 1 and type(rows[0]) is list and len(rows[0]) <= _FEW:
        # One short row (a point lookup's key, or its answer): value by value is cheaper than
        # the set and filter passes below. Anything unusual falls through to them, which then
        # raise the precise error.
        for value in rows[0]:
            t = type(value)
            if t is int:
                if not INT64_MIN <= value <= INT64_MAX:
                    break
            elif t not in SCALAR_PY_TYPES:
                break
        else:
            return
    seen = set(map(type, chain.from_iterable(rows)))
    if not seen <= SCALAR_PY_TYPES:
        bad = sorted(t.__name__ for t in seen - SCALAR_PY_TYPES)
        raise TypeError(f"{what}: rows may hold only scalars, found {', '.join(bad)}")
    if int in seen:
        # A second pass only when ints are present; MessagePack would carry up to 2**64 - 1,
        # but the engine's columns are int64, so the range is checked at the boundary.
        # C-level iteration only (no Python frame per value); bools pass as 0 and 1.
        ints = list(filter(_is_int, chain.from_iterable(rows)))
        lo, hi = min(ints), max(ints)
        if lo < INT64_MIN or hi > INT64_MAX:
            bad_int = lo if lo < INT64_MIN else hi
            raise ValueError(f"{what}: int {bad_int} is outside the 64-bit signed range")


class Value(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An immutable protocol value with value equality."""


class Tagged(Value, frozen=True, tag=True, tag_field="type"):
    """A variant of a tagged union; its wire tag is the class name."""
