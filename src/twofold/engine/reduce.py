"""Keyed non-linear operators — Reduce, Distinct, Threshold, TopK — maintained by recomputing
only the keys a step touches.

At time `t` with input change `d`: look up the accumulated input rows of the keys `d` touches
(`prev`), form `new = prev + d`, evaluate the operator's function on both, and emit
`f(new) - f(prev)` (retractions of old results, insertions of new ones; equal rows cancel).
The same is done for the operator's own evaluation errors (an overflowing `sum`), so they
retract when the offending rows do. Cost is O(rows of touched keys), never O(state).

Results follow `docs/semantics.md`: groups exist while their row count is positive; aggregates
ignore NULLs; `distinct=True` aggregates the set of distinct non-NULL values; ordering for TopK
is the order keys, then every column ascending with NULLs last, a row of multiplicity `n`
taking `n` consecutive ranks.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from twofold.engine import fsum, variance
from twofold.engine.consolidation import consolidate
from twofold.engine.expr import OUT_OF_RANGE
from twofold.engine.frames import DIFF, ERROR
from twofold.engine.functions import OVERFLOW
from twofold.engine.hashing import canonical_float_bits
from twofold.engine.operator import (
    EMPTY_ERRORS,
    Delta,
    Operator,
    concat_errors,
    empty_delta,
)
from twofold.engine.ordering import order_frame
from twofold.engine.state import KeyedState, consolidated_union, distinct_keys
from twofold.protocol import Aggregate, ColumnType, GlobalId, OrderKey

_I64 = (-(2**63), 2**63 - 1)
_VARIANCES = ("var_samp", "var_pop")


class KeyedOp(Operator):
    """Recompute-touched-keys driver; subclasses define `evaluate` on a consolidated frame."""

    def __init__(self, child: Operator, key: Sequence[int], types: Sequence[ColumnType]) -> None:
        self.child = child
        self.key = list(key)
        self.key_cols = [f"c{k}" for k in key]
        self.types = list(types)
        self.in_cols = [f"c{i}" for i in range(len(child.types))]
        self.out_cols = [f"c{i}" for i in range(len(types))]
        self.state = KeyedState.of(child.types, key)

    @abstractmethod
    def evaluate(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(output collection frame, own error frame) of a consolidated input frame that holds
        whole groups."""

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        delta, errs = self.child.step(t, inputs)
        if delta.height == 0:
            return empty_delta(self.types)[0], errs
        delta = consolidate(delta, self.in_cols)
        if delta.height == 0:
            return empty_delta(self.types)[0], errs
        if not len(self.state):
            # Nothing accumulated yet (a peek dataflow's one step): new is the delta.
            prev, new = delta.clear(), delta
        else:
            # With an empty key every step touches the single group: the whole state.
            prev = (
                self.state.lookup(distinct_keys(delta, self.key_cols))
                if self.key
                else self.state.accumulated()
            )
            new = consolidated_union([prev, delta], self.in_cols)
        old_out, old_err = self.evaluate(prev) if prev.height else (None, None)
        new_out, new_err = self.evaluate(new) if new.height else (None, None)
        self.state.insert(t, delta)
        out_parts = [p for p in (new_out, _neg(old_out)) if p is not None and p.height]
        err_parts = [p for p in (new_err, _neg(old_err)) if p is not None and p.height]
        if out_parts:
            out = consolidate(self.conform(pl.concat(out_parts, how="vertical")), self.out_cols)
        else:
            out = empty_delta(self.types)[0]
        if err_parts:
            own = consolidate(pl.concat(err_parts, how="vertical"), [ERROR])
            errs = concat_errors([errs, own])
        return out, errs


def _neg(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    return None if frame is None else frame.with_columns(-pl.col(DIFF))


class ReduceOp(KeyedOp):
    def __init__(
        self,
        child: Operator,
        group_key: Sequence[int],
        aggregates: Sequence[Aggregate],
        types: Sequence[ColumnType],
    ) -> None:
        super().__init__(child, group_key, types)
        self.aggs = list(aggregates)

    def evaluate(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        k = len(self.key)
        exprs: list[pl.Expr] = [pl.col(DIFF).sum().alias("_n")]
        checks: list[str] = []
        pos = pl.col(DIFF) > 0
        # Float sums, mins and maxes are computed in numpy over each group's rows (`_rows`),
        # as functions of the multiset alone (`fsum`, `_float_extremes`).
        floats = [
            j
            for j, a in enumerate(self.aggs)
            if a.column is not None
            and a.func != "count"
            and (self.child.types[a.column].scalar == "float" or a.func in _VARIANCES)
        ]
        if floats:
            frame = frame.with_row_index("_i")
            exprs.append((pl.col("_i") if self.key else pl.col("_i").implode()).alias("_rows"))
        for j, agg in enumerate(self.aggs):
            name = f"_a{j}"
            if agg.column is None:
                exprs.append(pl.col(DIFF).sum().alias(name))
                continue
            if j in floats:
                continue
            c = pl.col(f"c{agg.column}")
            scalar = self.child.types[agg.column].scalar
            distinct_vals = c.filter(pos & c.is_not_null()).unique()
            if agg.func == "count":
                e = (
                    distinct_vals.len()
                    if agg.distinct
                    else (pl.col(DIFF) * c.is_not_null().cast(pl.Int64)).sum()
                )
                exprs.append(e.cast(pl.Int64).alias(name))
            elif agg.func == "sum":
                nonnull = (c.is_not_null() & pos).any()
                if scalar == "int":
                    total = (
                        distinct_vals.cast(pl.Int128).sum()
                        if agg.distinct
                        else (c.cast(pl.Int128) * pl.col(DIFF)).sum()
                    )
                    exprs.append(pl.when(nonnull).then(total).otherwise(None).alias(name))
                    checks.append(f"c{k + j}")
                else:
                    total = (
                        distinct_vals.sum()
                        if agg.distinct
                        else (c * pl.col(DIFF).cast(pl.Float64)).sum()
                    )
                    exprs.append(pl.when(nonnull).then(total).otherwise(None).alias(name))
            elif agg.func == "string_agg":
                assert agg.separator is not None
                keep = pos & c.is_not_null()
                vals = c.filter(keep)
                if not agg.distinct:
                    vals = vals.repeat_by(pl.col(DIFF).filter(keep)).explode()
                else:
                    vals = vals.unique()
                joined = vals.sort(descending=agg.desc).str.join(agg.separator)
                exprs.append(pl.when(keep.any()).then(joined).otherwise(None).alias(name))
            else:
                vals = c.filter(pos)
                exprs.append((vals.min() if agg.func == "min" else vals.max()).alias(name))
        if self.key:
            float_keys = [
                j for j, g in enumerate(self.key) if self.child.types[g].scalar == "float"
            ]
            exprs.extend(
                (_positive_zero(pl.col(self.key_cols[j])) & pos).any().alias(f"_z{j}")
                for j in float_keys
            )
            grouped = frame.group_by(
                [pl.col(c).alias(f"_g{j}") for j, c in enumerate(self.key_cols)]
            ).agg(exprs)
            grouped = grouped.with_columns(
                _canonical_float(pl.col(f"_g{j}"), pl.col(f"_z{j}")).alias(f"_g{j}")
                for j in float_keys
            ).drop([f"_z{j}" for j in float_keys])
        else:
            grouped = frame.select(exprs)
        if floats:
            grouped = self._float_aggregates(frame, grouped, floats)
        grouped = grouped.rename(
            {f"_g{j}": f"c{j}" for j in range(k)}
            | {f"_a{j}": f"c{k + j}" for j in range(len(self.aggs))}
        )
        grouped = grouped.filter(pl.col("_n") > 0)
        errors = EMPTY_ERRORS
        failures = [(pl.col(c) < _I64[0]) | (pl.col(c) > _I64[1]) for c in checks]
        if "_overflow" in grouped.columns:
            failures.append(pl.col("_overflow"))
        if failures:
            bad = pl.any_horizontal(failures)
            flagged = grouped.select(bad.fill_null(False).alias("_bad"))["_bad"]
            if flagged.any():
                # An int sum out of range, a float sum or a variance's squares beyond doubles.
                int_bad = pl.any_horizontal(failures[: len(checks)]) if checks else pl.lit(False)
                errors = grouped.filter(flagged).select(
                    pl.when(int_bad.fill_null(False)).then(pl.lit(OUT_OF_RANGE))
                    .otherwise(pl.lit(OVERFLOW)).alias(ERROR),
                    pl.lit(1, pl.Int64).alias(DIFF),
                )
                grouped = grouped.filter(~flagged)
        # with_columns, not select: a lone literal would make one row of an empty frame.
        out = grouped.with_columns(pl.lit(1, pl.Int64).alias(DIFF)).select([*self.out_cols, DIFF])
        return self.conform(out), errors

    def _float_aggregates(
        self, frame: pl.DataFrame, grouped: pl.DataFrame, floats: list[int]
    ) -> pl.DataFrame:
        """`grouped` with the float aggregates `floats` (`_a{j}`) computed from each group's
        row indices `_rows` into `frame`."""
        rows_col = grouped.get_column("_rows")
        m = grouped.height
        rows = rows_col.explode().to_numpy()
        groups = np.empty(frame.height, np.int64)
        groups[rows] = np.repeat(np.arange(m), rows_col.list.len().to_numpy())
        diff = frame.get_column(DIFF).to_numpy()
        cols = []
        overflow: np.ndarray | None = None
        for j in floats:
            agg = self.aggs[j]
            assert agg.column is not None
            c = frame.get_column(f"c{agg.column}").cast(pl.Float64)
            valid = c.is_not_null().to_numpy()
            x = c.fill_null(0.0).to_numpy()
            if agg.func in _VARIANCES:
                keep = valid & (diff > 0)
                if agg.distinct:
                    keep = keep & _first_of_each(groups, x, keep)
                d = np.ones_like(diff) if agg.distinct else diff
                var, ok, over = variance.group_variance(
                    groups, m, x, keep, d, agg.func == "var_samp")
                cols.append(_float_column(f"_a{j}", var, ok))
                overflow = over if overflow is None else overflow | over
                continue
            if agg.func == "sum":
                if agg.distinct:
                    keep = valid & (diff > 0)
                    total, n, over = _distinct_float_sum(groups[keep], m, x[keep])
                else:
                    total, n, over = fsum.checked_sums(groups, m, x, valid, diff)
                cols.append(_float_column(f"_a{j}", total, n > 0))
                overflow = over if overflow is None else overflow | over
                continue
            keep = valid & (diff > 0)
            cols.append(_float_extreme(f"_a{j}", groups[keep], m, x[keep], agg.func == "max"))
        if overflow is not None:
            cols.append(pl.Series("_overflow", overflow, dtype=pl.Boolean))
        return grouped.drop("_rows").with_columns(cols)


def _first_of_each(groups: np.ndarray, x: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """A mask keeping one row of each distinct (group, value) among `keep` (values comparing
    equal are one: -0.0 and 0.0, every NaN)."""
    bits = _canonical(x).view(np.int64)
    idx = np.flatnonzero(keep)
    pairs = pl.DataFrame({"g": groups[idx], "b": bits[idx], "i": idx})
    first = pairs.unique(subset=["g", "b"], keep="first").get_column("i").to_numpy()
    out = np.zeros(len(x), bool)
    out[first] = True
    return out


def _canonical_float(e: pl.Expr, positive_zero: pl.Expr) -> pl.Expr:
    """A float group key's output form (the group's members compare equal, so none of them is
    the key's representative): every NaN as the one canonical NaN, and a zero as 0.0 where
    `positive_zero` (a member is 0.0), else -0.0 — PostgreSQL's key of a group of only -0.0
    (over both zeros its key is the first member it read; 0.0 here)."""
    zero = pl.when(positive_zero).then(0.0).otherwise(-0.0)
    return pl.when(e == 0).then(zero).otherwise(e).fill_nan(float("nan"))


def _positive_zero(e: pl.Expr) -> pl.Expr:
    """Whether a float is 0.0 (not -0.0: 1 / -0.0 is -inf)."""
    return (e == 0) & ((1.0 / e) > 0)


def _float_column(name: str, values: np.ndarray, valid: np.ndarray) -> pl.Series:
    out = pl.Series(name, values, dtype=pl.Float64)
    return out if valid.all() else pl.select(pl.when(pl.Series(valid)).then(out)).to_series()


def _canonical(x: np.ndarray) -> np.ndarray:
    """-0.0 as 0.0, every NaN as the canonical NaN."""
    return np.where(np.isnan(x), np.nan, x + 0.0)


def _order_bits(x: np.ndarray) -> np.ndarray:
    """int64 keys ordering canonical floats -inf < ... < 0.0 < ... < inf < NaN."""
    bits = x.view(np.int64)
    return bits ^ ((bits >> np.int64(63)) & np.int64(0x7FFFFFFFFFFFFFFF))


def _float_extreme(name: str, g: np.ndarray, m: int, x: np.ndarray, is_max: bool) -> pl.Series:
    """Per group the min (or max) of `x` in the order of `_order_bits` (canonical values): a
    max is NaN when any value is, a min only when all are."""
    keys = _order_bits(_canonical(x))
    if is_max:
        best = np.full(m, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(best, g, keys)
    else:
        best = np.full(m, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(best, g, keys)
    seen = np.zeros(m, bool)
    seen[g] = True
    # The order map is its own inverse.
    vals = (best ^ ((best >> np.int64(63)) & np.int64(0x7FFFFFFFFFFFFFFF))).view(np.float64)
    # A zero extreme is -0.0 when every zero of the group is (PostgreSQL's answer then; over
    # both zeros PostgreSQL's depends on the input order, and 0.0 is given).
    positive_zero = np.zeros(m, bool)
    np.logical_or.at(positive_zero, g, (x == 0) & ~np.signbit(x))
    vals = np.where((vals == 0) & ~positive_zero, -0.0, vals)
    return _float_column(name, np.where(seen, vals, 0.0), seen)


def _distinct_float_sum(g: np.ndarray, m: int, x: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group `fsum.checked_sums` of the distinct values of `x` (values comparing equal are
    one: -0.0 and 0.0, every NaN)."""
    canon = _canonical(x)
    pairs = pl.DataFrame({"g": g, "b": canon.view(np.int64)}).unique()
    ug = pairs.get_column("g").to_numpy()
    ux = pairs.get_column("b").to_numpy().view(np.float64)
    sums, n, over = fsum.checked_sums(ug, m, ux, np.ones(len(ux), bool),
                                      np.ones(len(ux), np.int64))
    negative = (x == 0) & np.signbit(x)
    if negative.any():
        # A group whose values are all -0.0 sums to -0.0, as PostgreSQL's (over -0.0 and 0.0
        # its DISTINCT keeps whichever its sort put first; 0.0 here).
        others = np.bincount(g[~negative], minlength=m)
        sums = np.where((n > 0) & (others == 0), -0.0, sums)
    return sums, n, over


class GlobalReduceOp(Operator):
    """A `Reduce` with no group key: the one row its inner reduce gives, or — while the input is
    empty — the default row (counts 0, every other aggregate NULL), as SQL's `SELECT count(*)`
    gives. The default row enters at the first step when the inner output is empty, and is
    retracted in the step the inner row appears (and back when it goes)."""

    def __init__(self, inner: Operator, aggregates: Sequence[Aggregate]) -> None:
        self.inner = inner
        self.types = list(inner.types)
        default = [0 if a.func == "count" else None for a in aggregates]
        self.default = pl.DataFrame(
            [pl.Series(f"c{j}", [v]) for j, v in enumerate(default)] + [pl.Series(DIFF, [1])]
        )
        self.present = 0  # net multiplicity of the inner output (0 or 1)
        self.shown = False  # whether the default row is in the output
        self.started = False

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        out, errs = self.inner.step(t, inputs)
        if out.height:
            self.present += int(out.get_column(DIFF).sum())
        want = self.present == 0
        if want == self.shown and self.started:
            return out, errs
        self.started = True
        if want == self.shown:
            return out, errs
        self.shown = want
        row = self.conform(self.default.with_columns(pl.lit(1 if want else -1).alias(DIFF)))
        return pl.concat([out, row], how="vertical") if out.height else row, errs


def sum_equal_rows(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` (`c*`, `diff`, consolidated by bits) with rows equal by SQL equality (-0.0 =
    0.0) summed into one: the row whose float columns have the smallest bits (unsigned, NaNs
    canonical), lexicographically — so +0.0 whenever the class holds one, a deterministic
    function of the multiset. Other dtypes consolidate by equality already."""
    cols = [c for c in frame.columns if c != DIFF]
    floats = [c for c in cols if frame.schema[c] == pl.Float64]
    if not floats or frame.height <= 1:
        return frame
    bits = [
        pl.Series(f"_bits{j}", canonical_float_bits(
            frame.get_column(c).fill_null(0.0).to_numpy()))
        for j, c in enumerate(floats)
    ]
    ordered = frame.with_columns(bits).sort([b.name for b in bits])
    return ordered.group_by(cols, maintain_order=True).agg(pl.col(DIFF).sum()).select(frame.columns)


class DistinctOp(KeyedOp):
    def __init__(self, child: Operator) -> None:
        super().__init__(child, range(len(child.types)), child.types)

    def evaluate(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        return sum_equal_rows(frame).filter(pl.col(DIFF) > 0).with_columns(
            pl.lit(1, pl.Int64).alias(DIFF)
        ), EMPTY_ERRORS


class ThresholdOp(KeyedOp):
    def __init__(self, child: Operator) -> None:
        super().__init__(child, range(len(child.types)), child.types)

    def evaluate(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        # By SQL equality: -0.0 EXCEPT ALL 0.0 is empty, as in PostgreSQL.
        return sum_equal_rows(frame).filter(pl.col(DIFF) > 0), EMPTY_ERRORS


def rank_window(
    frame: pl.DataFrame, offset: int, limit: int | None, group: Sequence[str]
) -> pl.DataFrame:
    """For an ordered frame with positive diffs: keep ranks `[offset, offset+limit)` per group
    (a row of multiplicity n spans n ranks), adjusting each row's diff to its overlap."""
    end = pl.col(DIFF).cum_sum()
    if group:
        end = end.over(list(group))
    hi = pl.lit(None if limit is None else offset + limit, pl.Int64)
    overlap = (
        pl.min_horizontal(pl.col("_end"), hi) if limit is not None else pl.col("_end")
    ) - pl.max_horizontal(pl.col("_end") - pl.col(DIFF), pl.lit(offset, pl.Int64))
    return (
        frame.with_columns(end.alias("_end"))
        .with_columns(overlap.alias(DIFF))
        .filter(pl.col(DIFF) > 0)
        .drop("_end")
    )


class TopKOp(KeyedOp):
    def __init__(
        self,
        child: Operator,
        group_key: Sequence[int],
        order_by: Sequence[OrderKey],
        limit: int | None,
        offset: int,
    ) -> None:
        super().__init__(child, group_key, child.types)
        self.order_by = list(order_by)
        self.limit, self.offset = limit, offset

    def evaluate(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        frame = frame.filter(pl.col(DIFF) > 0)
        ordered = order_frame(frame, self.order_by, len(self.types), self.key_cols)
        return rank_window(ordered, self.offset, self.limit, self.key_cols), EMPTY_ERRORS
