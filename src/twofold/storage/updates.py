"""Updates as columnar batches: the one format every storage path speaks.

An *update table* is a `pyarrow.Table` with the relation's columns (named and typed per its
`RelationDesc`), then `time` (uint64) and `diff` (int64). `to_update_table` turns any accepted
input into that canonical form and is the only door into a shard, so every stored batch satisfies:

- the columns are exactly the relation's plus `time` and `diff`, in that order, with the canonical
  Arrow types (`update_schema`), and no NULL in a non-nullable column, `time` or `diff`;
- every `diff` is non-zero.

Accepted inputs: a `pyarrow.Table`/`RecordBatch` or `polars.DataFrame` with those columns (any
column order; integer widths, float widths and string/binary flavours are widened losslessly, and
int columns may feed float columns), or a sequence of `(row, time, diff)` tuples for small inputs
and tests. Type mapping: int->int64, float->float64, str->large_string, bytes->large_binary,
bool->bool. Everything here is vectorised; the tuple form is the only path that touches rows in
Python, once, to transpose them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from twofold.protocol import ColumnType, Frontier, RelationDesc, Row
from twofold.storage.errors import CorruptStorage, InvalidUpdates, SchemaMismatch

TIME: Final = "time"
DIFF: Final = "diff"
SMALL_ROWS: Final = 32
"""Up to this many values, a column is checked as a Python list rather than through numpy."""

ARROW_TYPES: Final[dict[str, pa.DataType]] = {
    "int": pa.int64(),
    "float": pa.float64(),
    "str": pa.large_string(),
    "bytes": pa.large_binary(),
    "bool": pa.bool_(),
}

UpdateTuple: TypeAlias = tuple[Row, int, int]
UpdatesLike: TypeAlias = "pa.Table | pa.RecordBatch | pl.DataFrame | Sequence[UpdateTuple]"


@dataclass(frozen=True, slots=True)
class UpdateBatch:
    """Updates whose times lie in `[lower, upper)`, as an update table. Immutable."""

    lower: Frontier
    upper: Frontier
    updates: pa.Table

    def __len__(self) -> int:
        return int(self.updates.num_rows)

    def to_tuples(self) -> list[UpdateTuple]:
        """The updates as `(row, time, diff)` tuples (for tests and small outputs)."""
        return to_tuples(self.updates)


def _check_column_names(desc: RelationDesc) -> None:
    reserved = {TIME, DIFF} & set(desc.names)
    if reserved:
        raise SchemaMismatch(f"column names {sorted(reserved)} are reserved for update metadata")
    if len(set(desc.names)) != len(desc.names):
        raise SchemaMismatch(f"duplicate column names in {desc.names}")


_SCHEMAS: dict[tuple[tuple[str, ...], tuple[ColumnType, ...]], pa.Schema] = {}


def update_schema(desc: RelationDesc) -> pa.Schema:
    """The canonical Arrow schema of an update table for `desc` (memoised: every append
    validates against it)."""
    key = (tuple(desc.names), tuple(desc.types))
    schema = _SCHEMAS.get(key)
    if schema is None:
        schema = _build_update_schema(desc)
        if len(_SCHEMAS) > 4096:
            _SCHEMAS.clear()
        _SCHEMAS[key] = schema
    return schema


def _build_update_schema(desc: RelationDesc) -> pa.Schema:
    _check_column_names(desc)
    fields = [
        pa.field(name, ARROW_TYPES[ct.scalar], nullable=ct.nullable)
        for name, ct in zip(desc.names, desc.types, strict=True)
    ]
    fields.append(pa.field(TIME, pa.uint64(), nullable=False))
    fields.append(pa.field(DIFF, pa.int64(), nullable=False))
    return pa.schema(fields)


def empty_updates(desc: RelationDesc) -> pa.Table:
    return update_schema(desc).empty_table()


def _kind_accepts(scalar: str, source: pa.DataType) -> bool:
    """May a column of Arrow type `source` feed a column of protocol type `scalar`?"""
    t = pa.types
    if t.is_null(source):
        return True
    if scalar == "int":
        return bool(t.is_integer(source))
    if scalar == "float":
        return bool(t.is_floating(source) or t.is_integer(source))
    if scalar == "str":
        return bool(t.is_string(source) or t.is_large_string(source) or t.is_string_view(source))
    if scalar == "bytes":
        return bool(
            t.is_binary(source) or t.is_large_binary(source) or t.is_binary_view(source)
            or t.is_fixed_size_binary(source)
        )
    return bool(t.is_boolean(source))


def _conform_column(name: str, ct: ColumnType | None, target: pa.DataType,
                    column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Cast `column` to `target`, refusing lossy or cross-kind casts and misplaced NULLs."""
    if pa.types.is_dictionary(column.type):  # e.g. polars categoricals: compare the values
        column = column.cast(column.type.value_type)
    if ct is not None and not _kind_accepts(ct.scalar, column.type):
        raise SchemaMismatch(f"column {name!r} is {ct.scalar} but the input holds {column.type}")
    if ct is None and not pa.types.is_integer(column.type):
        raise SchemaMismatch(f"column {name!r} must be an integer column, got {column.type}")
    if column.type != target:
        try:
            column = column.cast(target, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise SchemaMismatch(f"column {name!r} cannot be stored as {target}: {e}") from None
    if column.null_count and (ct is None or not ct.nullable):
        raise SchemaMismatch(f"column {name!r} is not nullable but holds {column.null_count} NULLs")
    return column


def rows_table(rows: Sequence[Row], desc: RelationDesc) -> pa.Table:
    """Rows (lists of scalars) as an Arrow table of the relation's columns, types inferred
    (`to_update_table` checks them against `desc`)."""
    try:
        arities = set(map(len, rows))
    except TypeError:
        raise SchemaMismatch("each row must be a list of scalars") from None
    if arities - {desc.arity}:
        raise SchemaMismatch(
            f"rows must have {desc.arity} values (columns {desc.names}), found lengths "
            f"{sorted(arities)}"
        )
    columns: dict[str, Any] = {}
    for i, name in enumerate(desc.names):
        try:
            columns[name] = pa.array([row[i] for row in rows])
        except OverflowError:
            bad = next((row[i] for row in rows if type(row[i]) is int
                        and not -(2**63) <= row[i] < 2**63), None)  # fmt: skip
            what = "a value" if bad is None else str(bad)
            raise SchemaMismatch(
                f"column {name!r}: {what} is outside the int64 range [-2**63, 2**63 - 1]"
            ) from None
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise SchemaMismatch(
                f"column {name!r}: values are not of one scalar type: {e}"
            ) from None
    if not columns:  # a zero-column relation still has a row count
        return pa.table({"_": pa.nulls(len(rows))}).drop_columns(["_"])
    return pa.table(columns)


def _from_tuples(updates: Sequence[UpdateTuple], desc: RelationDesc) -> pa.Table:
    if not updates:
        return empty_updates(desc)
    try:
        rows, times, diffs = zip(*updates, strict=True)
    except (TypeError, ValueError):
        raise InvalidUpdates("updates must be (row, time, diff) triples") from None
    table = rows_table(rows, desc)
    try:
        table = table.append_column(TIME, pa.array(times, type=pa.uint64()))
        table = table.append_column(DIFF, pa.array(diffs, type=pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
        raise InvalidUpdates(
            f"times must be ints in [0, 2**64) and diffs 64-bit ints: {e}"
        ) from None
    return table


def to_update_table(updates: UpdatesLike, desc: RelationDesc) -> pa.Table:
    """Validate `updates` against `desc` and return the canonical update table.

    Raises `SchemaMismatch` for missing, extra or mistyped columns and NULLs where none are
    allowed, and `InvalidUpdates` for malformed tuples, NULL times or zero diffs.
    """
    schema = update_schema(desc)
    if isinstance(updates, pl.DataFrame):
        updates = updates.to_arrow()
    if isinstance(updates, pa.RecordBatch):
        updates = pa.Table.from_batches([updates])
    if not isinstance(updates, pa.Table):
        if isinstance(updates, str | bytes) or not isinstance(updates, Sequence):
            raise InvalidUpdates(
                f"updates must be a pyarrow Table/RecordBatch, a polars DataFrame or a sequence of "
                f"(row, time, diff) tuples, got {type(updates).__name__}"
            )
        updates = _from_tuples(updates, desc)
    if updates.schema.equals(schema):  # already canonical (the common case): check values only
        _check_values(updates, desc)
        return updates
    names = set(updates.column_names)
    expected = set(schema.names)
    if names != expected or len(updates.column_names) != len(names):
        missing, extra = sorted(expected - names), sorted(names - expected)
        raise SchemaMismatch(
            f"update columns must be {schema.names}; missing {missing}, unexpected {extra}"
        )
    types: list[ColumnType | None] = [*desc.types, None, None]
    columns = [
        _conform_column(field.name, ct, field.type, updates.column(field.name))
        for field, ct in zip(schema, types, strict=True)
    ]
    table = pa.Table.from_arrays(columns, schema=schema)
    _check_diffs(table)
    return table


def _check_values(table: pa.Table, desc: RelationDesc) -> None:
    """A table of the canonical schema: refuse NULLs where the schema allows none, and zero
    diffs. By column position, not name (a name lookup per column costs more than the check on
    the few rows of a small append)."""
    columns = table.columns
    arity = len(desc.types)
    for i, column in enumerate(columns):
        if column.null_count and (i >= arity or not desc.types[i].nullable):
            name = desc.names[i] if i < arity else (TIME, DIFF)[i - arity]
            raise SchemaMismatch(f"column {name!r} is not nullable but holds "
                                 f"{column.null_count} NULLs")
    diffs = columns[arity + 1]
    if len(diffs) <= SMALL_ROWS:  # numpy's fixed cost is most of a check of a few values
        if not all(diffs.to_pylist()):
            raise InvalidUpdates("updates must have non-zero diffs")
    elif not np.all(diffs.to_numpy()):
        raise InvalidUpdates("updates must have non-zero diffs")


def _check_diffs(table: pa.Table) -> None:
    """Refuse zero diffs (the column is non-null here). numpy: a fraction of a compute
    kernel's fixed cost on the few-row batches of small appends."""
    if table.num_rows and not np.all(table.column(DIFF).to_numpy()):
        raise InvalidUpdates("updates must have non-zero diffs")


def time_bounds(table: pa.Table) -> tuple[int, int] | None:
    """`(min, max)` of the `time` column, or `None` for an empty table."""
    if table.num_rows == 0:
        return None
    column = table.column(TIME)
    if column.null_count:
        mm = pc.min_max(column)
        return int(mm["min"].as_py()), int(mm["max"].as_py())
    if len(column) <= SMALL_ROWS:
        values = column.to_pylist()
        return min(values), max(values)
    times = column.to_numpy()
    return int(times.min()), int(times.max())


def check_bounds(table: pa.Table, lower: Frontier, upper: Frontier, what: str) -> None:
    """Raise `InvalidUpdates` unless every time lies in `[lower, upper)`."""
    bounds = time_bounds(table)
    if bounds is None:
        return
    lo, hi = bounds
    if not lower.contains(lo) or upper.contains(hi):
        raise InvalidUpdates(
            f"{what}: update times span [{lo}, {hi}] but must lie in [{lower!r}, {upper!r})"
        )


def consolidate(table: pa.Table, *, as_of: int | None = None) -> pa.Table:
    """Sum diffs per `(row, time)` and drop rows whose diff sums to zero.

    With `as_of`, first drop updates after `as_of` and advance every remaining time to `as_of`:
    the result is the collection at `as_of`. The row order of the result is unspecified.
    """
    if as_of is None:
        return _group_sum(table)
    bounds = time_bounds(table)
    if bounds is not None and bounds[1] > as_of:  # filtering copies: only when it drops rows
        table = table.filter(pc.less_equal(table.column(TIME), pa.scalar(as_of, pa.uint64())))
    summed = _group_sum(table.drop_columns([TIME]))
    times = pa.array(np.full(summed.num_rows, as_of, dtype=np.uint64))
    return summed.add_column(summed.num_columns - 1, table.schema.field(TIME), times)


def advance_times(table: pa.Table, since: int) -> pa.Table:
    """Advance every time before `since` to `since` (logical compaction), then consolidate."""
    if table.num_rows == 0:
        return table
    times = pc.max_element_wise(table.column(TIME), pa.scalar(since, pa.uint64()))
    table = table.set_column(table.schema.get_field_index(TIME), table.schema.field(TIME), times)
    return _group_sum(table)


def _group_sum(table: pa.Table) -> pa.Table:
    """Group by every column but `diff`, sum `diff`, drop zeros; keep `table`'s schema.

    Rows are hashed (polars, one vectorised pass) and sorted by hash (numpy). Rows whose hash
    occurs once are unique and pass through untouched; that is most rows of a snapshot, and all
    of them for a consolidated collection. Runs of equal hashes are checked column by column
    against their neighbours, so a hash collision is detected, never trusted; the runs are then
    summed with `np.add.reduceat`. Only if a collision is found do the repeated rows go through
    polars' group-by. Floats are hashed and compared by their bits (`_identity_frame`).
    """
    if table.num_rows == 0:
        return table
    keys = [n for n in table.column_names if n != DIFF]
    if not keys:
        total = int(pc.sum(table.column(DIFF)).as_py())
        return table.slice(0, 0) if total == 0 else pa.Table.from_arrays(
            [pa.array([total], pa.int64())], schema=table.schema)
    frame = _identity_frame(table, keys)
    hashes = frame.hash_rows().to_numpy()
    ordered = np.sort(hashes)  # cheaper than argsort, and enough to learn that rows are unique
    if not (ordered[1:] == ordered[:-1]).any():
        return _drop_zero_diffs(table)
    order = np.argsort(hashes)
    ordered = hashes[order]
    same = ordered[1:] == ordered[:-1]
    in_run = np.zeros(len(order), dtype=bool)
    in_run[1:] |= same
    in_run[:-1] |= same
    unique = np.ones(len(order), dtype=bool)
    unique[order[in_run]] = False
    once = _drop_zero_diffs(table.filter(pa.array(unique)))
    repeated = table.take(pa.array(order[in_run])).combine_chunks()
    run_hashes = ordered[in_run]
    continues = run_hashes[1:] == run_hashes[:-1]  # row i + 1 is in row i's run
    ident = frame[pl.Series(order[in_run].astype(np.uint32))]
    for name in keys:
        column = ident.get_column(name).to_arrow()
        if not _equal_neighbours(pa.chunked_array([column]))[continues].all():
            return pa.concat_tables([once, _polars_group_sum(repeated, ident, keys)])
    starts = np.flatnonzero(np.concatenate([[True], ~continues]))
    sums = np.add.reduceat(repeated.column(DIFF).to_numpy(), starts)
    firsts = repeated.take(pa.array(starts))
    summed = firsts.set_column(
        firsts.schema.get_field_index(DIFF), firsts.schema.field(DIFF), pa.array(sums)
    ).filter(pa.array(sums != 0))
    return pa.concat_tables([once, summed])


def _drop_zero_diffs(table: pa.Table) -> pa.Table:
    zero = pc.equal(table.column(DIFF), 0)
    return table.filter(pc.invert(zero)) if pc.any(zero).as_py() else table


def _equal_neighbours(column: pa.ChunkedArray) -> np.ndarray:
    """`out[i]` is whether values `i` and `i + 1` are equal, NULL equal to NULL."""
    left, right = column.slice(0, len(column) - 1), column.slice(1)
    equal = pc.fill_null(pc.equal(left, right), False)
    both_null = pc.and_(pc.is_null(left), pc.is_null(right))
    return np.asarray(pc.or_(equal, both_null).to_numpy(zero_copy_only=False), dtype=bool)


def _identity_frame(table: pa.Table, keys: list[str]) -> pl.DataFrame:
    """`table`'s `keys` columns as polars, each float column replaced by its bits (UInt64,
    NULLs kept) with every NaN as one NaN: the identity consolidation merges by, so -0.0 and
    0.0 stay separate rows (merging them would turn one stored value into the other)."""
    frame = pl.from_arrow(table.select(keys))
    assert isinstance(frame, pl.DataFrame)
    floats = [c for c in keys if frame.schema[c] == pl.Float64]
    if not floats:
        return frame
    replaced = []
    for c in floats:
        col = frame.get_column(c)
        values = (col.fill_null(0.0) if col.null_count() else col).to_numpy()
        bits = pl.Series(c, np.where(np.isnan(values), np.nan, values).view(np.uint64))
        if col.null_count():
            bits = pl.select(pl.when(col.is_null()).then(None).otherwise(bits).alias(c)).to_series()
        replaced.append(bits)
    return frame.with_columns(replaced)


def _polars_group_sum(table: pa.Table, ident: pl.DataFrame, keys: list[str]) -> pa.Table:
    """Sum `table`'s diffs over equal rows of `ident` (its `_identity_frame`, row aligned),
    keeping each group's first row."""
    frame = ident.with_columns(
        pl.Series(DIFF, table.column(DIFF).to_numpy(), pl.Int64),
        pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"),
    )
    summed = frame.group_by(keys).agg(pl.col(DIFF).sum(), pl.col("_row").first())
    summed = summed.filter(pl.col(DIFF) != 0)
    firsts = table.take(pa.array(summed.get_column("_row").to_numpy()))
    index = firsts.schema.get_field_index(DIFF)
    sums = pa.array(summed.get_column(DIFF).to_numpy(), pa.int64())
    return _conform(firsts.set_column(index, firsts.schema.field(DIFF), sums), table.schema)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s columns in `schema`'s order and types (polars may return other flavours)."""
    return pa.Table.from_arrays(
        [table.column(f.name).cast(f.type) for f in schema], schema=schema
    )


def filter_times(table: pa.Table, lower: Frontier, upper: Frontier) -> pa.Table:
    """The updates whose times lie in `[lower, upper)`."""
    lo, hi = lower.time, upper.time
    if lo is None:
        return table.slice(0, 0)
    mask = pc.greater_equal(table.column(TIME), pa.scalar(lo, pa.uint64()))
    if hi is not None:
        mask = pc.and_(mask, pc.less(table.column(TIME), pa.scalar(hi, pa.uint64())))
    return table.filter(mask)


def to_tuples(table: pa.Table) -> list[UpdateTuple]:
    """The rows of an update table as `(row, time, diff)` tuples."""
    data = [table.column(i).to_pylist() for i in range(table.num_columns - 2)]
    times = table.column(TIME).to_pylist()
    diffs = table.column(DIFF).to_pylist()
    rows = [list(r) for r in zip(*data, strict=True)] if data else [[] for _ in times]
    return list(zip(rows, times, diffs, strict=True))


def encode_ipc(table: pa.Table) -> bytes:
    """Serialise an update table as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def encode_batch(table: pa.Table) -> bytes:
    """Serialise a non-empty update table as one Arrow IPC record batch message, without the
    schema (the reader supplies it): a fraction of `encode_ipc`'s size and cost for the few
    rows of a small append."""
    batches = table.to_batches()
    if len(batches) != 1:
        (batch,) = table.combine_chunks().to_batches()  # one chunk per column: one batch
    else:
        batch = batches[0]
    return batch.serialize().to_pybytes()  # type: ignore[no-any-return]


def decode_batch(data: bytes, schema: pa.Schema, what: str) -> pa.Table:
    """Read an update table written by `encode_batch` with `schema`; `CorruptStorage` if the
    bytes are not such a batch."""
    try:
        batch = pa.ipc.read_record_batch(pa.py_buffer(data), schema)
        batch.validate()
    except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as e:
        raise CorruptStorage(f"{what}: stored batch is not a valid Arrow record batch: {e}") \
            from None
    return pa.Table.from_batches([batch])


def decode_ipc(data: bytes, schema: pa.Schema, what: str) -> pa.Table:
    """Read an update table written by `encode_ipc`; `CorruptStorage` if it is not one."""
    try:
        table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as e:
        raise CorruptStorage(f"{what}: stored batch is not a valid Arrow IPC stream: {e}") from None
    if not table.schema.equals(schema):
        raise CorruptStorage(f"{what}: stored batch has schema {table.schema}, expected {schema}")
    return table
