"""The operator interface and the linear operators (Get, Constant, Mfp, Negate, UnionAll).

Operators run one time at a time: `step(t, inputs)` receives, for every collection the dataflow
knows, its *delta* at `t` — a collection frame (`c*`, `diff`) of the changes at exactly `t` and
an error frame (`error`, `diff`) — and returns its own output delta at `t`. Times arrive in
strictly increasing order, so an operator's state is "everything before `t`" and needs no
history: stateful operators keep their state compacted to the latest time.

Invariant: an operator's step costs O(its input delta + the state it must look up for it),
never O(total state). Errors of every input flow through to the output unchanged (they are a
separate collection: `Negate` does not negate them).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Final

import polars as pl

from twofold.engine.expr import CompiledMfp
from twofold.engine.frames import DIFF, ERROR, empty, error_schema, frame_from_collection, schema
from twofold.protocol import ColumnType, GlobalId, MapFilterProject

Delta = tuple[pl.DataFrame, pl.DataFrame]
"""A change at one time: (collection frame `c*`+`diff`, error frame `error`+`diff`)."""

EMPTY_ERRORS: Final = empty(error_schema(with_time=False))


def empty_delta(types: Sequence[ColumnType]) -> Delta:
    return empty({**schema(types), DIFF: pl.Int64()}), EMPTY_ERRORS


def concat_errors(errs: Sequence[pl.DataFrame]) -> pl.DataFrame:
    present = [e for e in errs if e.height]
    if not present:
        return EMPTY_ERRORS
    return present[0] if len(present) == 1 else pl.concat(present, how="vertical")


class Operator(ABC):
    """A rendered plan node. `types` are its output column types."""

    types: list[ColumnType]

    @abstractmethod
    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        """The output delta at `t`, given the deltas at `t` of every known collection."""

    def conform(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Cast a collection frame to this operator's exact output schema."""
        target = {**schema(self.types), DIFF: pl.Int64()}
        return frame if dict(frame.schema) == target else frame.cast(target)  # type: ignore[arg-type]


class GetOp(Operator):
    def __init__(self, gid: GlobalId, types: Sequence[ColumnType]) -> None:
        self.gid = gid
        self.types = list(types)

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        return inputs.get(self.gid) or empty_delta(self.types)


class ConstantOp(Operator):
    """Its rows, once, at the dataflow's `as_of`."""

    def __init__(
        self, rows: list[tuple[list[object], int]], types: Sequence[ColumnType], as_of: int
    ) -> None:
        self.types = list(types)
        self.as_of = as_of
        self.frame = frame_from_collection(self.types, rows)

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        if t == self.as_of:
            return self.frame, EMPTY_ERRORS
        return empty_delta(self.types)


class MfpOp(Operator):
    def __init__(self, child: Operator, mfp: MapFilterProject) -> None:
        self.child = child
        self.mfp = CompiledMfp(mfp, child.types)
        self.types = self.mfp.out_types

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        data, errs = self.child.step(t, inputs)
        if data.height == 0:
            return empty_delta(self.types)[0], errs
        out, own = self.mfp.apply(data)
        if own is not None:
            errs = concat_errors([errs, own.select(ERROR, DIFF)])
        return self.conform(out), errs


class NegateOp(Operator):
    def __init__(self, child: Operator) -> None:
        self.child = child
        self.types = child.types

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        data, errs = self.child.step(t, inputs)
        return data.with_columns(-pl.col(DIFF)), errs


class UnionOp(Operator):
    def __init__(self, children: Sequence[Operator], types: Sequence[ColumnType]) -> None:
        self.children = list(children)
        self.types = list(types)

    def step(self, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
        outs = [c.step(t, inputs) for c in self.children]
        datas = [self.conform(d) for d, _ in outs if d.height]
        errs = concat_errors([e for _, e in outs])
        if not datas:
            return empty_delta(self.types)[0], errs
        return (datas[0] if len(datas) == 1 else pl.concat(datas, how="vertical")), errs
