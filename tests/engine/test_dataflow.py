"""Rendering and driving dataflows: frontiers, as_of/until, index imports from snapshots, sink
exports, error collections, and refusal of bad input."""

from __future__ import annotations

import pyarrow as pa
import pytest

from twofold.engine import Arrangement, Dataflow, EvalError, InputError, PlanError
from twofold.protocol import (
    Aggregate,
    BuildDesc,
    Call,
    Column,
    ColumnType,
    Constant,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    IndexDesc,
    IndexImport,
    Join,
    Literal,
    Mfp,
    Plan,
    Reduce,
    RelationDesc,
    SinkDesc,
    SourceImport,
    SubscribeSink,
)

INT = ColumnType("int")
SRC = GlobalId.user(1)
IDX = GlobalId.user(2)
OUT = GlobalId.user(3)
SINK = GlobalId.transient(4)
DESC = RelationDesc(["k", "v"], [INT, INT])
SUM_DESC = RelationDesc(["k", "sum"], [INT, INT])


def source_dataflow(
    plan: Plan,
    rel: RelationDesc = DESC,
    *,
    as_of: int = 0,
    until: Frontier | None = None,
    sink: bool = False,
) -> Dataflow:
    return Dataflow(
        DataflowDescription(
            "test",
            source_imports={SRC: SourceImport("shard", DESC)},
            objects_to_build=[BuildDesc(OUT, plan)],
            index_exports={OUT: (IndexDesc(OUT, [0]), rel)},
            sink_exports={SINK: SinkDesc(OUT, rel, SubscribeSink())} if sink else {},
            as_of=Frontier.at(as_of),
            until=until or Frontier.empty(),
        )
    )


def test_frontier_advances_exactly_as_far_as_inputs_allow() -> None:
    df = source_dataflow(Get(SRC))
    assert not df.step()
    df.push(SRC, [([1, 1], 0, 1), ([2, 2], 3, 1)])
    df.advance_source(SRC, Frontier.at(2))
    assert df.step()
    assert df.frontier == Frontier.at(2)
    assert df.export(OUT).upper == Frontier.at(2)
    assert df.export(OUT).snapshot().read_rows(1) == [([1, 1], 1)]
    assert not df.step()
    df.advance_source(SRC, Frontier.at(5))
    df.step()
    assert df.export(OUT).snapshot().read_rows(4) == [([1, 1], 1), ([2, 2], 1)]
    df.advance_source(SRC, Frontier.empty())
    df.step()
    assert df.frontier.is_empty and df.export(OUT).upper.is_empty


def test_as_of_advances_earlier_updates_and_until_suppresses_later_ones() -> None:
    df = source_dataflow(
        Reduce(Get(SRC), [0], [Aggregate("sum", 1)]), SUM_DESC, as_of=5, until=Frontier.at(8)
    )
    df.push(SRC, [([1, 1], 0, 1), ([1, 2], 4, 1), ([1, 10], 6, 1), ([1, 100], 8, 1)])
    df.advance_source(SRC, Frontier.at(10))
    df.step()
    snap = df.export(OUT).snapshot()
    assert snap.since == Frontier.at(5)
    assert snap.read_rows(5) == [([1, 3], 1)]
    assert snap.read_rows(7) == [([1, 13], 1)]
    assert snap.read_rows(9) == [([1, 13], 1)]  # the update at 8 was suppressed
    with pytest.raises(Exception, match="since"):
        snap.read(4)


def test_single_time_peek_dataflow_reads_one_time() -> None:
    df = source_dataflow(Get(SRC), as_of=3, until=Frontier.at(4))
    df.push(SRC, [([1, 1], 1, 1), ([2, 2], 3, 1), ([3, 3], 4, 1)])
    df.advance_source(SRC, Frontier.at(6))
    df.step()
    assert df.export(OUT).snapshot().read_rows(3) == [([1, 1], 1), ([2, 2], 1)]


def test_constant_appears_at_as_of_without_inputs() -> None:
    df = Dataflow(
        DataflowDescription(
            "const",
            objects_to_build=[BuildDesc(OUT, Constant([([1, 2], 3)]))],
            index_exports={OUT: (IndexDesc(OUT, []), DESC)},
            as_of=Frontier.at(7),
        )
    )
    assert df.step()
    assert df.frontier.is_empty
    assert df.export(OUT).snapshot().read_rows(7) == [([1, 2], 3)]


def index_import_dataflow(
    snapshot_key: list[int], plan: Plan, *, as_of: int
) -> DataflowDescription:
    return DataflowDescription(
        "import",
        index_imports={IDX: IndexImport(IndexDesc(GlobalId.user(10), snapshot_key), DESC)},
        objects_to_build=[BuildDesc(OUT, plan)],
        index_exports={OUT: (IndexDesc(OUT, [0]), SUM_DESC)},
        as_of=Frontier.at(as_of),
    )


def test_index_import_reads_snapshot_at_as_of_then_later_batches() -> None:
    base = Arrangement(DESC, [0])
    base.insert([([1, 1], 0, 1), ([1, 2], 2, 1)], Frontier.at(3))
    desc = index_import_dataflow([0], Reduce(Get(IDX), [0], [Aggregate("sum", 1)]), as_of=2)
    df = Dataflow(desc, {IDX: base.snapshot()})
    df.step()
    assert df.frontier == Frontier.at(3)
    assert df.export(OUT).snapshot().read_rows(2) == [([1, 3], 1)]
    assert df.import_holds()[IDX] == Frontier.at(2)
    # The writer keeps going (merging, compacting no further than the importer's hold); the
    # importer only ever sees immutable snapshots.
    base.insert([([1, 2], 3, -1), ([2, 5], 4, 1)], Frontier.at(5))
    base.compact(df.import_holds()[IDX])
    base.merge_all()
    df.update_index(IDX, base.snapshot())
    df.step()
    out = df.export(OUT).snapshot()
    assert out.read_rows(3) == [([1, 1], 1)]
    assert out.read_rows(4) == [([1, 1], 1), ([2, 5], 1)]
    assert df.import_holds()[IDX] == Frontier.at(4)


def test_index_import_past_as_of_is_refused() -> None:
    base = Arrangement(DESC, [0])
    base.insert([([1, 1], 0, 1)], Frontier.at(5))
    base.compact(Frontier.at(4))
    desc = index_import_dataflow([0], Reduce(Get(IDX), [0], [Aggregate("sum", 1)]), as_of=2)
    with pytest.raises(InputError, match="since"):
        Dataflow(desc, {IDX: base.snapshot()})


def test_sink_export_streams_contiguous_chunks() -> None:
    df = source_dataflow(Reduce(Get(SRC), [0], [Aggregate("sum", 1)]), SUM_DESC, sink=True)
    df.push(SRC, [([1, 1], 0, 1), ([1, 2], 1, 1)])
    df.advance_source(SRC, Frontier.at(1))
    df.step()
    df.advance_source(SRC, Frontier.at(2))
    df.step()
    chunks = df.drain_sink(SINK)
    assert [(c.lower, c.upper) for c in chunks] == [
        (Frontier.at(0), Frontier.at(1)),
        (Frontier.at(1), Frontier.at(2)),
    ]
    assert chunks[0].updates.rows() == [(1, 1, 0, 1)]
    assert sorted(chunks[1].updates.rows()) == [(1, 1, 1, -1), (1, 3, 1, 1)]
    assert df.drain_sink(SINK) == []


def test_errors_reach_the_export_at_their_time_and_retract() -> None:
    plan = Mfp(Get(SRC), map=[Call("div", [Column(0), Column(1)])], project=[0, 2])
    df = source_dataflow(plan, SUM_DESC, sink=True)
    df.push(SRC, [([1, 0], 1, 1), ([1, 0], 2, -1), ([4, 2], 0, 1)])
    df.advance_source(SRC, Frontier.at(3))
    df.step()
    snap = df.export(OUT).snapshot()
    assert snap.read_rows(0) == [([4, 2], 1)]
    with pytest.raises(EvalError, match="division by zero"):
        snap.read_rows(1)
    assert snap.read_rows(2) == [([4, 2], 1)]
    errors = next(c.errors for c in df.drain_sink(SINK))
    assert sorted(errors.rows()) == [("division by zero", 1, 1), ("division by zero", 2, -1)]


def test_bad_input_is_refused_and_loses_nothing() -> None:
    df = source_dataflow(Get(SRC))
    df.push(SRC, [([1, 1], 0, 1)])
    with pytest.raises(InputError):
        df.push(SRC, [([1, "x"], 0, 1)])
    with pytest.raises(InputError):
        df.push(GlobalId.user(99), [([1, 1], 0, 1)])
    df.advance_source(SRC, Frontier.at(2))
    with pytest.raises(InputError, match="before the input's upper"):
        df.push(SRC, [([1, 1], 1, 1)])
    with pytest.raises(InputError, match="regress"):
        df.advance_source(SRC, Frontier.at(1))
    df.step()
    assert df.export(OUT).snapshot().read_rows(1) == [([1, 1], 1)]


def test_arrow_updates_feed_sources() -> None:
    df = source_dataflow(
        Join(Get(SRC), Get(SRC), [0], [0]), RelationDesc(["a", "b", "c", "d"], [INT, INT, INT, INT])
    )
    df.push(
        SRC,
        pa.table({"k": [1, 1], "v": [1, 2], "time": pa.array([0, 0], pa.uint64()), "diff": [1, 1]}),
    )
    df.advance_source(SRC, Frontier.at(1))
    df.step()
    assert len(df.export(OUT).snapshot().read_rows(0)) == 4


def test_unknown_snapshot_and_bad_plan_are_plan_errors() -> None:
    base = Arrangement(DESC, [0])
    with pytest.raises(PlanError):
        Dataflow(DataflowDescription("x"), {IDX: base.snapshot()})
    with pytest.raises(PlanError):
        source_dataflow(Mfp(Get(SRC), filter=[Literal(1)]))


def test_sink_updates_are_consolidated() -> None:
    from twofold.protocol import Negate, UnionAll

    df = source_dataflow(UnionAll([Get(SRC), Negate(Get(SRC)), Get(SRC)]), sink=True)
    df.push(SRC, [([1, 1], 0, 1), ([2, 2], 0, 1)])
    df.advance_source(SRC, Frontier.at(1))
    df.step()
    (chunk,) = df.drain_sink(SINK)
    assert sorted(chunk.updates.rows()) == [(1, 1, 0, 1), (2, 2, 0, 1)]


def test_driver_chosen_as_of_when_the_description_has_none() -> None:
    desc = DataflowDescription(
        "no as_of",
        source_imports={SRC: SourceImport("shard", DESC)},
        objects_to_build=[BuildDesc(OUT, Get(SRC))],
        index_exports={OUT: (IndexDesc(OUT, [0]), DESC)},
    )
    df = Dataflow(desc, as_of=4)
    df.push(SRC, [([1, 1], 2, 1)])
    df.advance_source(SRC, Frontier.at(6))
    df.step()
    snap = df.export(OUT).snapshot()
    assert snap.since == Frontier.at(4)
    assert snap.read_rows(4) == [([1, 1], 1)]
