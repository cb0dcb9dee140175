"""Point lookups answered on the event loop's thread (`ComputeWorker.answer_now`, used by
`RuntimeClient(inline=...)` for the interactive runtime).

- `answer_now` answers exactly the ready lookups, with the answer the runtime's thread gives,
  and declines (`None`) everything else: not a lookup, too many keys, a time not yet complete,
  before the since (the controller's compaction or interactive's standing hold), an unpublished
  or dropped index, a uuid already pending, any role but interactive.
- `RuntimeClient` uses it only when its thread has handled every command sent before and no
  `Hello` fence is pending, so a command still in flight (a compaction, say) is applied first;
  inline answers travel in the runtime's one response stream.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.runtime.helpers import Workers
from tests.runtime.test_thread import EchoWorker
from tests.runtime.test_two_runtime import IDX, INTER, MAINT, World, world_of

from twofold.protocol import (
    AllowCompaction,
    CancelPeek,
    ComputeCommand,
    ComputeResponse,
    Frontier,
    GlobalId,
    Hello,
    IndexTarget,
    MapFilterProject,
    Peek,
    PeekCanceled,
    PeekError,
    PeekResponse,
    PeekRows,
)
from twofold.runtime.thread import RuntimeClient
from twofold.runtime.worker import INLINE_LOOKUP_KEYS


@pytest.fixture
def world() -> Iterator[World]:
    with world_of("two") as w:
        yield w


def _threaded_answer(w: Workers, p: Peek) -> PeekResponse:
    """What the interactive runtime's own loop answers for `p`."""
    w.send(p)
    w.settle(lambda: p.uuid in w.check.peek_results)
    return PeekResponse(p.uuid, w.check.peek_results[p.uuid])


def test_a_ready_lookup_is_answered_as_the_runtime_thread_answers_it(world: World) -> None:
    w = world.workers
    for t in world.times:
        keys = [[1], [2], [3], [9]]
        inline = w.interactive.answer_now(Peek(uuid.uuid4(), IndexTarget(IDX), t,
                                               literal_constraints=keys))
        assert isinstance(inline, PeekResponse) and isinstance(inline.result, PeekRows)
        threaded = _threaded_answer(w, Peek(uuid.uuid4(), IndexTarget(IDX), t,
                                            literal_constraints=keys))
        assert isinstance(threaded.result, PeekRows)
        assert inline.result.rows == threaded.result.rows
        want = sorted(([k, v], n) for (k, v), n in world.state_at(t).items() if k in (1, 2, 3))
        assert sorted(inline.result.rows) == want


def test_a_fused_map_filter_project_is_answered_inline_too(world: World) -> None:
    w = world.workers
    t = world.times[3]
    mfp = MapFilterProject(project=[1])
    inline = w.interactive.answer_now(Peek(uuid.uuid4(), IndexTarget(IDX), t,
                                           literal_constraints=[[2], [4]], mfp=mfp))
    assert isinstance(inline, PeekResponse) and isinstance(inline.result, PeekRows)
    assert sorted(inline.result.rows) == [(["b"], 1), (["d"], 1), (["x"], 1)]


def test_what_is_not_a_ready_lookup_is_declined(world: World) -> None:
    w = world.workers
    inter = w.interactive
    last = world.times[-1]

    def lookup(t: int, keys: list[list[Any]] | None = None, gid: GlobalId = IDX) -> Peek:
        return Peek(uuid.uuid4(), IndexTarget(gid), t,
                    literal_constraints=[[1]] if keys is None else keys)

    assert inter.answer_now(Peek(uuid.uuid4(), IndexTarget(IDX), last)) is None  # a scan
    many = [[k] for k in range(INLINE_LOOKUP_KEYS + 1)]
    assert inter.answer_now(lookup(last, many)) is None
    assert inter.answer_now(lookup(last + 10_000)) is None  # not complete yet: it must wait
    assert inter.answer_now(lookup(last, gid=GlobalId.user(99))) is None  # never published
    assert inter.answer_now(CancelPeek(uuid.uuid4())) is None
    assert w.maintenance.answer_now(lookup(last)) is None
    # A uuid already pending (a duplicate) is the runtime's to answer.
    pending = lookup(last + 10_000)
    w.send(pending)
    w.deliver(INTER)
    assert inter.answer_now(Peek(pending.uuid, IndexTarget(IDX), last,
                                 literal_constraints=[[1]])) is None


def test_a_lookup_before_the_since_is_declined_and_errors_on_the_thread(world: World) -> None:
    w = world.workers
    since = world.times[3]
    w.send(AllowCompaction(IDX, Frontier.at(since)))
    w.deliver(INTER)  # interactive's standing hold rises; maintenance has not compacted yet
    early = Peek(uuid.uuid4(), IndexTarget(IDX), world.times[1], literal_constraints=[[1]])
    assert w.interactive.answer_now(early) is None
    result = _threaded_answer(w, early).result
    assert isinstance(result, PeekError) and "since" in result.message
    late = Peek(uuid.uuid4(), IndexTarget(IDX), since, literal_constraints=[[1]])
    assert isinstance(w.interactive.answer_now(late), PeekResponse)


def test_a_dropped_index_is_declined_and_errors_on_the_thread(world: World) -> None:
    w = world.workers
    w.send(AllowCompaction(IDX, Frontier.empty()))
    w.deliver(MAINT)
    w.step(MAINT)
    p = Peek(uuid.uuid4(), IndexTarget(IDX), world.times[-1], literal_constraints=[[1]])
    assert w.interactive.answer_now(p) is None


# -- RuntimeClient ---------------------------------------------------------------------------------


class GatedWorker(EchoWorker):
    """Answers CancelPeek and Peek on its thread once `gate` is set; answers Peek inline."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        self.handled: list[ComputeCommand] = []

    def handle(self, command: ComputeCommand) -> None:
        self.gate.wait(10)
        self.handled.append(command)
        if isinstance(command, CancelPeek | Peek):
            self.out.append(PeekResponse(command.uuid, PeekCanceled()))

    def answer_now(self, command: ComputeCommand) -> ComputeResponse | None:
        if isinstance(command, Peek):
            return PeekResponse(command.uuid, PeekRows([([1], 1)]))
        return None


def _peek() -> Peek:
    return Peek(uuid.uuid4(), IndexTarget(IDX), 1, literal_constraints=[[1]])


async def _until_handled(worker: GatedWorker, n: int) -> None:
    async with asyncio.timeout(10):
        while len(worker.handled) < n:
            await asyncio.sleep(0.001)  # polling the worker thread's progress


async def test_inline_answers_only_when_every_earlier_command_was_handled() -> None:
    worker = GatedWorker()
    async with RuntimeClient(worker, name="t", inline=worker.answer_now) as rt:
        hello = Hello(uuid.uuid4())
        await rt.send(hello)
        await _until_handled(worker, 1)
        # Idle, but the Hello's fence is still up until its marker is taken: not inline.
        fenced = _peek()
        await rt.send(fenced)
        r = await rt.recv()
        assert isinstance(r, PeekResponse) and r.uuid == fenced.uuid
        assert isinstance(r.result, PeekCanceled)  # the thread's answer
        # Idle and unfenced: answered inline, never reaching the thread.
        p = _peek()
        await rt.send(p)
        r = await rt.recv()
        assert isinstance(r, PeekResponse) and r.uuid == p.uuid
        assert isinstance(r.result, PeekRows)
        assert p not in worker.handled
        # A command in flight: the next lookup waits its turn on the thread.
        worker.gate.clear()
        cancel = CancelPeek(uuid.uuid4())
        await rt.send(cancel)
        queued = _peek()
        await rt.send(queued)
        worker.gate.set()
        got = [await rt.recv(), await rt.recv()]
        assert [g.uuid for g in got if isinstance(g, PeekResponse)] == [cancel.uuid,
                                                                        queued.uuid]
        assert queued in worker.handled
        # Once it caught up, lookups are answered inline again.
        await _until_handled(worker, len(worker.handled))
        again = _peek()
        await rt.send(again)
        r = await rt.recv()
        assert isinstance(r, PeekResponse) and isinstance(r.result, PeekRows)
        assert again not in worker.handled


async def test_an_inline_answer_before_a_hello_never_reaches_the_new_iteration() -> None:
    worker = GatedWorker()
    async with RuntimeClient(worker, name="t", inline=worker.answer_now) as rt:
        old = _peek()
        await rt.send(old)  # answered inline, not yet received
        await rt.send(Hello(uuid.uuid4()))
        new = CancelPeek(uuid.uuid4())
        await rt.send(new)
        r = await rt.recv()
        assert isinstance(r, PeekResponse) and r.uuid == new.uuid


# -- wakeups ---------------------------------------------------------------------------------------


def test_a_publication_wakes_the_interactive_runtime_only_if_something_waits(
        world: World) -> None:
    w = world.workers
    woken: list[int] = []
    w.interactive.set_activator(lambda: woken.append(1))
    assert w.registry is not None
    snap = w.registry.lookup(IDX)
    assert snap is not None
    w.registry.publish(IDX, snap)  # nothing pending: the publisher's thread is not disturbed
    assert woken == []
    waiting = Peek(uuid.uuid4(), IndexTarget(IDX), world.times[-1] + 10_000,
                   literal_constraints=[[1]])
    w.send(waiting)
    w.deliver(INTER)
    assert waiting.uuid not in w.check.peek_results
    w.registry.publish(IDX, snap)
    assert woken == [1]


def test_inline_lookups_are_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from twofold.replica.assembly import inline_lookups

    monkeypatch.delenv("TWOFOLD_INLINE_LOOKUPS", raising=False)
    assert inline_lookups()
    monkeypatch.setenv("TWOFOLD_INLINE_LOOKUPS", "0")
    assert not inline_lookups()
    monkeypatch.setenv("TWOFOLD_INLINE_LOOKUPS", "1")
    assert inline_lookups()
