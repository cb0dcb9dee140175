"""Reduce by accumulation: `count` and `sum` (without `distinct`) maintained per key in
O(keys touched) per step.

Instead of re-reading a touched group's input rows, the operator keeps one *accumulator row*
per group — the group key, its row count `_n`, and per aggregate the running count or sum (sums
of ints in Int128, so a sum that leaves the 64-bit range and comes back is still exact) plus
the number of non-NULL values summed. A step aggregates its input delta per key, adds it to
the looked-up accumulators, overwrites them in a `LatestState` (one row per group, so no
retraction rows are ever stored or merged), and emits `output(new) - output(old)`. A sum
outside the 64-bit range yields an evaluation error for that group instead of a row, and
retracts with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import polars as pl

from twofold.engine.consolidation import consolidate
from twofold.engine.expr import OUT_OF_RANGE
from twofold.engine.frames import DIFF, ERROR, empty, schema
from twofold.engine.operator import EMPTY_ERRORS, Delta, Operator, concat_errors, empty_delta
from twofold.engine.state import LatestState
from twofold.protocol import Aggregate, ColumnType, GlobalId

_I64: Final = (-(2**63), 2**63 - 1)


def accumulable(aggregates: Sequence[Aggregate], types: Sequence[ColumnType]) -> bool:
    """Whether every aggregate can be maintained by accumulation: counts, and sums of ints
    (float sums are recomputed, since adding and retracting floats drifts)."""
    return all(
        not a.distinct
        and (
            a.func == "count"
            or (a.func == "sum" and a.column is not None and types[a.column].scalar == "int")
        )
        for a in aggregates
    )


class AccumulateReduceOp(Operator):
    def __init__(
        self,
        child: Operator,
        group_key: Sequence[int],
        aggregates: Sequence[Aggregate],
        types: Sequence[ColumnType],
    ) -> None:
        self.child = child
        self.types = list(types)
        self.aggs = list(aggregates)
        self.k = len(group_key)
        self.key_in = [f"c{g}" for g in group_key]
        self.gcols = [f"g{j}" for j in range(self.k)]
        in_sch = schema(child.types)
        acc: dict[str, pl.DataType] = {
            g: in_sch[c] for g, c in zip(self.gcols, self.key_in, strict=True)
        }
        acc["_n"] = pl.Int64()
        self.int_sums: list[int] = []
        for j, a in enumerate(self.aggs):
            if a.func == "count":
                acc[f"a{j}"] = pl.Int64()
            else:
                assert a.column is not None
                is_int = child.types[a.column].scalar == "int"
                acc[f"a{j}"] = pl.Int128() if is_int else pl.Float64()
                acc[f"n{j}"] = pl.Int64()
                if is_int:
                    self.int_sums.append(j)
        self.acc_cols = [c for c in acc if c not in self.gcols]
        self.state = LatestState(acc, self.gcols, "_n")
        # With no group key there is one accumulator row at most: kept as a frame.
        self._total = empty({c: acc[c] for c in self.acc_cols})

    def _delta_aggs(self, d: pl.DataFrame) -> pl.DataFrame:
        diff = pl.col(DIFF)
        exprs = [diff.sum().alias("_n")]
        for j, a in enumerate(self.aggs):
            if a.column is None:
                exprs.append(diff.sum().alias(f"a{j}"))
                continue
            c = pl.col(f"c{a.column}")
            nonnull = (diff * c.is_not_null().cast(pl.Int64)).sum()
            if a.func == "count":
                exprs.append(nonnull.alias(f"a{j}"))
            else:
                dtype = self.state.sch[f"a{j}"]
                exprs.append((c.cast(dtype) * diff.cast(dtype)).sum().alias(f"a{j}"))
                exprs.append(nonnull.alias(f"n{j}"))
        if self.k:
            keys = [pl.col(c).alias(g) for c, g in zip(self.key_in, self.gcols, strict=True)]
            out = d.group_by(keys).agg(exprs)
        else:
            out = d.select(exprs)
        return out.cast(self.state.sch)  # type: ignore[arg-type]

    def _outputs(self, acc: pl.DataFrame, sign: int) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Output rows (diff `sign`) and error rows of live accumulator rows."""
        acc = acc.filter(pl.col("_n") > 0)
        if self.int_sums:
            bad = pl.any_horizontal(
                [(pl.col(f"a{j}") < _I64[0]) | (pl.col(f"a{j}") > _I64[1]) for j in self.int_sums]
            )
            flags = acc.select(bad.alias("_bad"))["_bad"]
            n_bad = int(flags.sum())
            errors = EMPTY_ERRORS
            if n_bad:
                errors = pl.DataFrame(
                    {ERROR: [OUT_OF_RANGE] * n_bad, DIFF: [sign] * n_bad},
                    schema={ERROR: pl.String, DIFF: pl.Int64},
                )
                acc = acc.filter(~flags)
        else:
            errors = EMPTY_ERRORS
        cols = [pl.col(g).alias(f"c{j}") for j, g in enumerate(self.gcols)]
        for j, a in enumerate(self.aggs):
            value = pl.col(f"a{j}")
            if a.func == "sum":
                value = pl.when(pl.col(f"n{j}") > 0).then(value).otherwise(None)
            cols.append(value.alias(f"c{self.k + j}"))
        # with_columns, not select: a lone literal would make one row of an empty frame.
        out = acc.with_columns(pl.lit(sign, pl.Int64).alias(DIFF)).select(*cols, DIFF)
        return self.conform(out), errors

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        d, errs = self.child.step(t, inputs)
        if d.height == 0:
            return empty_delta(self.types)[0], errs
        dagg = self._delta_aggs(d)
        old = self.state.lookup(dagg.select(self.gcols)) if self.k else self._total
        if self.k and old.height:
            joined = old.join(
                dagg, on=self.gcols, how="full", coalesce=True, nulls_equal=True, suffix="_d"
            )
            new = joined.select(
                *self.gcols,
                *[
                    (pl.col(c).fill_null(0) + pl.col(f"{c}_d").fill_null(0)).alias(c)
                    for c in self.acc_cols
                ],
            )
        elif old.height:
            new = pl.concat([old, dagg], how="vertical").select(
                [pl.col(c).sum() for c in self.acc_cols]
            )
        else:
            new = dagg
        new = new.cast(self.state.sch)  # type: ignore[arg-type]
        if self.k:
            # Rows with `_n == 0` are written as tombstones: the group is gone.
            self.state.upsert(new)
        new = new.filter(pl.col("_n") != 0)
        if not self.k:
            self._total = new
        old_out, old_err = self._outputs(old, -1)
        new_out, new_err = self._outputs(new, 1)
        # Not consolidated: an unchanged group's -old/+new pair is harmless downstream (every
        # consumer consolidates: arrangements, sinks, keyed operators), and this is a hot path.
        out = pl.concat([old_out, new_out], how="vertical")
        own = consolidate(pl.concat([old_err, new_err], how="vertical"), [ERROR])
        return self.conform(out), concat_errors([errs, own])
