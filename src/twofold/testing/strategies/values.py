"""Strategies for identity and time (`GlobalId`s, timestamps, frontiers) and for scalars,
rows, diffs and relation types (`protocol/ids.py`, `frontier.py`, `relation.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from twofold.protocol import (
    MAX_TIME,
    SCALAR_TYPES,
    ColumnType,
    Frontier,
    GlobalId,
    IdKind,
    RelationDesc,
    Row,
    Scalar,
    ScalarType,
)
from twofold.testing.strategies._common import (
    INT64_MAX,
    INT64_MIN,
    S,
    _memo,
    _names,
    _small_lists,
)

# --- identity and time -----------------------------------------------------------------------


@_memo
def timestamps(min_value: int = 0, max_value: int = MAX_TIME) -> S[int]:
    """Timestamps in `[min_value, max_value]` (within `[0, 2**64)`), biased towards small values
    and the edges of the range, where off-by-one bugs live."""
    if not 0 <= min_value <= max_value <= MAX_TIME:
        raise ValueError(f"timestamps: need 0 <= {min_value} <= {max_value} <= 2**64 - 1")
    return st.one_of(
        st.integers(min_value, min(max_value, min_value + 16)),
        st.integers(min_value, max_value),
        st.sampled_from(sorted({min_value, max_value, max(min_value, max_value - 1)})),
    )


@_memo
def frontiers(
    min_time: int = 0, max_time: int = MAX_TIME, *, allow_empty: bool = True
) -> S[Frontier]:
    """`Frontier.at(t)` for `t` in `[min_time, max_time]`, and `Frontier.empty()` if allowed."""
    at = timestamps(min_time, max_time).map(Frontier.at)
    return st.one_of(st.just(Frontier.empty()), at) if allow_empty else at


@_memo
def id_numbers() -> S[int]:
    """Numbers of `GlobalId`s, in `[0, 2**64)`, biased towards small ones (so ids collide)."""
    return st.one_of(st.integers(0, 20), st.integers(0, 2**64 - 1))


def global_ids(kinds: Sequence[IdKind] | None = None) -> S[GlobalId]:
    """`GlobalId`s of the given kinds (all four when `None`)."""
    chosen = tuple(IdKind) if kinds is None else tuple(kinds)
    if not chosen:
        raise ValueError("global_ids: need at least one kind")
    return _global_ids(chosen)


@_memo
def _global_ids(kinds: tuple[IdKind, ...]) -> S[GlobalId]:
    return st.builds(GlobalId, st.sampled_from(kinds), id_numbers())


@_memo
def _ids(ids: S[GlobalId] | None) -> S[GlobalId]:
    return global_ids() if ids is None else ids


@_memo
def system_ids() -> S[GlobalId]:
    return global_ids([IdKind.SYSTEM])


@_memo
def introspection_ids() -> S[GlobalId]:
    return global_ids([IdKind.INTROSPECTION])


@_memo
def user_ids() -> S[GlobalId]:
    return global_ids([IdKind.USER])


@_memo
def transient_ids() -> S[GlobalId]:
    return global_ids([IdKind.TRANSIENT])


@_memo
def durable_ids() -> S[GlobalId]:
    """Ids of every kind except transient."""
    return global_ids([IdKind.SYSTEM, IdKind.INTROSPECTION, IdKind.USER])


# --- scalars, rows and relation types ------------------------------------------------------


@_memo
def scalars_of(scalar: ScalarType, *, nullable: bool = True) -> S[Scalar]:
    """Scalars of one `ColumnType` (NULL included when `nullable`). Floats are never NaN."""
    base: S[Any]
    if scalar == "bool":
        base = st.booleans()
    elif scalar == "int":
        base = st.integers(INT64_MIN, INT64_MAX)
    elif scalar == "float":
        base = st.floats(allow_nan=False)
    elif scalar == "str":
        base = st.text(max_size=10)
    elif scalar == "bytes":
        base = st.binary(max_size=10)
    else:
        raise ValueError(f"scalars_of: unknown scalar type {scalar!r}")
    return st.one_of(st.none(), base) if nullable else base


@_memo
def scalars(*, allow_null: bool = True) -> S[Scalar]:
    """Any protocol scalar: `None`, `bool`, 64-bit `int`, non-NaN `float`, `str`, `bytes`."""
    return st.one_of([scalars_of(t, nullable=allow_null) for t in SCALAR_TYPES])


def rows(arity: int | None = None, *, desc: RelationDesc | None = None) -> S[Row]:
    """Rows (lists of scalars): typed by `desc` when given, else of `arity` (0..4 when `None`)
    with columns of any scalar type."""
    if desc is not None:
        return st.tuples(*(scalars_of(c.scalar, nullable=c.nullable) for c in desc.types)).map(list)
    return _untyped_rows(arity)


@_memo
def _untyped_rows(arity: int | None) -> S[Row]:
    if arity is None:
        return _small_lists(scalars(), 4)
    return st.lists(scalars(), min_size=arity, max_size=arity)


@_memo
def diffs() -> S[int]:
    """Non-zero diffs, mostly small."""
    return st.one_of(st.integers(-3, 3), st.integers(INT64_MIN, INT64_MAX)).filter(bool)


@_memo
def updates(arity: int | None = None) -> S[tuple[Row, int]]:
    """`(row, diff)` pairs with a non-zero diff."""
    return st.tuples(rows(arity), diffs())


@_memo
def column_types() -> S[ColumnType]:
    return st.builds(ColumnType, st.sampled_from(SCALAR_TYPES), st.booleans())


def _relation_desc(columns: list[tuple[str, ColumnType]]) -> RelationDesc:
    return RelationDesc(names=[n for n, _ in columns], types=[t for _, t in columns])


@_memo
def relation_descs(min_arity: int = 0, max_arity: int = 4) -> S[RelationDesc]:
    """`RelationDesc`s with `names` and `types` of equal length."""
    columns = st.lists(st.tuples(_names, column_types()), min_size=min_arity, max_size=max_arity)
    return columns.map(_relation_desc)
