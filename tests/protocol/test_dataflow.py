"""DataflowDescription's derived predicates, which the multiplexer and runtimes route by."""

from collections.abc import Sequence

import pytest
from hypothesis import given

from twofold.protocol import (
    MAX_TIME,
    ColumnType,
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
from twofold.testing.strategies import (
    dataflow_descriptions,
    non_peek_dataflows,
    peek_dataflows,
)

DESC = RelationDesc(["a"], [ColumnType("int")])
U, T = GlobalId.user, GlobalId.transient
AT5, AT6 = Frontier.at(5), Frontier.at(6)


def index_export(on: GlobalId) -> tuple[IndexDesc, RelationDesc]:
    return IndexDesc(on, [0]), DESC


def sink(conn: SinkConnection) -> SinkDesc:
    return SinkDesc(U(1), DESC, conn)


def df(
    index_ids: Sequence[GlobalId] = (),
    sinks: dict[GlobalId, SinkConnection] | None = None,
    as_of: Frontier | None = AT5,
    until: Frontier = AT6,
) -> DataflowDescription:
    return DataflowDescription(
        "d",
        index_exports={i: index_export(U(1)) for i in index_ids},
        sink_exports={i: sink(c) for i, c in (sinks or {}).items()},
        as_of=as_of,
        until=until,
    )


def test_export_ids_are_index_exports_then_sinks_in_insertion_order() -> None:
    d = df([U(9), U(3)], {T(1): SubscribeSink(), U(2): MaterializedViewSink("s")})
    assert d.export_ids() == [U(9), U(3), T(1), U(2)]


def test_import_ids_are_index_imports_then_sources() -> None:
    d = DataflowDescription(
        "d",
        source_imports={U(7): SourceImport("shard", DESC), U(1): SourceImport("s2", DESC)},
        index_imports={U(9): IndexImport(IndexDesc(U(7), [0]), DESC), U(2): IndexImport(
            IndexDesc(U(1), []), DESC)},
    )  # fmt: skip
    assert d.import_ids() == [U(9), U(2), U(7), U(1)]


def test_sink_ids_by_connection_kind() -> None:
    d = df(
        [U(100)],
        {
            T(1): SubscribeSink(),
            U(2): MaterializedViewSink("s"),
            T(3): CopyToSink("/tmp/x.parquet"),
            T(4): SubscribeSink(),
            U(5): MaterializedViewSink("s2"),
            T(6): CopyToSink("/tmp/x.csv", "csv"),
        },
    )
    assert d.subscribe_ids() == [T(1), T(4)]
    assert d.persist_sink_ids() == [U(2), U(5)]
    assert d.copy_to_ids() == [T(3), T(6)]


def test_is_transient_requires_every_export_transient() -> None:
    assert df([T(1), T(2)], {T(3): SubscribeSink()}).is_transient()
    assert not df([T(1), U(2)]).is_transient()
    assert not df([T(1)], {U(3): MaterializedViewSink("s")}).is_transient()
    assert not df([GlobalId.system(1)]).is_transient()
    assert not df([GlobalId.introspection(1)]).is_transient()


def test_is_transient_is_vacuously_true_without_exports() -> None:
    assert df().is_transient()


@pytest.mark.parametrize(
    ("as_of", "until", "expected"),
    [
        (Frontier.at(5), Frontier.at(6), True),
        (Frontier.at(0), Frontier.at(1), True),
        (Frontier.at(5), Frontier.at(7), False),
        (Frontier.at(5), Frontier.at(5), False),
        (Frontier.at(5), Frontier.empty(), False),
        (Frontier.at(MAX_TIME), Frontier.empty(), True),
        (Frontier.at(MAX_TIME - 1), Frontier.at(MAX_TIME), True),
        (Frontier.at(MAX_TIME - 1), Frontier.empty(), False),
        (None, Frontier.at(1), False),
        (None, Frontier.empty(), False),
        (Frontier.empty(), Frontier.empty(), False),
    ],
)
def test_is_single_time(as_of: Frontier | None, until: Frontier, expected: bool) -> None:
    assert df(as_of=as_of, until=until).is_single_time() is expected


def test_is_peek_dataflow() -> None:
    assert df([T(1)]).is_peek_dataflow()
    assert df().is_peek_dataflow()  # vacuously transient, single time
    assert df([T(1)], {T(2): MaterializedViewSink("s")}).is_peek_dataflow()
    assert not df([U(1)]).is_peek_dataflow()  # durable export
    assert not df([T(1)], until=Frontier.empty()).is_peek_dataflow()  # not single time
    assert not df([T(1)], as_of=None).is_peek_dataflow()
    assert not df([T(1)], {T(2): SubscribeSink()}).is_peek_dataflow()
    assert not df([T(1)], {T(2): CopyToSink("/tmp/f")}).is_peek_dataflow()
    assert not df([], {T(2): CopyToSink("/tmp/f")}).is_peek_dataflow()


@given(dataflow_descriptions())
def test_predicates_agree_with_their_definitions(d: DataflowDescription) -> None:
    exports = d.export_ids()
    assert exports == list(d.index_exports) + list(d.sink_exports)
    assert d.import_ids() == list(d.index_imports) + list(d.source_imports)
    by_kind = d.subscribe_ids() + d.copy_to_ids() + d.persist_sink_ids()
    assert sorted(by_kind) == sorted(d.sink_exports)
    assert d.is_transient() == all(i.is_transient for i in exports)
    t = None if d.as_of is None else d.as_of.time
    single = t is not None and (d.until == Frontier.at(t + 1) if t < MAX_TIME else d.until.is_empty)
    assert d.is_single_time() == single
    assert d.is_peek_dataflow() == (
        d.is_transient() and single and not d.subscribe_ids() and not d.copy_to_ids()
    )


@given(peek_dataflows())
def test_peek_dataflow_strategy(d: DataflowDescription) -> None:
    assert d.is_peek_dataflow()


@given(non_peek_dataflows())
def test_non_peek_dataflow_strategy(d: DataflowDescription) -> None:
    assert not d.is_peek_dataflow()


def test_an_id_exported_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="exports an id twice"):
        df([T(1)], {T(1): SubscribeSink()})


def test_defaults() -> None:
    d = DataflowDescription("d")
    assert d.as_of is None and d.until == Frontier.empty()
    assert d.export_ids() == [] and d.import_ids() == [] and d.objects_to_build == []
    s = SinkDesc(U(1), DESC, SubscribeSink())
    assert s.with_snapshot and s.up_to == Frontier.empty()
    assert CopyToSink("/x").format == "parquet"
