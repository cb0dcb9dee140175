"""Test drivers for the engine: run a plan over update histories through the real Dataflow API.

`run_plan_at_times` is the entry point of the DuckDB differential tests: it renders a dataflow
with one source import per input, the plan as one object to build and an index export of it,
feeds the updates advancing the input frontiers one step at a time, compacts partway, and
reads the export at each requested time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twofold.engine.dataflow import Dataflow
from twofold.engine.errors import EvalError
from twofold.engine.typecheck import typecheck_plan
from twofold.protocol import (
    BuildDesc,
    DataflowDescription,
    Frontier,
    GlobalId,
    IndexDesc,
    Plan,
    RelationDesc,
    SourceImport,
)

Inputs = dict[GlobalId, tuple[RelationDesc, list[tuple[list[Any], int, int]]]]


def run_plan_at_times(
    plan: Plan, inputs: Inputs, times: Sequence[int], *, steps: Sequence[int] | None = None
) -> dict[int, list[tuple[list[Any], int]] | str]:
    """For each `t` in `times`: the plan's output at `t` as `(row, count)` pairs sorted by row,
    or the error message if the output has an error at `t`.

    Input frontiers advance to each distinct update time + 1 in turn (or to each of `steps`),
    then past the last time; compaction is allowed up to `min(times)` halfway through.
    """
    out_id = GlobalId.transient(1_000_000)
    rel = typecheck_plan(plan, {gid: d for gid, (d, _) in inputs.items()})
    desc = DataflowDescription(
        debug_name="run_plan_at_times",
        source_imports={
            gid: SourceImport(shard=str(gid), desc=d) for gid, (d, _) in inputs.items()
        },
        objects_to_build=[BuildDesc(out_id, plan)],
        index_exports={out_id: (IndexDesc(out_id, list(range(rel.arity))), rel)},
        as_of=Frontier.minimum(),
    )
    df = Dataflow(desc)
    all_times = sorted({t for _, ups in inputs.values() for _, t, _ in ups} | set(times))
    final = (max(all_times) + 1) if all_times else 1
    bounds = sorted({*(steps if steps is not None else [t + 1 for t in all_times]), final})
    for gid, (_, ups) in inputs.items():
        if ups:
            df.push(gid, [(list(r), t, d) for r, t, d in ups])
    compact_at = min(times) if times else 0
    for j, b in enumerate(bounds):
        for gid in inputs:
            df.advance_source(gid, Frontier.at(b))
        df.step()
        if j == len(bounds) // 2:
            df.allow_compaction(out_id, Frontier.at(min(compact_at, b - 1 if b else 0)))
    df.allow_compaction(out_id, Frontier.at(compact_at))
    snap = df.export(out_id).snapshot()
    results: dict[int, list[tuple[list[Any], int]] | str] = {}
    for t in times:
        try:
            results[t] = snap.read_rows(t)
        except EvalError as e:
            results[t] = e.message
    return results
