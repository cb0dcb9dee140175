"""Peeks: one read of an arrangement snapshot at a timestamp.

`peek` reads the snapshot at `timestamp` (all of it, or only the rows whose key equals one of
the `literal_constraints`), applies a `MapFilterProject`, then a `RowSetFinishing` (order by the
order keys then every column ascending with NULLs last; skip `offset` ranks; keep `limit`
ranks, a row of multiplicity n spanning n ranks; project) per `docs/semantics.md`.

Failures are typed: `NotReadableError` outside `since <= t < upper`, `EvalError` when the
error collection is non-empty at `t` or the mfp fails on a row, `ResultTooLarge` when the
result's size in bytes exceeds `max_result_size`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from twofold.engine.consolidation import consolidate
from twofold.engine.errors import EvalError, PlanError, ResultTooLarge
from twofold.engine.expr import CompiledMfp
from twofold.engine.frames import DIFF, ERROR
from twofold.engine.ordering import order_frame
from twofold.engine.reduce import rank_window
from twofold.engine.snapshot import ArrangementSnapshot
from twofold.engine.typecheck import typecheck_plan
from twofold.protocol import (
    Get,
    GlobalId,
    MapFilterProject,
    Mfp,
    RowSetFinishing,
)


def _check_size(rows: list[tuple[list[Any], int]], max_result_size: int) -> None:
    size = sum(8 + sum(len(v) if isinstance(v, str | bytes) else 8 for v in r) for r, _ in rows)
    if size > max_result_size:
        raise ResultTooLarge(
            f"result of about {size} bytes exceeds the limit of {max_result_size} bytes"
        )


def peek_each(
    snapshot: ArrangementSnapshot,
    timestamp: int,
    keys: Sequence[Sequence[Any]],
    *,
    max_result_size: int | None = None,
) -> list[list[tuple[list[Any], int]] | None]:
    """`[peek(snapshot, timestamp, literal_constraints=[k], max_result_size=...) for k in
    keys]` of plain lookups (no map/filter/project, no finishing), the snapshot's checks made
    once (`lookup_rows_each`); a key whose peek would raise is None in its place."""
    out = snapshot.lookup_rows_each(keys, timestamp)
    if max_result_size is not None:
        for i, rows in enumerate(out):
            if rows is not None:
                try:
                    _check_size(rows, max_result_size)
                except ResultTooLarge:
                    out[i] = None
    return out


def check_mfp(mfp: MapFilterProject, snapshot: ArrangementSnapshot) -> None:
    """`PlanError` unless `mfp` type-checks against the snapshot's relation."""
    probe = GlobalId.transient(0)
    typecheck_plan(
        Mfp(input=Get(probe), map=mfp.map, filter=mfp.filter, project=mfp.project),
        {probe: snapshot.desc},
        "peek",
    )


def finish(frame: pl.DataFrame, finishing: RowSetFinishing, arity: int) -> pl.DataFrame:
    """Order, page and project a collection frame (`c*`, `diff`)."""
    for o in finishing.order_by:
        if o.column >= arity:
            raise PlanError(f"finishing: order_by column {o.column} does not exist (arity {arity})")
    ordered = order_frame(frame, finishing.order_by, arity)
    if finishing.offset or finishing.limit is not None:
        ordered = rank_window(
            ordered.filter(pl.col(DIFF) > 0), finishing.offset, finishing.limit, []
        )
    if finishing.project is not None:
        for c in finishing.project:
            if c >= arity:
                raise PlanError(f"finishing: project column {c} does not exist (arity {arity})")
        ordered = ordered.select(
            *[pl.col(f"c{c}").alias(f"p{j}") for j, c in enumerate(finishing.project)], pl.col(DIFF)
        )
    return ordered


def peek(
    snapshot: ArrangementSnapshot,
    timestamp: int,
    *,
    literal_constraints: Sequence[Sequence[Any]] | None = None,
    mfp: MapFilterProject | None = None,
    finishing: RowSetFinishing | None = None,
    max_result_size: int | None = None,
) -> list[tuple[list[Any], int]]:
    """The peek's result rows as `(row, count)` pairs, in finishing order."""
    plain = (mfp is None or mfp.is_identity) and (finishing is None or finishing.is_trivial)
    if literal_constraints is not None and plain:
        rows = snapshot.lookup_rows(literal_constraints, timestamp)
        if max_result_size is not None:
            _check_size(rows, max_result_size)
        return rows
    if literal_constraints is not None:
        frame = snapshot.lookup(literal_constraints, timestamp)
    else:
        frame = snapshot.read(timestamp)
    arity = snapshot.desc.arity
    if mfp is not None and not mfp.is_identity:
        check_mfp(mfp, snapshot)
        compiled = CompiledMfp(mfp, snapshot.desc.types)
        frame, errors = compiled.apply(frame)
        if errors is not None:
            errs = consolidate(errors.select(ERROR, DIFF), [ERROR]).filter(pl.col(DIFF) > 0)
            if errs.height:
                raise EvalError(str(errs[ERROR].min()))
        arity = len(compiled.out_types)
    frame = finish(frame, finishing or RowSetFinishing(), arity)
    if max_result_size is not None:
        est = frame.estimated_size()
        if est > max_result_size:
            raise ResultTooLarge(
                f"result of {est} bytes exceeds the limit of {max_result_size} bytes"
            )
    return [(list(r[:-1]), int(r[-1])) for r in frame.iter_rows()]
