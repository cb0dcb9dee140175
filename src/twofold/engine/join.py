"""Delta join: `Join(left, right, left_key, right_key)` maintained incrementally.

At each time `t`, with `L`, `R` the accumulated inputs before `t` and `dL`, `dR` the changes at
`t`, the output change is `dL ⋈ R + (L + dL) ⋈ dR` (= `dL⋈R + L⋈dR + dL⋈dR`). Both sides are
arranged by their join key (`KeyedState`), so a step looks up only the keys its delta touches.
NULL keys never match (SQL equality). Key columns of type int on one side and float on the other
are compared as floats.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from twofold.engine.frames import DIFF
from twofold.engine.operator import Delta, Operator, concat_errors, empty_delta
from twofold.engine.state import KeyedState, WholeState, distinct_keys
from twofold.protocol import GlobalId


class JoinOp(Operator):
    def __init__(
        self, left: Operator, right: Operator, left_key: list[int], right_key: list[int],
        *, single_time: bool = False,
    ) -> None:
        """`single_time`: the dataflow steps one time only, so each side's state is the
        frames seen (`WholeState`), not an arrangement by key."""
        self.left, self.right = left, right
        self.lk, self.rk = left_key, right_key
        self.types = [*left.types, *right.types]
        self.nl = len(left.types)
        state = WholeState if single_time else KeyedState
        self.lstate: KeyedState | WholeState = state.of(left.types, left_key)
        self.rstate: KeyedState | WholeState = state.of(right.types, right_key)
        # Columns compared as floats because the other side's key column is a float.
        self.lfloat = [
            a
            for a, b in zip(left_key, right_key, strict=True)
            if left.types[a].scalar != right.types[b].scalar
        ]

    def _probe(
        self, delta: pl.DataFrame, key: list[int], other_key: list[int],
        other: KeyedState | WholeState,
    ) -> pl.DataFrame | None:
        if isinstance(other, WholeState):
            return other.lookup_unconsolidated(None)  # all of it: the join checks the keys
        if not key:
            # A cross join: every accumulated row of the other side matches.
            whole = other.accumulated()
            return whole if whole.height else None
        keys = distinct_keys(delta, [f"c{k}" for k in key]).drop_nulls()
        if self.lfloat:
            casts = {f"k{j}": other.sch[f"c{k}"] for j, k in enumerate(other_key)}
            keys = keys.cast(casts, strict=False).drop_nulls()  # type: ignore[arg-type]
        return other.lookup_unconsolidated(keys)

    def _key(self, col: str, alias: str) -> pl.Expr:
        expr = pl.col(col).cast(pl.Float64) if self.lfloat else pl.col(col)
        return expr.alias(alias)

    def _join(self, left: pl.DataFrame, right: pl.DataFrame) -> pl.DataFrame:
        nl = self.nl
        right = right.rename(
            {c: f"c{nl + j}" for j, c in enumerate(right.columns) if c != DIFF} | {DIFF: "_rdiff"}
        )
        lon = [f"c{k}" for k in self.lk]
        ron = [f"c{nl + k}" for k in self.rk]
        if not lon:
            out = left.join(right, how="cross")
        else:
            # Join on aliased copies of the keys: a key may name one column twice, and int
            # keys facing float keys compare as floats.
            on = [f"_j{j}" for j in range(len(lon))]
            jl = left.with_columns([self._key(c, k) for c, k in zip(lon, on, strict=True)])
            jr = right.with_columns([self._key(c, k) for c, k in zip(ron, on, strict=True)])
            out = jl.join(jr, on=on, how="inner").drop(on)
        return out.select(
            *[pl.col(f"c{j}") for j in range(len(self.types))],
            (pl.col(DIFF) * pl.col("_rdiff")).alias(DIFF),
        )

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        dl, el = self.left.step(t, inputs)
        dr, er = self.right.step(t, inputs)
        errs = concat_errors([el, er])
        parts = []
        if dl.height:
            found = self._probe(dl, self.lk, self.rk, self.rstate)
            if found is not None and found.height:
                parts.append(self._join(dl, found))
        self.lstate.insert(t, dl)
        if dr.height:
            found = self._probe(dr, self.rk, self.lk, self.lstate)
            if found is not None and found.height:
                parts.append(self._join(found, dr))
        self.rstate.insert(t, dr)
        if not parts:
            return empty_delta(self.types)[0], errs
        out = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")
        return self.conform(out), errs
