"""twofold.engine: incremental dataflows over columnar arrangements (`spec/engine.md`).

A library with no threads, sockets or protocol handling: a runtime drives it. Data moves as
polars frames (`twofold.engine.frames`): relation columns `c0..c{n-1}`, then `time` (UInt64) and
`diff` (Int64). At the boundary it also accepts Arrow tables/record batches with the relation's
columns plus `time`/`diff`, and `(row, time, diff)` tuples.

Public API
----------
Errors (`errors`): `EngineError` > `PlanError` (ill-typed plan; names node and column),
`EvalError` (a read found the error collection non-empty; `.message`), `NotReadableError` (read
outside `since <= t < upper`), `ResultTooLarge` (peek over its size limit), `InputError`
(malformed updates; nothing applied).

Arrangements (`arrangement`):
- `Arrangement(desc, key, *, since=None)` — single writer. `.insert(updates, upper, errors=None)`
  appends the updates at times in `[upper_before, upper)` and advances the upper;
  `.advance_upper(upper)`; `.compact(since)` (logical compaction, never regresses);
  `.merge_all()`; `.since`, `.upper`, `len()`, `.batch_count`; `.snapshot() ->
  ArrangementSnapshot` (O(batches), never a copy).
- `ArrangementSnapshot` — immutable and thread-safe: `.since`, `.upper`, `.desc`, `.key`,
  `.read(t) -> pl.DataFrame` (collection frame `c*`, `diff`), `.read_rows(t) -> [(row, count)]`
  sorted by row, `.lookup(keys, t) -> pl.DataFrame` (vectorised batched key lookup),
  `.lookup_rows(keys, t) -> [(row, count)]` (microseconds for a few keys), `.errors_at(t)`,
  `.check_errors(t)`, `.updates_through(t)` (an importer's initial snapshot at its as_of,
  advanced to it) and `.updates_between(lower, upper)` (what an importer has not consumed; needs
  `since < lower`). Reads outside `since <= t < upper` raise `NotReadableError`; reads at a time
  where the error collection is non-empty raise `EvalError`.

Type checking (`typecheck`): `typecheck_plan(plan, inputs) -> RelationDesc`,
`typecheck_expr(expr, input_types) -> ColumnType`, `typecheck_dataflow(desc, index_relations=None)
-> dict[GlobalId, RelationDesc]` (every collection's type); all raise `PlanError`.

Dataflows (`dataflow`): `Dataflow(desc, index_imports={id: ArrangementSnapshot}, *, as_of=None)`
renders a `DataflowDescription` (type-checks it first; `as_of` is used only when `desc.as_of` is
None). The driver calls `.push(source_id, updates)` (times at or beyond that input's upper),
`.advance_source(source_id, upper)`, `.update_index(index_id, newer_snapshot)` and then
`.step()`, which processes every complete time (one time at a time, in order) and advances
`.frontier` to `.input_frontier()` (the meet of all input uppers). Index exports are
`Arrangement`s (`.export(id)`, `.index_exports`); sink exports are drained with
`.drain_sink(id) -> list[SinkChunk]` (`lower`, `upper`, consolidated `updates` frame `c*`,
`time`, `diff` and `errors` frame `error`, `time`, `diff`). `.import_holds()` says how far each
imported index may be compacted (its last consumed time); `.allow_compaction(id, f)` compacts an
index export.

Peeks (`peek`): `peek(snapshot, timestamp, *, literal_constraints=None, mfp=None,
finishing=None, max_result_size=None) -> list[tuple[list, int]]` (`ResultTooLarge` over the
limit, `EvalError` on errors, `PlanError` on an ill-typed mfp or finishing).

Testing (`testing`): `run_plan_at_times(plan, inputs, times, *, steps=None)` for the
differential tests.
"""

from twofold.engine.arrangement import Arrangement, Updates
from twofold.engine.batch import Batch
from twofold.engine.dataflow import Dataflow, SinkChunk
from twofold.engine.errors import (
    EngineError,
    EvalError,
    InputError,
    NotReadableError,
    PlanError,
    ResultTooLarge,
)
from twofold.engine.peek import peek
from twofold.engine.snapshot import ArrangementSnapshot
from twofold.engine.typecheck import typecheck_dataflow, typecheck_expr, typecheck_plan

__all__ = [
    "Arrangement", "ArrangementSnapshot", "Batch", "Dataflow", "EngineError", "EvalError",
    "InputError", "NotReadableError", "PlanError", "ResultTooLarge", "SinkChunk", "Updates",
    "peek", "typecheck_dataflow", "typecheck_expr", "typecheck_plan",
]  # fmt: skip
