"""A subscribe bounded by `up_to` ends only once it has delivered every update before `up_to`.

The runtime used to end such a subscribe when the meet of the dataflow's frontier and `up_to`
reached the subscribe's lower — true from the start (the frontier begins at `as_of`, as does the
lower), so the first drain that saw no chunk yet (the dataflow not scheduled, or waiting for its
input) ended the subscribe with an empty-upper batch and no updates, and a history delivered over
several steps was cut after the first. Checked here on the sink's state machine and on workers
driven step by step (`helpers.Workers`), in both runtime modes.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import polars as pl
import pytest
from tests.runtime.helpers import KV, Mode, Workers, unique_url

from twofold.engine import SinkChunk
from twofold.engine.frames import DIFF, TIME
from twofold.protocol import (
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    GlobalId,
    Hello,
    InitializationComplete,
    InstanceConfig,
    Schedule,
    SinkDesc,
    SourceImport,
    SubscribeBatch,
    SubscribeSink,
)
from twofold.runtime.sinks import SubscribeState
from twofold.storage import open_storage
from twofold.testing.helpers import multiset

SUB = GlobalId.transient(1)


def _chunk(lower: int, upper: int, rows: list[tuple[int, str, int, int]]) -> SinkChunk:
    updates = pl.DataFrame(
        {"c0": [r[0] for r in rows], "c1": [r[1] for r in rows],
         TIME: [r[2] for r in rows], DIFF: [r[3] for r in rows]},
        schema={"c0": pl.Int64, "c1": pl.Utf8, TIME: pl.UInt64, DIFF: pl.Int64})
    errors = pl.DataFrame({"error": [], TIME: [], DIFF: []},
                          schema={"error": pl.Utf8, TIME: pl.UInt64, DIFF: pl.Int64})
    return SinkChunk(Frontier.at(lower), Frontier.at(upper), updates, errors)


def _batches(responses: Sequence[object]) -> list[SubscribeBatch]:
    out = []
    for r in responses:
        event = getattr(r, "event", None)
        assert isinstance(event, SubscribeBatch), r
        out.append(event)
    return out


def test_no_chunk_yet_does_not_end_the_subscribe() -> None:
    sub = SubscribeState(SUB, Frontier.at(10), Frontier.at(13))
    assert sub.on_chunks([]) == [] and not sub.ended


def test_ends_after_the_chunk_that_reaches_up_to_and_not_before() -> None:
    sub = SubscribeState(SUB, Frontier.at(10), Frontier.at(13))
    first = _batches(sub.on_chunks([_chunk(10, 12, [(1, "a", 10, 1)])]))
    assert [(b.lower, b.upper, b.updates) for b in first] == [
        (Frontier.at(10), Frontier.at(12), [(10, [1, "a"], 1)])]
    assert not sub.ended
    # The whole rest of [as_of, up_to) and beyond in one chunk (the engine already dropped
    # times at or after up_to): that batch, then the end.
    last = _batches(sub.on_chunks([_chunk(12, 20, [(2, "b", 12, 1)])]))
    assert [(b.lower, b.upper, b.updates) for b in last] == [
        (Frontier.at(12), Frontier.at(20), [(12, [2, "b"], 1)]),
        (Frontier.at(20), Frontier.empty(), [])]
    assert sub.ended and sub.on_chunks([_chunk(20, 30, [])]) == []


def test_up_to_at_as_of_ends_at_once_with_nothing() -> None:
    sub = SubscribeState(SUB, Frontier.at(10), Frontier.at(10))
    assert [(b.lower, b.upper, b.updates) for b in _batches(sub.on_chunks([]))] == [
        (Frontier.at(10), Frontier.empty(), [])]


def test_without_up_to_it_never_ends_by_itself() -> None:
    sub = SubscribeState(SUB, Frontier.at(10))
    assert len(sub.on_chunks([_chunk(10, 1_000, [])])) == 1 and not sub.ended


@pytest.mark.parametrize("mode", ["one", "two"])
@pytest.mark.parametrize("schedule_late", [True, False])
def test_up_to_subscribe_fed_over_steps(mode: Mode, schedule_late: bool) -> None:
    storage = open_storage(unique_url("sub-up-to"))
    t = storage.create_table("t", KV)
    t1 = t.write([[1, "a"], [2, "b"]], 1)
    w = Workers(mode, storage)
    try:
        # Timestamps are wall-clock milliseconds: `up_to` an hour on, so that the retraction
        # below lands before it however slowly a loaded machine runs the steps in between
        # (at `t1 + 1_000` a second's delay put it past `up_to`, where it rightly was not
        # delivered: the flaky `{(1, 'a'), (2, 'b')} != {(2, 'b')}`).
        up_to = t1 + 3_600_000
        src = GlobalId.user(1)
        w.send(Hello(uuid.uuid4()), CreateInstance(InstanceConfig()), InitializationComplete(),
               CreateDataflow(DataflowDescription(
                   "sub", source_imports={src: SourceImport(t.shard.shard_id, KV)},
                   sink_exports={SUB: SinkDesc(src, KV, SubscribeSink(),
                                               up_to=Frontier.at(up_to))},
                   as_of=Frontier.at(t1))))
        if schedule_late:
            w.settle(rounds=3)  # created and stepped, not yet scheduled: nothing may end it
            assert SUB not in w.check.subscribe_ended
        w.send(Schedule(SUB))
        w.settle(lambda: bool(w.check.subscribes.get(SUB)), rounds=5)
        assert SUB not in w.check.subscribe_ended, "ended after its first batch"
        t2 = t.write([[1, "a"]], -1)
        assert t2 < up_to
        w.settle(lambda: any(Frontier.at(t2) < b.upper
                             for b in _batches(w.check.subscribes[SUB])), rounds=5)
        t.advance_to(Frontier.at(up_to + 5))
        t.write([[3, "c"]], 1)  # past up_to
        w.settle(lambda: SUB in w.check.subscribe_ended)
        events = _batches(list(w.check.subscribes[SUB]))
        assert events[-1].upper == Frontier.empty()
        got = [u for e in events for u in e.updates or []]
        assert all(t1 <= time < up_to for time, _, _ in got)
        assert multiset((tuple(row), diff) for _, row, diff in got) == {(2, "b"): 1}
        assert sorted(got) == [(t1, [1, "a"], 1), (t1, [2, "b"], 1), (t2, [1, "a"], -1)]
    finally:
        w.close()
        storage.close()
