"""Protocol-level scenarios against whole replicas (`spec/protocol.md` §5, `spec/runtime.md`).

Every scenario runs for `runtimes="one"` and `"two"`, in-process and over TCP, through
`helpers.Driver`, which checks every response against the protocol's obligations (frontier
monotonicity, exactly one peek response, subscribe contiguity, one copy-to response). The
scenarios here add the behaviour-specific expectations: peeks at many times, waiting for `upper`,
`since` errors, lookups/MFP/finishing, result-size limits, drops, subscribes, materialized views,
copy-tos, cancels and bad plans.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from tests.runtime.helpers import (
    KV,
    MODES,
    Mode,
    Transport,
    complete_time,
    multiset,
    replica,
    rows_of,
    table,
)

from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    BuildDesc,
    Call,
    CancelPeek,
    Column,
    ComputeParameters,
    CopyToDropped,
    CopyToRowCount,
    CopyToSink,
    CreateDataflow,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    IndexDesc,
    InstanceConfig,
    LoggingConfig,
    MapFilterProject,
    MaterializedViewSink,
    Mfp,
    OrderKey,
    PeekCanceled,
    PeekError,
    PeekRows,
    RowSetFinishing,
    Schedule,
    SinkDesc,
    SourceImport,
    SubscribeBatch,
    SubscribeDroppedAt,
    SubscribeSink,
    UpdateConfiguration,
)
from twofold.protocol import Literal as Lit
from twofold.storage import Table

pytestmark = pytest.mark.timeout(60)

both = pytest.mark.parametrize("mode", MODES)
transports = pytest.mark.parametrize("transport", ["inproc", "tcp"])


def _source_dataflow(name: str, t: Table, src: GlobalId, as_of: int, **kw: object,
                     ) -> DataflowDescription:
    return DataflowDescription(name, source_imports={src: SourceImport(t.shard.shard_id, t.desc)},
                               as_of=Frontier.at(as_of), **kw)  # type: ignore[arg-type]


@both
@transports
async def test_index_peeks_at_many_times_and_waits_for_upper(mode: Mode,
                                                             transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"], [2, "b"]])
        t1 = complete_time(t)
        await d.start()
        _, idx = await d.index_on_table(t, as_of=t1)
        t2 = t.update([[1, "a"]], [[1, "A"]])
        t3 = t.delete([[2, "b"]])
        t4 = t.insert([[3, "c"], [3, "c"]])
        expected = {
            t1: {(1, "a"): 1, (2, "b"): 1},
            t2: {(1, "A"): 1, (2, "b"): 1},
            t3: {(1, "A"): 1},
            t4: {(1, "A"): 1, (3, "c"): 2},
        }
        for ts, state in expected.items():
            assert multiset(rows_of(await d.peek(idx, ts))) == state, ts
        # A peek at a future time waits for the index's upper to pass it ...
        future = t4 + 1000
        pending = await d.send_peek(idx, future)
        assert multiset(rows_of(await d.peek(idx, t4))) == expected[t4]
        assert pending not in d.check.peek_results, "answered before the upper passed its time"
        # ... and is answered once a write (or an advance) makes it complete.
        t.advance_to(Frontier.at(future + 1))
        assert multiset(rows_of(await d.result(pending))) == expected[t4]
        await d.frontier_reaches(idx, Frontier.at(future + 1))


@both
@transports
async def test_peek_before_since_errors(mode: Mode, transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"]])
        t1 = complete_time(t)
        await d.start()
        _, idx = await d.index_on_table(t, as_of=t1)
        t2 = t.insert([[2, "b"]])
        await d.frontier_reaches(idx, Frontier.at(t2 + 1))
        await d.send(AllowCompaction(idx, Frontier.at(t2)))
        # Once the compaction has been applied (a later write's frontier was reported after it):
        t3 = t.insert([[3, "c"]])
        await d.frontier_reaches(idx, Frontier.at(t3 + 1))
        result = await d.peek(idx, t1)
        assert isinstance(result, PeekError) and "since" in result.message, result
        assert multiset(rows_of(await d.peek(idx, t2))) == {(1, "a"): 1, (2, "b"): 1}


@both
@transports
async def test_peek_right_behind_allow_compaction_errors(mode: Mode,
                                                         transport: Transport) -> None:
    """The since a peek is gated on includes every compaction applied before it on the same
    stream, even before the arrangement has physically compacted (was runtime bug B1)."""
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"]])
        t1 = complete_time(t)
        await d.start()
        _, idx = await d.index_on_table(t, as_of=t1)
        t2 = t.insert([[2, "b"]])
        await d.frontier_reaches(idx, Frontier.at(t2 + 1))
        for _ in range(5):
            await d.send(AllowCompaction(idx, Frontier.at(t2)))
            result = await d.peek(idx, t1)
            assert isinstance(result, PeekError) and "since" in result.message, result


@both
@transports
async def test_lookups_mfp_and_finishing(mode: Mode, transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[k, f"v{k % 3}"] for k in range(20)] + [[5, "v2"], [7, None]])
        ts = complete_time(t)
        await d.start()
        _, idx = await d.index_on_table(t, as_of=ts)
        got = await d.peek(idx, ts, literal_constraints=[[5], [7], [99]])
        assert multiset(rows_of(got)) == {(5, "v2"): 2, (7, "v1"): 1, (7, None): 1}
        mfp = MapFilterProject(map=[Call("mul", [Column(0), Lit(10)])],
                               filter=[Call("eq", [Column(1), Lit("v0")])], project=[2, 1])
        got = await d.peek(idx, ts, mfp=mfp)
        assert multiset(rows_of(got)) == {(k * 10, "v0"): 1 for k in range(0, 20, 3)}
        finishing = RowSetFinishing(order_by=[OrderKey(0, desc=True)], limit=3, offset=1,
                                    project=[0])
        got = await d.peek(idx, ts, finishing=finishing)
        assert rows_of(got) == [([18], 1), ([17], 1), ([16], 1)]
        # A multiplicity spans ranks: key 5 (twice with v2) occupies two of the limit's ranks.
        finishing = RowSetFinishing(order_by=[OrderKey(1, desc=True, nulls_last=True),
                                              OrderKey(0)], limit=3)
        got = await d.peek(idx, ts, finishing=finishing)
        assert rows_of(got) == [([2, "v2"], 1), ([5, "v2"], 2)]


@both
@transports
async def test_max_result_size_from_instance_and_configuration(mode: Mode,
                                                               transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[k, "x" * 50] for k in range(100)])
        ts = complete_time(t)
        await d.start(InstanceConfig(max_result_size=200))
        _, idx = await d.index_on_table(t, as_of=ts)
        big = await d.peek(idx, ts)
        assert isinstance(big, PeekError), big
        small = await d.peek(idx, ts, literal_constraints=[[3]])
        assert rows_of(small) == [([3, "x" * 50], 1)]
        await d.send(UpdateConfiguration(ComputeParameters(max_result_size=1 << 20)))
        assert len(rows_of(await d.peek(idx, ts))) == 100
        await d.send(UpdateConfiguration(ComputeParameters(max_result_size=100)))
        assert isinstance(await d.peek(idx, ts), PeekError)


@both
@transports
async def test_drop_reports_every_kind_empty_once_and_then_errors(mode: Mode,
                                                                  transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"]])
        ts = complete_time(t)
        await d.start()
        _, idx = await d.index_on_table(t, as_of=ts)
        _, other = await d.index_on_table(t, as_of=ts)
        await d.frontier_reaches(idx, Frontier.at(ts + 1))
        await d.send(AllowCompaction(idx, Frontier.empty()))
        for kind in ("write_frontier", "input_frontier", "output_frontier"):
            await d.frontier_reaches(idx, Frontier.empty(), kind)
        result = await d.peek(idx, ts)
        assert isinstance(result, PeekError) and str(idx) in result.message, result
        # More writes and a round trip on another index: nothing more is reported for idx (the
        # checker fails on any report after empty()).
        t2 = t.insert([[2, "b"]])
        await d.frontier_reaches(other, Frontier.at(t2 + 1))
        assert multiset(rows_of(await d.peek(other, t2))) == {(1, "a"): 1, (2, "b"): 1}
        for kind in ("write_frontier", "input_frontier", "output_frontier"):
            assert d.check.distinct(idx, kind)[-1] == Frontier.empty()


@both
@transports
async def test_frontiers_start_at_or_after_as_of_and_never_regress(mode: Mode,
                                                                   transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"]])
        ts = complete_time(t)
        await d.start()
        # An as_of ahead of the table: the first report must already be >= as_of.
        ahead = ts + 500
        _, idx = await d.index_on_table(t, as_of=ahead)
        last = ts
        for i in range(5):
            last = t.insert([[10 + i, "w"]])
        t.advance_to(Frontier.at(ahead + 2))
        await d.frontier_reaches(idx, Frontier.at(ahead + 2))
        reports = d.check.distinct(idx)
        assert reports[0].less_equal(reports[-1]) and Frontier.at(ahead).less_equal(reports[0])
        assert last < ahead


@both
@transports
async def test_subscribe_batches_drop_and_up_to(mode: Mode, transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"]])
        t0 = complete_time(t)
        await d.start()
        src, sub = d.next_id(), d.next_id(GlobalId.transient)
        await d.send(CreateDataflow(_source_dataflow(
            "sub", t, src, t0,
            sink_exports={sub: SinkDesc(src, KV, SubscribeSink())})), Schedule(sub))
        t1 = t.insert([[2, "b"]])
        t2 = t.delete([[1, "a"]])

        def batches() -> list[SubscribeBatch]:
            return [r.event for r in d.check.subscribes[sub]
                    if isinstance(r.event, SubscribeBatch)]

        await d.until(lambda: bool(batches()) and Frontier.at(t2 + 1) <= batches()[-1].upper,
                      "subscribe batches past the last write")
        updates = sorted(u for b in batches() for u in b.updates or [])
        assert updates == sorted([(t0, [1, "a"], 1), (t1, [2, "b"], 1), (t2, [1, "a"], -1)])
        await d.send(AllowCompaction(sub, Frontier.empty()))
        await d.until(lambda: sub in d.check.subscribe_ended, "SubscribeDroppedAt")
        ends = [r.event for r in d.check.subscribes[sub]
                if isinstance(r.event, SubscribeDroppedAt)]
        assert len(ends) == 1 and ends[0].frontier == batches()[-1].upper

        # up_to: the subscribe ends by itself with an empty upper, and nothing follows.
        src2, sub2 = d.next_id(), d.next_id(GlobalId.transient)
        t3 = t.insert([[3, "c"]])
        await d.send(CreateDataflow(_source_dataflow(
            "sub-up-to", t, src2, t1,
            sink_exports={sub2: SinkDesc(src2, KV, SubscribeSink(), up_to=Frontier.at(t3))})),
            Schedule(sub2))
        await d.until(lambda: sub2 in d.check.subscribe_ended, "the up_to subscribe to end")
        events = [r.event for r in d.check.subscribes[sub2]]
        assert all(isinstance(e, SubscribeBatch) for e in events)
        last = events[-1]
        assert isinstance(last, SubscribeBatch) and last.upper == Frontier.empty()
        got = sorted(u for e in events if isinstance(e, SubscribeBatch) for u in e.updates or [])
        assert all(t1 <= time < t3 for time, _, _ in got)
        # The snapshot at t1 ({1a, 2b}), then t2's retraction of 1a; t3's insert is past up_to.
        assert multiset((row, diff) for _, row, diff in got) == {(2, "b"): 1}
        await d.send(AllowCompaction(sub2, Frontier.empty()))
        # A round trip after the drop: the checker fails on anything after the end.
        _, idx = await d.index_on_table(t)
        await d.peek(idx, complete_time(t))


@both
@transports
async def test_materialized_view_writes_only_after_allow_writes(mode: Mode,
                                                                transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"], [2, "b"]])
        t0 = complete_time(t)
        await d.start()
        src, mv = d.next_id(), d.next_id()
        shard_id = f"mv/{mv}"
        await d.send(CreateDataflow(_source_dataflow(
            "mv", t, src, t0,
            sink_exports={mv: SinkDesc(src, KV, MaterializedViewSink(shard_id))})), Schedule(mv))
        # An index created after the view, on the same input: once it has caught up, the view's
        # dataflow (stepped before it, on the same runtime) has computed up to there as well.
        _, idx = await d.index_on_table(t, as_of=t0)
        t1 = t.insert([[3, "c"]])
        await d.frontier_reaches(idx, Frontier.at(t1 + 1))
        await d.peek(idx, t1)
        mv_shard = storage.create_shard(shard_id, KV)
        assert mv_shard.upper.less_equal(Frontier.at(t0)), "the view wrote before AllowWrites"
        await d.send(AllowWrites(mv))
        await d.frontier_reaches(mv, Frontier.at(t1 + 1))
        data = mv_shard.snapshot(t1).to_pylist()
        got = {(r["k"], r["v"]): 0 for r in data}
        for r in data:
            got[(r["k"], r["v"])] += r["diff"]
        assert {k for k, v in got.items() if v} == {(1, "a"), (2, "b"), (3, "c")}
        await d.send(AllowCompaction(mv, Frontier.empty()))
        await d.frontier_reaches(mv, Frontier.empty())


@both
async def test_materialized_view_first_report_is_at_as_of(mode: Mode) -> None:
    async with replica(mode) as (d, storage):
        t = table(storage, [[1, "a"]])
        t0 = complete_time(t)
        await d.start()
        src, mv = d.next_id(), d.next_id()
        await d.send(CreateDataflow(_source_dataflow(
            "mv", t, src, t0,
            sink_exports={mv: SinkDesc(src, KV, MaterializedViewSink(f"mv/{mv}"))})),
            Schedule(mv))
        # The checker fails on a first report below as_of; without AllowWrites a correct
        # replica reports at(t0) (or nothing) while the view waits.
        await d.until(lambda: d.check.last(mv) is not None, "the view's first report")
        first = d.check.distinct(mv)[0]
        assert Frontier.at(t0).less_equal(first)


@both
@transports
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
async def test_copy_to_writes_once_or_reports_dropped(
        mode: Mode, transport: Transport, fmt: Literal["parquet", "csv"], tmp_path: Path) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"], [2, "b"], [2, "b"]])
        ts = complete_time(t)
        await d.start()
        src, cp = d.next_id(), d.next_id(GlobalId.transient)
        path = tmp_path / f"out.{fmt}"
        await d.send(CreateDataflow(_source_dataflow(
            "copy", t, src, ts, until=Frontier.at(ts + 1),
            sink_exports={cp: SinkDesc(src, KV, CopyToSink(str(path), fmt))})), Schedule(cp))
        await d.until(lambda: bool(d.check.copy_tos[cp]), "the CopyToResponse")
        assert d.check.copy_tos[cp][0].result == CopyToRowCount(3)
        written = pq.read_table(path) if fmt == "parquet" else pacsv.read_csv(path)
        assert sorted(map(tuple, (r.values() for r in written.to_pylist()))) == [
            (1, "a"), (2, "b"), (2, "b")]
        await d.send(AllowCompaction(cp, Frontier.empty()))

        # Dropped before it could run (its time is not complete yet): exactly CopyToDropped.
        src2, cp2 = d.next_id(), d.next_id(GlobalId.transient)
        future = ts + 10_000
        await d.send(CreateDataflow(_source_dataflow(
            "copy-dropped", t, src2, future, until=Frontier.at(future + 1),
            sink_exports={cp2: SinkDesc(src2, KV, CopyToSink(str(tmp_path / "never"), fmt))})),
            Schedule(cp2), AllowCompaction(cp2, Frontier.empty()))
        await d.until(lambda: bool(d.check.copy_tos[cp2]), "CopyToDropped")
        assert d.check.copy_tos[cp2][0].result == CopyToDropped()
        assert not (tmp_path / "never").exists()


@both
@transports
async def test_cancels_racing_completions_get_exactly_one_response(mode: Mode,
                                                                   transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[k, "x"] for k in range(50)])
        ts = complete_time(t)
        await d.start()
        _, idx = await d.index_on_table(t, as_of=ts)
        await d.frontier_reaches(idx, Frontier.at(ts + 1))
        ready = [await d.send_peek(idx, ts) for _ in range(30)]
        waiting = [await d.send_peek(idx, ts + 5_000 + i) for i in range(10)]
        for u in ready + waiting:
            await d.send(CancelPeek(u))
        for u in ready + waiting:
            await d.result(u)
        for u in waiting:
            assert isinstance(d.check.peek_results[u], PeekCanceled)
        for u in ready:
            r = d.check.peek_results[u]
            assert isinstance(r, PeekCanceled) or (isinstance(r, PeekRows) and len(r.rows) == 50)
        # A cancel for an answered peek produces nothing; the futures completing later neither.
        t.advance_to(Frontier.at(ts + 6_000))
        await d.frontier_reaches(idx, Frontier.at(ts + 6_000))
        await d.peek(idx, ts + 5_999)
        assert sum(1 for r in d.log if getattr(r, "uuid", None) in set(ready + waiting)) == 40


_TYPE_ERROR = Call("add", [Column(1), Lit(1)])  # str + int
_DIV_ZERO = Call("div", [Lit(1), Column(0)])  # 1 / 0 on the row with k = 0

@pytest.mark.parametrize("mode,case", [
    ("one", "type-error"), ("two", "type-error"), ("one", "div-zero"), ("two", "div-zero")])
async def test_reads_of_bad_plans_error(mode: Mode, case: str) -> None:
    async with replica(mode) as (d, storage):
        t = table(storage, [[1, "a"], [0, "z"]])
        ts = complete_time(t)
        await d.start()
        expr = _TYPE_ERROR if case == "type-error" else _DIV_ZERO
        src, mid, idx = d.next_id(), d.next_id(GlobalId.transient), d.next_id()
        out = KV.__class__(["k", "v", "x"], [*KV.types, KV.types[0]])
        await d.send(CreateDataflow(_source_dataflow(
            case, t, src, ts, objects_to_build=[BuildDesc(mid, Mfp(input=Get(src), map=[expr]))],
            index_exports={idx: (IndexDesc(mid, [0]), out)})), Schedule(idx))
        result = await d.peek(idx, ts, timeout=5.0)
        assert isinstance(result, PeekError), result


@both
async def test_reads_of_a_failed_dataflow_name_the_failure(mode: Mode) -> None:
    async with replica(mode) as (d, storage):
        t = table(storage, [[1, "a"]])
        ts = complete_time(t)
        await d.start()
        src, mid, idx = d.next_id(), d.next_id(GlobalId.transient), d.next_id()
        out = KV.__class__(["k", "v", "x"], [*KV.types, KV.types[0]])
        await d.send(CreateDataflow(_source_dataflow(
            "type-error", t, src, ts,
            objects_to_build=[BuildDesc(mid, Mfp(input=Get(src), map=[_TYPE_ERROR]))],
            index_exports={idx: (IndexDesc(mid, [0]), out)})), Schedule(idx))
        result = await d.peek(idx, ts, timeout=5.0)
        assert isinstance(result, PeekError) and "argument 0 is str" in result.message, result


@both
@transports
async def test_cancels_racing_peeks_that_become_ready(mode: Mode, transport: Transport) -> None:
    """Peeks at future times become ready one by one (the table advances) while cancels for
    them arrive: each still gets exactly one response, and any rows it gets are right."""
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"]])
        ts = complete_time(t)
        await d.start()
        _, idx = await d.index_on_table(t, as_of=ts)
        peeks = [(await d.send_peek(idx, ts + i), ts + i) for i in range(1, 41)]
        for i, (u, at) in enumerate(peeks):
            t.advance_to(Frontier.at(at + 1))  # makes this peek (and earlier ones) ready
            if i % 2 == 0:
                await d.send(CancelPeek(u))
        t.advance_to(Frontier.at(ts + 100))
        for u, _ in peeks:
            await d.result(u)
        for i, (u, _) in enumerate(peeks):
            r = d.check.peek_results[u]
            if i % 2:
                assert isinstance(r, PeekRows) and multiset(r.rows) == {(1, "a"): 1}, r
            else:
                assert isinstance(r, PeekCanceled) or multiset(rows_of(r)) == {(1, "a"): 1}


@both
@transports
async def test_bad_plans_do_not_crash_the_replica(mode: Mode, transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"], [0, "z"]])
        ts = complete_time(t)
        await d.start()
        for name, expr in [("type-error", _TYPE_ERROR), ("div-zero", _DIV_ZERO)]:
            src, mid, idx = d.next_id(), d.next_id(GlobalId.transient), d.next_id()
            out = KV.__class__(["k", "v", "x"], [*KV.types, KV.types[0]])
            await d.send(CreateDataflow(_source_dataflow(
                name, t, src, ts,
                objects_to_build=[BuildDesc(mid, Mfp(input=Get(src), map=[expr]))],
                index_exports={idx: (IndexDesc(mid, [0]), out)})), Schedule(idx))
        # A peek whose MFP does not type-check errors; the replica keeps serving.
        _, good = await d.index_on_table(t, as_of=ts)
        bad = MapFilterProject(filter=[Call("lt", [Column(1), Lit(3)])])
        assert isinstance(await d.peek(good, ts, mfp=bad), PeekError)
        assert multiset(rows_of(await d.peek(good, ts))) == {(1, "a"): 1, (0, "z"): 1}




@both
@transports
async def test_replay_after_hello_answers_from_the_republished_index(
        mode: Mode, transport: Transport) -> None:
    """A reconnecting controller replays creates and peeks in one burst after `Hello`: the
    replayed peek (which may reach interactive before maintenance republishes) waits and
    answers from the new iteration's index, never from an empty placeholder."""
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"]])
        t0 = complete_time(t)
        await d.start()
        src, idx = await d.index_on_table(t, as_of=t0)
        t1 = t.insert([[2, "b"]])
        assert multiset(rows_of(await d.peek(idx, t1))) == {(1, "a"): 1, (2, "b"): 1}
        t2 = t.delete([[1, "a"]])
        for _ in range(3):
            await d.start()  # Hello, CreateInstance, InitializationComplete
            await d.index_on_table(t, as_of=t0, ids=(src, idx))  # the replayed create
            pending = [await d.send_peek(idx, ts) for ts in (t0, t1, t2)]
            got = [multiset(rows_of(await d.result(u))) for u in pending]
            assert got == [{(1, "a"): 1}, {(1, "a"): 1, (2, "b"): 1}, {(2, "b"): 1}]


@both
@transports
async def test_introspection_indexes_are_peekable_and_droppable(mode: Mode,
                                                                transport: Transport) -> None:
    async with replica(mode, transport) as (d, storage):
        t = table(storage, [[1, "a"]])
        log = GlobalId.introspection(1)
        await d.start(InstanceConfig(logging=LoggingConfig(
            interval_ms=20, enable_logging=True, index_logs={"frontiers": log})))
        _, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)

        def logged() -> bool:
            return d.check.last(log) is not None and len(d.check.distinct(log)) >= 3

        await d.until(logged, "the frontiers log to advance a few times")
        at = d.check.distinct(log)[-1].time
        assert at is not None
        rows = multiset(rows_of(await d.peek(log, at - 1)))
        assert any(row[0] == str(idx) for row in rows), rows
        await d.send(AllowCompaction(log, Frontier.empty()))
        await d.frontier_reaches(log, Frontier.empty())
        # A round trip after the drop: the checker fails on any later report for the log.
        await d.peek(idx, complete_time(t))
