"""Strategies for dataflow descriptions and their parts: index/source imports, builds, sinks,
exports and `as_of`/`until` (`protocol/dataflow.py`)."""

from __future__ import annotations

from hypothesis import strategies as st

from twofold.protocol import (
    MAX_TIME,
    BuildDesc,
    CopyToSink,
    DataflowDescription,
    Frontier,
    GlobalId,
    IndexDesc,
    IndexImport,
    MaterializedViewSink,
    RelationDesc,
    SinkConnection,
    SinkDesc,
    SourceImport,
    SubscribeSink,
)
from twofold.testing.strategies._common import (
    S,
    _columns,
    _memo,
    _names,
    _small_lists,
)
from twofold.testing.strategies.plans import (
    plans,
)
from twofold.testing.strategies.values import (
    frontiers,
    global_ids,
    relation_descs,
    timestamps,
    transient_ids,
)

# --- dataflows -----------------------------------------------------------------------------


@_memo
def index_descs() -> S[IndexDesc]:
    return st.builds(IndexDesc, global_ids(), _small_lists(_columns(), 3))


@_memo
def source_imports() -> S[SourceImport]:
    return st.builds(SourceImport, _names, relation_descs(), frontiers())


@_memo
def index_imports() -> S[IndexImport]:
    return st.builds(IndexImport, index_descs(), relation_descs())


@_memo
def build_descs(max_depth: int = 2) -> S[BuildDesc]:
    return st.builds(BuildDesc, global_ids(), plans(max_depth))


@_memo
def subscribe_sinks() -> S[SubscribeSink]:
    return st.just(SubscribeSink())


@_memo
def materialized_view_sinks() -> S[MaterializedViewSink]:
    return st.builds(MaterializedViewSink, _names)


@_memo
def copy_to_sinks() -> S[CopyToSink]:
    return st.builds(CopyToSink, _names, st.sampled_from(["parquet", "csv"]))


@_memo
def sink_connections() -> S[SinkConnection]:
    return st.one_of(subscribe_sinks(), materialized_view_sinks(), copy_to_sinks())


@_memo
def sink_descs(connections: S[SinkConnection] | None = None) -> S[SinkDesc]:
    return st.builds(
        SinkDesc,
        global_ids(),
        relation_descs(),
        sink_connections() if connections is None else connections,
        st.booleans(),
        frontiers(),
    )


@_memo
def _index_export() -> S[tuple[IndexDesc, RelationDesc]]:
    return st.tuples(index_descs(), relation_descs())


def _single_time_at(t: int) -> tuple[Frontier | None, Frontier]:
    return Frontier.at(t), Frontier.empty() if t == MAX_TIME else Frontier.at(t + 1)


@_memo
def _single_time() -> S[tuple[Frontier | None, Frontier]]:
    return timestamps().map(_single_time_at)


@_memo
def _as_of_until() -> S[tuple[Frontier | None, Frontier]]:
    return st.one_of(_single_time(), st.tuples(st.one_of(st.none(), frontiers()), frontiers()))


@_memo
def dataflow_descriptions(
    *,
    export_ids: S[GlobalId] | None = None,
    sinks: S[SinkConnection] | None = None,
    as_of_until: S[tuple[Frontier | None, Frontier]] | None = None,
    max_plan_depth: int = 2,
) -> S[DataflowDescription]:
    """Any `DataflowDescription`: peek dataflows and maintained ones alike. Export ids are
    unique and drawn from `export_ids`; sink connections from `sinks` (every kind when `None`,
    no sink exports at all when `st.nothing()`); `as_of`/`until` from `as_of_until` (by
    default single-time half of the time, arbitrary otherwise)."""
    exports_s = st.lists(
        global_ids() if export_ids is None else export_ids, max_size=4, unique=True
    )
    no_sinks = sinks is not None and sinks.is_empty
    n_index_s = st.just(4) if no_sinks else st.integers(0, 4)
    times_s = _as_of_until() if as_of_until is None else as_of_until
    sources_s = st.dictionaries(global_ids(), source_imports(), max_size=2)
    indexes_s = st.dictionaries(global_ids(), index_imports(), max_size=2)
    builds_s = _small_lists(build_descs(max_plan_depth), 2)
    index_export_s = _index_export()
    sink_s = sink_descs(sinks)

    @st.composite
    def dataflow(draw: st.DrawFn) -> DataflowDescription:
        exports = draw(exports_s)
        n_index = draw(n_index_s)
        as_of, until = draw(times_s)
        return DataflowDescription(
            debug_name=draw(_names),
            source_imports=draw(sources_s),
            index_imports=draw(indexes_s),
            objects_to_build=draw(builds_s),
            index_exports={i: draw(index_export_s) for i in exports[:n_index]},
            sink_exports={i: draw(sink_s) for i in exports[n_index:]},
            as_of=as_of,
            until=until,
        )

    return dataflow()


@_memo
def peek_dataflows() -> S[DataflowDescription]:
    """Dataflows the interactive runtime serves (`is_peek_dataflow()` holds): transient index
    exports only, at a single time."""
    return dataflow_descriptions(
        export_ids=transient_ids(), sinks=st.nothing(), as_of_until=_single_time()
    )


@_memo
def non_peek_dataflows() -> S[DataflowDescription]:
    """Dataflows for which `is_peek_dataflow()` is false (maintained ones)."""
    return dataflow_descriptions().filter(lambda d: not d.is_peek_dataflow())
