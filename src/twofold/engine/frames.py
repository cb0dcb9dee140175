"""Columnar update frames: the one data layout every engine module speaks.

An *update frame* is a polars `DataFrame` whose first columns are the relation's columns, named
`c0 .. c{n-1}` (relation names may repeat, e.g. after a join, so they never name frame columns),
typed by `DTYPES`, followed by `time` (UInt64) and `diff` (Int64). A *collection frame* is the
same without `time`: a consolidated collection at one time. Error frames have one `error`
(String) column in place of the relation columns.

Invariant protected here: every frame that leaves this module has exactly the declared schema,
so hashing, joining and comparing frames of one relation never depends on where they came from.
Bad input raises `InputError` naming the column and loses nothing (nothing is partially applied).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import polars as pl
import pyarrow as pa

from twofold.engine.errors import InputError
from twofold.protocol import ColumnType, RelationDesc

TIME: Final = "time"
DIFF: Final = "diff"
ERROR: Final = "error"

DTYPES: Final[dict[str, pl.DataType]] = {
    "bool": pl.Boolean(),
    "int": pl.Int64(),
    "float": pl.Float64(),
    "str": pl.String(),
    "bytes": pl.Binary(),
}


def names(arity: int) -> list[str]:
    """Frame column names of a relation of `arity` columns."""
    return [f"c{i}" for i in range(arity)]


def schema(types: Sequence[ColumnType]) -> dict[str, pl.DataType]:
    """The collection-frame schema (no `time`/`diff`) of a relation's column types."""
    return {f"c{i}": DTYPES[t.scalar] for i, t in enumerate(types)}


def update_schema(types: Sequence[ColumnType]) -> dict[str, pl.DataType]:
    return {**schema(types), TIME: pl.UInt64(), DIFF: pl.Int64()}


def error_schema(with_time: bool = True) -> dict[str, pl.DataType]:
    if with_time:
        return {ERROR: pl.String(), TIME: pl.UInt64(), DIFF: pl.Int64()}
    return {ERROR: pl.String(), DIFF: pl.Int64()}


def empty(sch: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=sch)


def updates_from_rows(
    desc: RelationDesc, updates: Iterable[tuple[Sequence[Any], int, int]]
) -> pl.DataFrame:
    """An update frame from `(row, time, diff)` tuples; `InputError` on malformed tuples."""
    updates = list(updates)
    sch = update_schema(desc.types)
    if not updates:
        return empty(sch)
    arity = desc.arity
    records: list[list[Any]] = []
    for i, upd in enumerate(updates):
        try:
            row, time, diff = upd
        except (TypeError, ValueError):
            raise InputError(f"update {i} is not a (row, time, diff) tuple: {upd!r}") from None
        if len(row) != arity:
            raise InputError(f"update {i}: row {row!r} has {len(row)} columns, expected {arity}")
        records.append([*row, time, diff])
    try:
        return pl.DataFrame(records, schema=sch, orient="row", strict=True)
    except Exception as e:  # polars raises several types for mistyped values
        raise InputError(f"updates do not match {desc.names}: {e}") from None


def updates_from_arrow(desc: RelationDesc, data: pa.Table | pa.RecordBatch) -> pl.DataFrame:
    """An update frame from an Arrow table with the relation's columns (in order) plus `time`
    (uint64) and `diff` (int64) columns."""
    cols = list(data.schema.names)
    if TIME not in cols or DIFF not in cols:
        raise InputError(f"updates need `time` and `diff` columns, got {cols}")
    rel_cols = [c for c in cols if c not in (TIME, DIFF)]
    if len(rel_cols) != desc.arity:
        raise InputError(f"updates have relation columns {rel_cols}, expected {desc.names}")
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    frame = pl.from_arrow(data)
    assert isinstance(frame, pl.DataFrame)
    frame = frame.select([*rel_cols, TIME, DIFF])
    frame.columns = [*names(desc.arity), TIME, DIFF]
    try:
        return frame.cast(update_schema(desc.types), strict=True)  # type: ignore[arg-type]
    except Exception as e:
        raise InputError(f"updates do not match {desc.names}: {e}") from None


def to_arrow(frame: pl.DataFrame, desc: RelationDesc) -> pa.Table:
    """An update or collection frame as Arrow, with the relation's column names."""
    out = frame.rename({f"c{i}": n for i, n in enumerate(desc.names)})
    return out.to_arrow()


def frame_from_collection(
    types: Sequence[ColumnType], rows: Iterable[tuple[Sequence[Any], int]]
) -> pl.DataFrame:
    """A collection frame (`c*`, `diff`) from `(row, diff)` pairs."""
    sch = {**schema(types), DIFF: pl.Int64()}
    records = [[*row, d] for row, d in rows]
    if not records:
        return empty(sch)
    try:
        return pl.DataFrame(records, schema=sch, orient="row", strict=True)
    except Exception as e:
        raise InputError(f"rows do not match their types: {e}") from None


def rows_of(frame: pl.DataFrame, cols: Sequence[str]) -> list[list[Any]]:
    """The `cols` of each row as Python lists."""
    if not cols:
        return [[] for _ in range(frame.height)]
    return [list(r) for r in frame.select(cols).iter_rows()]


def advance_times(frame: pl.DataFrame, since: int) -> pl.DataFrame:
    """Times before `since` become `since` (logical compaction)."""
    if frame.height == 0:
        return frame
    return frame.with_columns(
        pl.when(pl.col(TIME) < since)
        .then(pl.lit(since, pl.UInt64))
        .otherwise(pl.col(TIME))
        .alias(TIME)
    )
