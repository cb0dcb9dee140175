"""Property: across random interleavings of peeks, answers and connection failures on two
replicas, every peek is answered exactly once with the right rows, nothing is left pending, and
the reduced history forgets every finished peek."""

from __future__ import annotations

import asyncio
from collections import Counter
from functools import partial
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.controller.backoff import Backoff
from twofold.controller.controller import Controller
from twofold.controller.instance import Effects, PeekAnswered
from twofold.protocol import DecodeError, GlobalId, InitializationComplete, Peek
from twofold.testing.profiles import examples

from .fakes import FakeReplica, Session
from .helpers import index_dataflow

U1 = GlobalId.user(1)
ROWS = [([1, 10], 1)]


class CountingController(Controller):
    """Counts peek deliveries, to prove none is delivered twice."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.answered: Counter[UUID] = Counter()

    def _apply(self, fx: Effects) -> None:
        for ev in fx.events:
            if isinstance(ev, PeekAnswered):
                self.answered[ev.uuid] += 1
        super()._apply(fx)


def peeks_seen_beyond(session: Session, n: int) -> bool:
    return len(session.peeks()) > n


def replayed(fake: FakeReplica) -> bool:
    return InitializationComplete() in fake.session.commands


async def no_sleep(_: float) -> None:
    await asyncio.sleep(0)


FAILURES = [None, ConnectionResetError("reset"), DecodeError("garbage")]


async def scenario(steps: list[tuple[str, int, int]]) -> None:
    fakes = [FakeReplica({U1: ROWS}, answer_peeks=False) for _ in range(2)]
    c = CountingController(
        {1: fakes[0].connect, 2: fakes[1].connect},
        backoff=lambda: Backoff(0.0, cap=0.0),
        sleep=no_sleep,
    )
    async with c:
        await c.create_dataflow(index_dataflow(U1, as_of=0))
        for conn in c.connections.values():
            await conn.wait_for_epoch(1)
        peeks: list[asyncio.Task[object]] = []
        for op, r, k in steps:
            fake, conn = fakes[r], c.connections[r + 1]
            epoch = conn.epoch
            if op == "peek":
                session, seen = fake.session, len(fake.session.peeks())
                peeks.append(asyncio.create_task(c.peek(U1, timestamp=k)))
                # Issued before the next step: the replica has received it.
                await fake.until(partial(peeks_seen_beyond, session, seen))
            elif op == "answer":
                fake.answer_pending()
            elif op == "kill" and fake.session.alive:
                fake.kill(FAILURES[k % len(FAILURES)])
                await conn.wait_for_epoch(epoch + 1)
                await fake.until(partial(replayed, fake))
        # Let everything finish: both replicas answer whatever is (or will be) pending.
        for f in fakes:
            f.answer_peeks = True
            f.answer_pending()
        results = await asyncio.gather(*peeks)
        assert results == [ROWS] * len(peeks)
        assert all(n == 1 for n in c.answered.values()) and len(c.answered) == len(peeks)
        assert c.state.peeks == {} and c.deliveries.peeks == {}
        c.state.history.reduce()
        assert not any(isinstance(x, Peek) for x in c.state.history.commands())
    for f in fakes:
        await f.stop()


@settings(max_examples=examples(25), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["peek", "peek", "answer", "kill"]),
                          st.integers(0, 1), st.integers(0, 5)), max_size=25))
def test_every_peek_answered_exactly_once_across_failures(
    steps: list[tuple[str, int, int]],
) -> None:
    asyncio.run(asyncio.wait_for(scenario(steps), timeout=20))
