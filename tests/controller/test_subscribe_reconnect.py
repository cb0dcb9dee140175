"""A subscribe replayed after a reconnect overlaps what was delivered by one step: the controller
trims the overlap at exactly the delivered upper — updates before it were delivered, updates *at*
it were not (`SubscribeMerger`). The other reconnect tests carry no update at that time, so an
off-by-one in the trimming (`>` for `>=`) passed them; these put updates on both sides of it."""

from __future__ import annotations

from twofold.controller.dataflows import subscribe_dataflow
from twofold.protocol import (
    AllowCompaction,
    CreateDataflow,
    Frontier,
    GlobalId,
    IndexDesc,
    IndexImport,
    InitializationComplete,
    SubscribeBatch,
    SubscribeResponse,
)

from .fakes import FakeReplica
from .helpers import DESC, index_dataflow
from .test_controller import controller

U1 = GlobalId.user(1)
at = Frontier.at


async def test_replayed_updates_at_the_delivered_upper_are_delivered_once() -> None:
    fake = FakeReplica()
    async with controller(fake) as c:
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        t = c.new_transient_id()
        imp = {U1: IndexImport(desc=IndexDesc(on_id=U1, key=[0]), relation=DESC)}
        sub = await c.subscribe(subscribe_dataflow(sink_id=t, from_id=U1, desc=DESC,
                                                   index_imports=imp))
        await fake.until(lambda: any(isinstance(x, CreateDataflow) and t in x.dataflow.sink_exports
                                     for x in fake.session.commands))
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(0), upper=at(3), updates=[(0, [1, 1], 1), (2, [2, 2], 1)])))
        first = await anext(sub)
        assert (first.lower, first.upper) == (at(0), at(3))
        await fake.until(lambda: AllowCompaction(id=t, frontier=at(2)) in fake.session.commands)
        fake.kill(ConnectionResetError("reset"))
        await fake.until(lambda: len(fake.sessions) == 2 and InitializationComplete()
                         in fake.session.commands)
        # The replay restarts one step behind (its snapshot at 2), and time 3 — the delivered
        # upper — holds updates that were never delivered: an insert and a retraction.
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(0), upper=at(5),
            updates=[(2, [1, 1], 1), (2, [2, 2], 1), (3, [3, 3], 1), (3, [1, 1], -1),
                     (4, [4, 4], 1)])))
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(5), upper=Frontier.empty(), updates=[])))
        rest = [b async for b in sub]
        assert [(b.lower, b.upper, b.updates) for b in rest] == [
            (at(3), at(5), [(3, [3, 3], 1), (3, [1, 1], -1), (4, [4, 4], 1)]),
            (at(5), Frontier.empty(), []),
        ]
    await fake.stop()


async def test_a_replay_ending_at_the_delivered_upper_delivers_nothing() -> None:
    fake = FakeReplica()
    async with controller(fake) as c:
        t = c.new_transient_id()
        sub = await c.subscribe(subscribe_dataflow(sink_id=t, from_id=t, desc=DESC,
                                                   as_of=at(0)))
        await fake.until(lambda: any(isinstance(x, CreateDataflow) and t in x.dataflow.sink_exports
                                     for x in fake.session.commands))
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(0), upper=at(3), updates=[(2, [2, 2], 1)])))
        assert (await anext(sub)).upper == at(3)
        fake.kill(ConnectionResetError("reset"))
        await fake.until(lambda: len(fake.sessions) == 2 and InitializationComplete()
                         in fake.session.commands)
        # A batch ending exactly at the delivered upper is a duplicate; the next one starts there.
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(0), upper=at(3), updates=[(2, [2, 2], 1)])))
        fake.session.send(SubscribeResponse(id=t, event=SubscribeBatch(
            lower=at(3), upper=Frontier.empty(), updates=[(3, [3, 3], 1)])))
        rest = [b async for b in sub]
        assert [(b.lower, b.upper, b.updates) for b in rest] == [
            (at(3), Frontier.empty(), [(3, [3, 3], 1)]),
        ]
    await fake.stop()
