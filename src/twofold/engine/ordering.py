"""The one total order of rows (`docs/semantics.md`, "Ordering"), for frames and for Python rows.

Every place that orders rows — `TopK`, a peek's finishing (`ORDER BY`, `LIMIT`), `read_rows`,
`lookup_rows`, a subscribe batch's updates — orders them here, so each is a function of the
multiset of rows alone, never of the order the rows happened to be held in:

- by the order keys (`OrderKey`: `desc`, `nulls_last`), then by every column ascending with NULLs
  last; floats as PostgreSQL orders them: `-inf < ... < +inf < NaN` (every NaN one value,
  greater than every number), `-0.0` equal to `0.0`;
- then, as the last tiebreak, each float column's sign: `-0.0` before `0.0`. SQL equality cannot
  tell the two zeros apart, but they are different stored values (`hashing`), and which one a
  `LIMIT` keeps, or which comes first, must not depend on the order they were held in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from twofold.protocol import OrderKey

_copysign = math.copysign


def order_frame(
    frame: pl.DataFrame, order_by: Sequence[OrderKey], arity: int, first: Sequence[str] = ()
) -> pl.DataFrame:
    """`frame` (columns `c0..c{arity-1}`, maybe others) sorted by `first` columns, then the
    order keys, then every column ascending with NULLs last, then the sign of each float
    column (the order of the module docstring)."""
    by: list[pl.Expr] = [pl.col(c) for c in first]
    desc = [False] * len(first)
    nulls_last = [True] * len(first)
    for o in order_by:
        by.append(pl.col(f"c{o.column}"))
        desc.append(o.desc)
        nulls_last.append(o.nulls_last)
    for c in range(arity):
        by.append(pl.col(f"c{c}"))
        desc.append(False)
        nulls_last.append(True)
    for c in range(arity):
        if frame.schema.get(f"c{c}") == pl.Float64:
            # -0.0 first: 1 / -0.0 is -inf (a nonzero value is ordered by its value already).
            by.append((pl.lit(1.0) / pl.col(f"c{c}")) >= 0)
            desc.append(False)
            nulls_last.append(True)
    if not by:
        return frame
    # polars sorts a column once per mention; repeated columns keep the first mention's order.
    sort_exprs = [e.alias(f"_s{j}") for j, e in enumerate(by)]
    keys = [f"_s{j}" for j in range(len(by))]
    return (
        frame.with_columns(sort_exprs)
        .sort(keys, descending=desc, nulls_last=nulls_last, maintain_order=True)
        .drop(keys)
    )


def row_key(row: Sequence[Any]) -> list[tuple[bool, bool, Any, bool]]:
    """A sort key of a Python row in the order of the module docstring (every column
    ascending): NULLs last, NaN after every number, `-0.0` just before `0.0`."""
    return [
        (v is None, v != v, v, v.__class__ is float and v == 0 and _copysign(1.0, v) > 0)
        for v in row
    ]
