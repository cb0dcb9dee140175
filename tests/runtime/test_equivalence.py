"""One runtime and two runtimes are the same replica to a controller (a hypothesis property).

The same random workload — table writes, peeks at earlier write positions (plain, by literal
key, through an MFP, with a finishing), peek dataflows, compactions and finally a drop — runs
against a `runtimes="one"` and a `runtimes="two"` replica, each on its own storage. Storage
timestamps are wall-clock milliseconds, so the two runs have different absolute times;
everything is compared by **write position** (the i-th write of the workload).

What must be identical, and why exactly that:
- every peek's answer (rows and multiplicities; row order too when the finishing orders), and
  the plain peeks also equal an in-test oracle — a read at a complete time is determined by
  the data, whatever the runtimes' timing;
- the index's write frontier, as a sequence of write positions, is strictly increasing in both
  runs, every report is an upper the table really had (its `as_of`, or just past one of the
  writes), it ends at the last write before the drop, then `empty()` — and nothing after.
What may differ: *which* intermediate positions get reported. A runtime reports where its
polling found the shard, so one run may skip a position the other reports; requiring identical
sequences would test the scheduler, not the protocol.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.runtime.helpers import KV, Driver, Mode, as_multiset, replica, table

from twofold.protocol import (
    Aggregate,
    AllowCompaction,
    BuildDesc,
    Call,
    Column,
    CreateDataflow,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    IndexDesc,
    IndexImport,
    MapFilterProject,
    OrderKey,
    PeekRows,
    Reduce,
    RelationDesc,
    RowSetFinishing,
    Schedule,
)
from twofold.protocol import Literal as Lit
from twofold.testing.profiles import examples

Op = tuple[Any, ...]

ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), st.lists(
            st.tuples(st.integers(0, 5), st.sampled_from(["a", "b", None])),
            min_size=1, max_size=4)),
        st.tuples(st.just("delete"), st.integers(0, 10)),
        st.tuples(st.just("peek"), st.integers(0, 20), st.integers(0, 3)),
        st.tuples(st.just("compact"), st.integers(0, 20)),
        st.tuples(st.just("peek_df"), st.integers(0, 20)),
    ),
    min_size=1, max_size=12)

QUERIES: list[dict[str, Any]] = [
    {},
    {"literal_constraints": [[1], [3]]},
    {"mfp": MapFilterProject(filter=[Call("ge", [Column(0), Lit(2)])], project=[1, 0])},
    {"finishing": RowSetFinishing(order_by=[OrderKey(1, desc=True), OrderKey(0)], limit=2)},
]
COUNTS = RelationDesc(["v", "n"], [KV.types[1], KV.types[0]])


class Run:
    """The observable outcome of one workload on one replica, by write position."""

    def __init__(self) -> None:
        self.answers: list[Any] = []
        self.positions: list[int | str] = []


async def run_workload(mode: Mode, ops: list[Op]) -> Run:
    out = Run()
    async with replica(mode) as (d, storage):
        t = table(storage, [])
        times = [t.insert([[0, "a"]])]
        log: list[tuple[list[Any], int]] = [([0, "a"], 0)]  # (row, position)
        present: list[list[Any]] = [[0, "a"]]
        await d.start()
        src, idx = await d.index_on_table(t, as_of=times[0])
        since = 0
        for op in ops:
            match op:
                case ("insert", rows):
                    new = [[k, v] for k, v in rows]
                    times.append(t.insert(new))
                    log.extend((r, len(times) - 1) for r in new)
                    present.extend(new)
                case ("delete", i):
                    if not present:
                        continue
                    row = present.pop(i % len(present))
                    times.append(t.delete([row]))
                    log.append((row, -(len(times) - 1)))
                case ("peek", j, q):
                    pos = max(j % len(times), since)
                    result = await d.peek(idx, times[pos], **QUERIES[q])
                    assert isinstance(result, PeekRows), (op, result)
                    rows = result.rows if q == 3 else sorted(
                        as_multiset(result.rows).items(), key=repr)
                    out.answers.append((pos, q, rows))
                    if q == 0:
                        assert as_multiset(result.rows) == _oracle(log, pos), (op, mode)
                case ("compact", j):
                    since = max(since, j % len(times))
                    await d.send(AllowCompaction(idx, Frontier.at(times[since])))
                case ("peek_df", j):
                    pos = max(j % len(times), since)
                    out.answers.append((pos, "df", await _peek_dataflow(d, src, idx, times[pos])))
        await d.frontier_reaches(idx, Frontier.at(times[-1] + 1))
        await d.send(AllowCompaction(idx, Frontier.empty()))
        await d.frontier_reaches(idx, Frontier.empty())
        uppers = {Frontier.at(times[0]): "as_of"} | {
            Frontier.at(ts + 1): i for i, ts in enumerate(times)}
        for f in d.check.distinct(idx):
            assert f in uppers or f.is_empty, f"{mode}: {f} was never an upper of the table"
            out.positions.append("empty" if f.is_empty else uppers[f])
    return out


def _oracle(log: list[tuple[list[Any], int]], pos: int) -> dict[tuple[Any, ...], int]:
    return as_multiset((row, 1 if p >= 0 else -1) for row, p in log if abs(p) <= pos)


async def _peek_dataflow(d: Driver, src: GlobalId, idx: GlobalId, ts: int) -> list[Any]:
    """Count rows per value through a peek dataflow (interactive's, with two runtimes)."""
    mid, export = d.next_id(GlobalId.transient), d.next_id(GlobalId.transient)
    await d.send(CreateDataflow(DataflowDescription(
        "counts", index_imports={idx: IndexImport(IndexDesc(src, [0]), KV)},
        objects_to_build=[BuildDesc(mid, Reduce(Get(idx), [1], [Aggregate("count")]))],
        index_exports={export: (IndexDesc(mid, [0]), COUNTS)},
        as_of=Frontier.at(ts), until=Frontier.at(ts + 1))), Schedule(export))
    result = await d.peek(export, ts)
    await d.send(AllowCompaction(export, Frontier.empty()))
    assert isinstance(result, PeekRows), result
    return sorted(as_multiset(result.rows).items(), key=repr)


def _check_positions(run: Run, last: int) -> None:
    numeric = [p for p in run.positions if p not in ("as_of", "empty")]
    assert run.positions[-1] == "empty"
    assert "empty" not in run.positions[:-1]
    assert numeric == sorted(set(numeric)), run.positions  # strictly increasing
    assert numeric and numeric[-1] == last, run.positions


@settings(max_examples=examples(40), deadline=None)
@given(ops=ops_st)
def test_one_and_two_runtimes_answer_identically(ops: list[Op]) -> None:
    async def both() -> tuple[Run, Run]:
        return await run_workload("one", ops), await run_workload("two", ops)

    one, two = asyncio.run(asyncio.wait_for(both(), 60))
    assert one.answers == two.answers
    writes = 1 + sum(1 for op in ops if op[0] in ("insert", "delete"))
    # Deletes of an empty table are skipped identically in both runs, so the write counts agree.
    last = max(p for p in one.positions if isinstance(p, int))
    assert last == max(p for p in two.positions if isinstance(p, int)) and last < writes
    _check_positions(one, last)
    _check_positions(two, last)


@settings(max_examples=examples(6), deadline=None)
@given(ops=ops_st)
def test_one_runtime_and_two_processes_answer_identically(ops: list[Op]) -> None:
    """The same property with maintenance in a child process (`spec/placement.md`): fewer
    examples, since each starts a process."""
    async def both() -> tuple[Run, Run]:
        return await run_workload("one", ops), await run_workload("procs", ops)

    one, procs = asyncio.run(asyncio.wait_for(both(), 90))
    assert one.answers == procs.answers
    last = max(p for p in one.positions if isinstance(p, int))
    assert last == max(p for p in procs.positions if isinstance(p, int))
    _check_positions(one, last)
    _check_positions(procs, last)
