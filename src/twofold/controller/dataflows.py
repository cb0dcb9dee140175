"""Builders for the controller's transient dataflows: peek dataflows, subscribes, copy-tos.

Contract: `peek_dataflow` returns a dataflow the protocol classifies as a **peek dataflow**
(`is_peek_dataflow()`: every export transient, single-time `as_of = at(t)`, `until = at(t+1)`, no
subscribe or copy-to sink), so the multiplexer routes it to the interactive runtime. It builds the
query once as `build_id` and exports a transient index `index_id` on it, which the controller
then peeks at `t` and drops with `AllowCompaction(index_id, empty)`.
"""

from __future__ import annotations

from twofold.protocol import (
    MAX_TIME,
    BuildDesc,
    CopyToSink,
    DataflowDescription,
    Frontier,
    GlobalId,
    IndexDesc,
    IndexImport,
    Plan,
    RelationDesc,
    SinkDesc,
    SourceImport,
    SubscribeSink,
)


def _require_transient(what: str, *ids: GlobalId) -> None:
    for i in ids:
        if not i.is_transient:
            raise ValueError(f"{what} id {i} must be transient (GlobalId.transient(n))")


def single_time_until(timestamp: int) -> Frontier:
    """The `until` that makes a dataflow at `as_of = at(timestamp)` single-time."""
    return Frontier.empty() if timestamp == MAX_TIME else Frontier.at(timestamp + 1)


def peek_dataflow(
    *,
    build_id: GlobalId,
    index_id: GlobalId,
    plan: Plan,
    desc: RelationDesc,
    timestamp: int,
    index_imports: dict[GlobalId, IndexImport] | None = None,
    source_imports: dict[GlobalId, SourceImport] | None = None,
    key: list[int] | None = None,
) -> DataflowDescription:
    """A transient, single-time dataflow computing `plan` at `timestamp`, exported as a transient
    index `index_id` (keyed by `key`, default every column) on the built collection `build_id`."""
    _require_transient("peek dataflow", build_id, index_id)
    return DataflowDescription(
        debug_name=f"peek-{index_id}",
        source_imports=dict(source_imports or {}),
        index_imports=dict(index_imports or {}),
        objects_to_build=[BuildDesc(id=build_id, plan=plan)],
        index_exports={
            index_id: (
                IndexDesc(on_id=build_id, key=list(range(desc.arity)) if key is None else key),
                desc,
            )
        },
        as_of=Frontier.at(timestamp),
        until=single_time_until(timestamp),
    )


def subscribe_dataflow(
    *,
    sink_id: GlobalId,
    from_id: GlobalId,
    desc: RelationDesc,
    index_imports: dict[GlobalId, IndexImport] | None = None,
    source_imports: dict[GlobalId, SourceImport] | None = None,
    objects_to_build: list[BuildDesc] | None = None,
    as_of: Frontier | None = None,
    with_snapshot: bool = True,
    up_to: Frontier | None = None,
) -> DataflowDescription:
    """A dataflow streaming collection `from_id` (imported or built) to the controller."""
    _require_transient("subscribe", sink_id)
    return DataflowDescription(
        debug_name=f"subscribe-{sink_id}",
        source_imports=dict(source_imports or {}),
        index_imports=dict(index_imports or {}),
        objects_to_build=list(objects_to_build or []),
        sink_exports={
            sink_id: SinkDesc(
                from_id=from_id,
                from_desc=desc,
                connection=SubscribeSink(),
                with_snapshot=with_snapshot,
                up_to=Frontier.empty() if up_to is None else up_to,
            )
        },
        as_of=as_of,
    )


def copy_to_dataflow(
    *,
    sink_id: GlobalId,
    from_id: GlobalId,
    desc: RelationDesc,
    path: str,
    format: str = "parquet",
    timestamp: int | None = None,
    index_imports: dict[GlobalId, IndexImport] | None = None,
    source_imports: dict[GlobalId, SourceImport] | None = None,
    objects_to_build: list[BuildDesc] | None = None,
) -> DataflowDescription:
    """A one-shot dataflow writing collection `from_id` at one time to the file `path`."""
    _require_transient("copy-to", sink_id)
    if format not in ("parquet", "csv"):
        raise ValueError(f"copy-to format must be 'parquet' or 'csv', got {format!r}")
    return DataflowDescription(
        debug_name=f"copy-to-{sink_id}",
        source_imports=dict(source_imports or {}),
        index_imports=dict(index_imports or {}),
        objects_to_build=list(objects_to_build or []),
        sink_exports={
            sink_id: SinkDesc(
                from_id=from_id,
                from_desc=desc,
                connection=CopyToSink(path=path, format="csv" if format == "csv" else "parquet"),
            )
        },
        as_of=None if timestamp is None else Frontier.at(timestamp),
        until=Frontier.empty() if timestamp is None else single_time_until(timestamp),
    )
