"""Read results: `Result` (the rows of a relation at one time) and `Batch` (one subscribe
step).

Contract: a `Result` holds each row as many times as its multiplicity (a collection read at one
time is a multiset with positive counts), in the order the replica returned them unless the read
asked for an order. Rows are tuples; `dicts()` and `to_polars()` give other shapes with the
relation's column names and types.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from twofold.api.schema import Schema
from twofold.protocol import Frontier, Row

_POLARS: dict[str, Any] = {
    "bool": pl.Boolean, "int": pl.Int64, "float": pl.Float64, "str": pl.String,
    "bytes": pl.Binary,
}


def polars_schema(schema: Schema) -> dict[str, Any]:
    return {n: _POLARS[t.scalar] for n, t in schema}


def expand(rows: Sequence[tuple[Row, int]]) -> list[tuple[Any, ...]]:
    """Rows with positive multiplicity, each repeated that many times."""
    out: list[tuple[Any, ...]] = []
    for row, diff in rows:
        if diff > 0:
            t = tuple(row)
            out.extend([t] * diff)
    return out


@dataclass(frozen=True)
class Result:
    """The rows of a relation at `timestamp`."""

    schema: Schema
    timestamp: int
    rows: list[tuple[Any, ...]]

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows)

    def dicts(self) -> list[dict[str, Any]]:
        names = self.schema.names
        return [dict(zip(names, r, strict=True)) for r in self.rows]

    def sorted(self) -> list[tuple[Any, ...]]:
        """The rows in a deterministic order (NULLs first per column)."""
        return sorted(self.rows, key=lambda r: tuple((v is not None, v) for v in r))

    def to_polars(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema=polars_schema(self.schema), orient="row")

    def __repr__(self) -> str:
        return f"Result({len(self.rows)} rows of {self.columns} at {self.timestamp})"


def char_padded(result: Result) -> Result:
    """`result` with each `char(n)` column's values blank-padded to n characters, as
    PostgreSQL reads them (`'a'::char(3)` is `'a  '`; twofold stores them without trailing
    spaces): what `db.sql` returns, so its rows equal a pgwire client's. Column-wise in polars;
    `result` itself if it has no such column."""
    sized = [(j, int(pg[len("bpchar("):-1])) for j, t in enumerate(result.schema.types)
             if (pg := getattr(type(t), "pg", "")).startswith("bpchar(")]
    if not sized or not result.rows:
        return result
    columns = list(zip(*result.rows, strict=True))
    for j, n in sized:
        columns[j] = tuple(pl.Series(columns[j], dtype=pl.String).str.pad_end(n).to_list())
    return Result(result.schema, result.timestamp, list(zip(*columns, strict=True)))


@dataclass(frozen=True)
class Batch:
    """The changes of a subscribed relation in `[lower, upper)`: `(time, row, diff)` updates,
    `diff > 0` an insertion, `diff < 0` a retraction."""

    schema: Schema
    lower: Frontier
    upper: Frontier
    updates: list[tuple[int, tuple[Any, ...], int]] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        return list(self.schema.names)

    def __len__(self) -> int:
        return len(self.updates)

    def to_polars(self) -> pl.DataFrame:
        """The updates as a frame: the relation's columns, then `time` and `diff`."""
        names = [*self.schema.names, "time", "diff"]
        data = [(*row, t, d) for t, row, d in self.updates]
        schema = {**polars_schema(self.schema), "time": pl.UInt64, "diff": pl.Int64}
        return pl.DataFrame(data, schema=dict(zip(names, schema.values(), strict=True)),
                            orient="row")
