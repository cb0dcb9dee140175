"""Reduce by accumulation: `count` and `sum` of ints and floats (without `distinct`) maintained
per group in O(rows of the step's input) per step, whatever the number of groups held.

Instead of re-reading a touched group's input rows, the operator keeps per group its row count
`_n` and, per aggregate, the running count or sum plus the number of non-NULL values summed.
These live in one dense int64 numpy array, a row per group id from a `GroupTable` (exact
key -> id map). A step maps each input row to its group, sums the rows' contributions per
touched group (`np.add.at`; sums are 128-bit, `int128`, so a sum that leaves the 64-bit range
and comes back is still exact), adds them to the touched groups' rows and emits
`output(new) - output(old)` for those groups, built straight from the arrays (a few polars
calls per step, none per row). A sum outside the 64-bit range, or a float sum of finite values
beyond the double range, yields an evaluation error for its group instead of a row, and
retracts with it. A float sum is exact (`fsum`): per group a
fixed-point accumulator of int64 limbs over the exponent window the data has used, counts of
infinities and NaNs, and the float64 bits of the value last emitted (the row a retraction
must cancel, and the value `fsum.group_sums` gives the group's rows in any order).

A group whose `_n` returns to 0 is gone: its row is reset (so a later row of the same key
starts afresh, as a dropped group would) and its id is reclaimed when dead ids outnumber live
ones (`GroupTable.compact`, amortised O(1) per step). Invariant: every group id's row holds the
sums over the group's input rows at every time processed (all zero for a dead group).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

import numpy as np
import polars as pl
import pyarrow as pa

from twofold.engine import fsum, int128
from twofold.engine.expr import OUT_OF_RANGE
from twofold.engine.frames import DIFF, ERROR, schema
from twofold.engine.functions import OVERFLOW
from twofold.engine.groups import GroupTable, key_frame
from twofold.engine.operator import Delta, Operator, concat_errors, empty_delta
from twofold.protocol import Aggregate, ColumnType, GlobalId

# Dead group ids are reclaimed once they outnumber live ones and at least this many.
_MIN_RECLAIM: Final = 4096


def accumulable(aggregates: Sequence[Aggregate], types: Sequence[ColumnType]) -> bool:
    """Whether every aggregate can be maintained by accumulation: counts, and sums of ints
    and floats (exact, so adding and retracting never drifts)."""
    return all(
        not a.distinct
        and (
            a.func == "count"
            or (
                a.func == "sum"
                and a.column is not None
                and types[a.column].scalar in ("int", "float")
            )
        )
        for a in aggregates
    )


def _canonical_float(c: pl.Series, positive_zeros: np.ndarray) -> pl.Series:
    """Every NaN as the canonical NaN, a zero as 0.0 where `positive_zeros` (the group holds
    a row of 0.0), else as -0.0."""
    zero = pl.when(pl.Series(positive_zeros > 0)).then(0.0).otherwise(-0.0)
    return (
        c.to_frame()
        .select(pl.when(pl.col(c.name) == 0).then(zero).otherwise(pl.col(c.name))
                .fill_nan(float("nan")))
        .to_series()
        .alias(c.name)
    )


def _float_series(name: str, values: np.ndarray, valid: np.ndarray) -> pl.Series:
    """A Float64 series of `values`, NULL where `valid` is False (NaN stays NaN)."""
    out = pl.Series(name, values)
    if valid.all():
        return out
    return out.set(pl.Series(~valid), None)


def _int64_series(name: str, values: np.ndarray, valid: np.ndarray | None) -> pl.Series:
    """An Int64 series of `values`, NULL where `valid` is False."""
    if valid is None or valid.all():
        return pl.Series(name, values)  # int64 already: naming the dtype costs a cast check
    bitmap = np.packbits(valid, bitorder="little")
    arr = pa.Array.from_buffers(
        pa.int64(), len(values), [pa.py_buffer(bitmap), pa.py_buffer(values)]
    )
    out = pl.Series(name, arr)
    return out


class AccumulateReduceOp(Operator):
    def __init__(
        self,
        child: Operator,
        group_key: Sequence[int],
        aggregates: Sequence[Aggregate],
        types: Sequence[ColumnType],
    ) -> None:
        assert accumulable(aggregates, child.types)
        self.child = child
        self.types = list(types)
        self.aggs = list(aggregates)
        self.k = len(group_key)
        self.key_in = [f"c{g}" for g in group_key]
        self.gcols = [f"g{j}" for j in range(self.k)]
        in_sch = schema(child.types)
        self.table = GroupTable(
            {g: in_sch[c] for g, c in zip(self.gcols, self.key_in, strict=True)}
        )
        # Accumulators by group id, one row per group (a step's reads and writes of a group
        # share cache lines): column 0 is per-step scratch (see `_group_rows`), then `_n`, and
        # per aggregate j `a{j}` (count of non-NULL values) or, for sums, `n{j}` (non-NULL
        # values summed) and `h{j}`/`l{j}` (the 128-bit sum; `l` holds uint64 bits).
        # count(*) is `_n` itself. A float sum j has `n{j}`, the counts `p{j}`
        # (+infs), `m{j}` (-infs), `q{j}` (NaNs), `z{j}` (-0.0s), `v{j}` (float64 bits of
        # the current sum), and its limbs in `limbs[j]` (a row per group, limb 0 weighing
        # 2^(32 lo[j] - 1074)). A float key column i has `y{i}`, the group's rows whose key is
        # 0.0 (not -0.0): without any, a zero key is output as -0.0, as PostgreSQL's.
        names = ["_mark", "_n"]
        self.floats = [
            j
            for j, a in enumerate(self.aggs)
            if a.func == "sum" and a.column is not None and child.types[a.column].scalar == "float"
        ]
        self.float_keys = [i for i, g in enumerate(group_key) if child.types[g].scalar == "float"]
        names.extend(f"y{i}" for i in self.float_keys)
        for j, a in enumerate(self.aggs):
            if a.func == "count" and a.column is not None:
                names.append(f"a{j}")
            elif j in self.floats:
                names.extend([f"n{j}", f"p{j}", f"m{j}", f"q{j}", f"z{j}", f"v{j}"])
            elif a.func == "sum":
                names.extend([f"n{j}", f"h{j}", f"l{j}"])
        self.limbs = {j: np.zeros((0, 0), np.int64) for j in self.floats}
        self.lo = {j: 0 for j in self.floats}
        self.col = {name: i for i, name in enumerate(names)}
        self.acc = np.zeros((0, len(names)), np.int64)
        self.live = 0  # groups with `_n != 0`
        self._fit(1)

    def _fit(self, groups: int) -> None:
        """Grow the accumulators to hold `groups` ids (doubling)."""
        cap = len(self.acc)
        if groups <= cap:
            return
        size = max(groups, 2 * cap, 1024)
        grown = np.zeros((size, self.acc.shape[1]), np.int64)
        grown[:cap] = self.acc
        self.acc = grown
        for j, limbs in self.limbs.items():
            more = np.zeros((size, limbs.shape[1]), np.int64)
            more[: len(limbs)] = limbs
            self.limbs[j] = more

    def _widen(self, j: int, lo: int, hi: int) -> None:
        """Let float sum `j`'s limbs cover `[lo, hi)` (with slack, so widening stays rare)."""
        limbs, old_lo = self.limbs[j], self.lo[j]
        old_hi = old_lo + limbs.shape[1]
        if limbs.shape[1] and lo >= old_lo and hi <= old_hi:
            return
        if limbs.shape[1]:
            lo = min(lo, old_lo - 1) if lo < old_lo else old_lo
            hi = max(hi, old_hi + 1) if hi > old_hi else old_hi
        wide = np.zeros((len(self.acc), hi - lo), np.int64)
        wide[: len(limbs), old_lo - lo : old_lo - lo + limbs.shape[1]] = limbs
        self.limbs[j], self.lo[j] = wide, lo

    def _views(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Named column views of accumulator rows (`l{j}` as uint64)."""
        return {
            name: rows[:, i].view(np.uint64) if name[0] == "l" else rows[:, i]
            for name, i in self.col.items()
        }

    def _group_rows(self, d: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(touched group ids, one input row of each, each input row's index into touched)."""
        n = d.height
        if not self.k:
            return np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(n, np.int64)
        ids = self.table.ids(key_frame(d, self.key_in, self.gcols))
        self._fit(len(self.table))
        flat = self.acc.reshape(-1)
        at = ids * self.acc.shape[1]  # each row's group's scratch cell
        rows = np.arange(n)
        # Of the rows of one group, exactly one write sticks: that row represents the group.
        flat[at] = rows
        first = np.flatnonzero(flat.take(at) == rows)
        touched = ids.take(first)
        flat[touched * self.acc.shape[1]] = np.arange(len(touched))
        return touched, first, flat.take(at)

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        d, errs = self.child.step(t, inputs)
        if d.height == 0:
            return empty_delta(self.types)[0], errs
        touched, first, local = self._group_rows(d)
        m = len(touched)
        diff = d.get_column(DIFF).to_numpy()

        def per_group(x: np.ndarray) -> np.ndarray:
            out = np.zeros(m, np.int64)
            np.add.at(out, local, x)
            return out

        old_rows = self.acc.take(touched, axis=0)
        new_rows = old_rows.copy()
        old, new = self._views(old_rows), self._views(new_rows)
        dn = per_group(diff)
        new["_n"] += dn
        for i in self.float_keys:
            with np.errstate(invalid="ignore"):
                key = d.get_column(self.key_in[i]).fill_null(1.0).to_numpy()
                positive_zero = (key == 0) & ~np.signbit(key)
            if positive_zero.any():
                new[f"y{i}"] += per_group(np.where(positive_zero, diff, 0))
        for j, a in enumerate(self.aggs):
            if a.column is None:
                continue
            col = d.get_column(f"c{a.column}")
            if col.null_count():
                counted = per_group(np.where(col.is_not_null().to_numpy(), diff, 0))
                col = col.fill_null(0)
            else:
                counted = dn
            if a.func == "count":
                new[f"a{j}"] += counted
                continue
            new[f"n{j}"] += counted
            if j in self.limbs:
                self._float_sum(j, col.to_numpy(), diff, local, touched, new, per_group)
                continue
            dhi, dlo = int128.sum_products(local, m, col.to_numpy(), diff)
            new[f"h{j}"][:], new[f"l{j}"][:] = int128.add(old[f"h{j}"], old[f"l{j}"], dhi, dlo)
        gone = new["_n"] == 0
        if gone.any():
            new_rows[gone] = 0
            for limbs in self.limbs.values():
                limbs[touched[gone]] = 0
        # Rows written back as whole records (numpy's row-wise fancy assignment is slower).
        record = np.dtype((np.void, new_rows.shape[1] * 8))
        self.acc.view(record).reshape(-1)[touched] = new_rows.view(record).reshape(-1)
        self.live += int((~gone).sum()) - int((old["_n"] != 0).sum())
        out, err_diffs = self._output(d, touched, first, old, new)
        if any(err_diffs.values()):
            own = pl.DataFrame(
                {ERROR: list(err_diffs), DIFF: list(err_diffs.values())},
                schema={ERROR: pl.String, DIFF: pl.Int64},
            ).filter(pl.col(DIFF) != 0)
            errs = concat_errors([errs, own])
        if self.k and len(self.table) - self.live > max(self.live, _MIN_RECLAIM):
            self._reclaim()
        return out, errs

    def _float_sum(
        self,
        j: int,
        x: np.ndarray,
        diff: np.ndarray,
        local: np.ndarray,
        touched: np.ndarray,
        new: dict[str, np.ndarray],
        per_group: Callable[[np.ndarray], np.ndarray],
    ) -> None:
        """Add the step's values `x` of float sum `j` to the touched groups (their limbs in
        place, their counts and current value in `new`)."""
        with np.errstate(invalid="ignore"):
            finite = np.isfinite(x)
            nonzero = finite & (x != 0)
        if not finite.all():
            for name, mask in (("p", x == np.inf), ("m", x == -np.inf), ("q", np.isnan(x))):
                if mask.any():
                    new[f"{name}{j}"] += per_group(np.where(mask, diff, 0))
        negative_zero = finite & ~nonzero
        if negative_zero.any():
            negative_zero &= np.signbit(x)
            if negative_zero.any():
                new[f"z{j}"] += per_group(np.where(negative_zero, diff, 0))
        limbs = self.limbs[j]
        if nonzero.any():
            at = None if nonzero.all() else np.flatnonzero(nonzero)
            vals = x if at is None else x[at]
            mant, p = fsum.decompose(vals)
            self._widen(j, *fsum.limb_range(p, diff if at is None else diff[at]))
            limbs = self.limbs[j]
            block = fsum.scatter(
                local if at is None else local[at],
                len(touched),
                mant,
                p,
                diff if at is None else diff[at],
                self.lo[j],
                limbs.shape[1],
            )
            block += limbs.take(touched, axis=0).T  # blocks are limb-major
            limbs[touched] = fsum.normalize(block).T
        else:
            block = limbs.take(touched, axis=0).T
        exact = fsum.to_float(block, self.lo[j]) if len(block) else np.zeros(len(touched))
        value = fsum.finish(exact, new[f"p{j}"], new[f"m{j}"], new[f"q{j}"])
        value = fsum.signed_zeros(value, new[f"n{j}"], new[f"z{j}"])
        new[f"v{j}"][:] = value.view(np.int64)

    def _output(
        self,
        d: pl.DataFrame,
        touched: np.ndarray,
        first: np.ndarray,
        old: dict[str, np.ndarray],
        new: dict[str, np.ndarray],
    ) -> tuple[pl.DataFrame, dict[str, int]]:
        """The rows `-output(old) + output(new)` of the touched groups (not consolidated: an
        unchanged group's pair is harmless downstream, where every consumer consolidates),
        and the net diffs of the groups' errors: an int sum out of range, else a float sum
        beyond the double range."""
        sides = []
        err_diffs = {OUT_OF_RANGE: 0, OVERFLOW: 0}
        for acc, sign in ((old, -1), (new, 1)):
            emit = acc["_n"] > 0
            int_bad = np.zeros(len(emit), dtype=bool)
            float_bad = np.zeros(len(emit), dtype=bool)
            for j, a in enumerate(self.aggs):
                if a.func != "sum":
                    continue
                if j in self.limbs:
                    float_bad |= fsum.overflowed(
                        acc[f"v{j}"].view(np.float64), acc[f"p{j}"], acc[f"m{j}"], acc[f"q{j}"])
                else:
                    int_bad |= ~int128.fits_int64(acc[f"h{j}"], acc[f"l{j}"])
            for msg, bad in ((OUT_OF_RANGE, int_bad), (OVERFLOW, float_bad & ~int_bad)):
                if bad.any():
                    err_diffs[msg] += sign * int((emit & bad).sum())
                    emit &= ~bad
            sides.append(np.flatnonzero(emit))
        at_old, at_new = sides
        cols: list[pl.Series] = []
        if self.k:
            positive_zeros = {
                i: np.concatenate([old[f"y{i}"][at_old], new[f"y{i}"][at_new]])
                for i in self.float_keys
            }
            cols.extend(
                self._keys(d, touched, first, np.concatenate([at_old, at_new]), positive_zeros)
            )
        for j, a in enumerate(self.aggs):
            name = f"c{self.k + j}"
            if a.column is None:
                cols.append(pl.Series(name, np.concatenate([old["_n"][at_old], new["_n"][at_new]])))
            elif a.func == "count":
                vals = np.concatenate([old[f"a{j}"][at_old], new[f"a{j}"][at_new]])
                cols.append(pl.Series(name, vals))
            elif j in self.limbs:
                bits = np.concatenate([old[f"v{j}"][at_old], new[f"v{j}"][at_new]])
                valid = np.concatenate([old[f"n{j}"][at_old] > 0, new[f"n{j}"][at_new] > 0])
                cols.append(_float_series(name, bits.view(np.float64), valid))
            else:
                lo = np.concatenate([old[f"l{j}"][at_old], new[f"l{j}"][at_new]])
                valid = np.concatenate([old[f"n{j}"][at_old] > 0, new[f"n{j}"][at_new] > 0])
                cols.append(_int64_series(name, lo.view(np.int64), valid))
        signs = np.ones(len(at_old) + len(at_new), np.int64)
        signs[: len(at_old)] = -1
        cols.append(pl.Series(DIFF, signs))
        return self.conform(pl.DataFrame(cols)), err_diffs

    def _keys(
        self,
        d: pl.DataFrame,
        touched: np.ndarray,
        first: np.ndarray,
        at: np.ndarray,
        positive_zeros: dict[int, np.ndarray],
    ) -> list[pl.Series]:
        """The key columns (`c0..`) of the touched groups at positions `at`; float key `i`'s
        `positive_zeros` say, per output row, how many of the group's rows hold 0.0."""
        if self.table.exact:
            # The step's own rows hold the keys (equal codes are equal keys).
            col = d.get_column(self.key_in[0])
            rows = first[at]
            if col.null_count() == 0:
                return [pl.Series("c0", col.to_numpy()[rows])]
            return [col.gather(pl.Series(rows, dtype=pl.UInt32)).alias("c0")]
        # The stored keys: one representative per group across steps (-0.0 vs 0.0, say).
        keys = self.table.keys[pl.Series(touched[at], dtype=pl.UInt32)]
        out = [keys.get_column(g).alias(f"c{j}") for j, g in enumerate(self.gcols)]
        # A float key's group holds values comparing equal (-0.0 and 0.0, NaNs): its output
        # is their canonical form, as in `ReduceOp` (-0.0 while no row holds 0.0).
        return [
            _canonical_float(c, positive_zeros[j]) if j in positive_zeros else c
            for j, c in enumerate(out)
        ]

    def _reclaim(self) -> None:
        """Drop dead group ids (amortised: runs once dead ids outnumber live ones)."""
        count = len(self.table)
        kept = self.table.compact(self.acc[:count, self.col["_n"]] != 0)
        fresh = np.zeros((max(2 * len(kept), 1024), self.acc.shape[1]), np.int64)
        fresh[: len(kept)] = self.acc.take(kept, axis=0)
        self.acc = fresh
        for j, limbs in self.limbs.items():
            wide = np.zeros((len(fresh), limbs.shape[1]), np.int64)
            wide[: len(kept)] = limbs.take(kept, axis=0)
            self.limbs[j] = wide
