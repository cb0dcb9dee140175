"""Shared builders for controller tests."""

from __future__ import annotations

from twofold.protocol import (
    BuildDesc,
    ColumnType,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    IndexDesc,
    IndexImport,
    MaterializedViewSink,
    RelationDesc,
    SinkDesc,
)

DESC = RelationDesc(names=["k", "v"], types=[ColumnType("int"), ColumnType("int")])


def index_dataflow(
    id: GlobalId, deps: list[GlobalId] = (), as_of: int | None = None  # type: ignore[assignment]
) -> DataflowDescription:
    """An index `id` built over the union of its imported indexes (or a constant)."""
    from twofold.protocol import Constant, UnionAll

    build = GlobalId(id.kind, id.n + 1_000_000)
    plan = UnionAll(inputs=[Get(id=d) for d in deps]) if deps else Constant(rows=[])
    return DataflowDescription(
        debug_name=f"index-{id}",
        index_imports={
            d: IndexImport(desc=IndexDesc(on_id=d, key=[0]), relation=DESC) for d in deps
        },
        objects_to_build=[BuildDesc(id=build, plan=plan)],
        index_exports={id: (IndexDesc(on_id=build, key=[0]), DESC)},
        as_of=None if as_of is None else Frontier.at(as_of),
    )


def mv_dataflow(id: GlobalId, dep: GlobalId, as_of: int | None = None) -> DataflowDescription:
    return DataflowDescription(
        debug_name=f"mv-{id}",
        index_imports={dep: IndexImport(desc=IndexDesc(on_id=dep, key=[0]), relation=DESC)},
        sink_exports={
            id: SinkDesc(from_id=dep, from_desc=DESC, connection=MaterializedViewSink(shard="s1"))
        },
        as_of=None if as_of is None else Frontier.at(as_of),
    )
