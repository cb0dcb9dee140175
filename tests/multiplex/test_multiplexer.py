"""The asyncio `Multiplexer`: delivery through real clients, the merge (order, fairness,
backpressure, filtering), termination, error propagation, violations and task ownership.

Every test runs over three kinds of runtime client: a `channel_pair` end, a bare `Pipe` client
and a `Pipe` client with the optional `recv_nowait` fast path.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from twofold.client import ComputeClient
from twofold.multiplex import BUFFER_LIMIT, Multiplexer, ProtocolViolation, ViolationKind
from twofold.protocol import (
    AllowCompaction,
    ComputeCommand,
    ComputeResponse,
    CopyToResponse,
    CopyToRowCount,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    IndexTarget,
    InitializationComplete,
    Peek,
    PeekCanceled,
    PeekResponse,
    PeekRows,
    Schedule,
    Status,
    SubscribeBatch,
    SubscribeResponse,
)

from .fakes import (
    RUNTIME_KINDS,
    ChannelRuntime,
    PipeRuntime,
    PlainPipeRuntime,
    instance,
    maintained_index,
    make_mux,
    new_uuid,
    peek_dataflow,
    settle,
)

KINDS = pytest.mark.parametrize("kind", sorted(RUNTIME_KINDS))
U1, T1 = GlobalId.user(1), GlobalId.transient(1)


def status(side: str, n: int) -> Status:
    return Status(f"{side}{n}")


async def take(mux: Multiplexer, n: int) -> list[ComputeResponse | None]:
    return [await mux.recv() for _ in range(n)]


# -- commands -------------------------------------------------------------------------------


@KINDS
async def test_send_delivers_the_same_objects_in_order(kind: str) -> None:
    mux, m, i = make_mux(kind, strict=True)
    hello, index = Hello(new_uuid()), maintained_index(U1)
    create = instance(GlobalId.introspection(1))
    peek_df, peek = peek_dataflow(T1, on=U1), Peek(new_uuid(), IndexTarget(U1), 5)
    compact, init = AllowCompaction(U1, Frontier.at(9)), InitializationComplete()
    async with mux:
        for command in (hello, create, index, Schedule(U1), peek_df, peek, compact, init):
            await mux.send(command)
    assert [type(c).__name__ for c in m.sent] == [
        "Hello", "CreateInstance", "CreateDataflow", "Schedule", "AllowCompaction",
        "InitializationComplete",
    ]  # fmt: skip
    assert m.sent[0] is hello and m.sent[2] is index and m.sent[4] is compact
    assert i.sent == [hello, create, peek_df, peek, compact, init]
    assert i.sent[2] is peek_df and i.sent[4] is compact


@KINDS
async def test_strict_violation_forwards_nothing(kind: str) -> None:
    mux, m, i = make_mux(kind, strict=True)
    async with mux:
        with pytest.raises(ProtocolViolation, match="Schedule names collection u1"):
            await mux.send(Schedule(U1))
    assert m.sent == [] and i.sent == []
    assert mux.violations["undeclared"] == 0


@KINDS
async def test_lenient_violation_is_logged_counted_and_routed(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    mux, m, i = make_mux(kind)
    caplog.set_level(logging.WARNING, logger="twofold.multiplex")
    async with mux:
        command = AllowCompaction(U1, Frontier.at(1))
        await mux.send(command)
    assert m.sent == [command] and i.sent == []
    assert mux.violations == {
        "undeclared": 1,
        "declared_twice": 0,
        "peek_undeclared": 0,
        "foreign_frontiers": 0,
    }
    assert "AllowCompaction names collection u1" in caplog.text


@pytest.mark.parametrize("failing", ["maintenance", "interactive"])
async def test_failing_send_is_raised(failing: str) -> None:
    boom = ConnectionResetError("runtime gone")
    m = ChannelRuntime(fail_send=boom if failing == "maintenance" else None)
    i = ChannelRuntime(fail_send=boom if failing == "interactive" else None)
    async with Multiplexer(maintenance=m, interactive=i) as mux:
        with pytest.raises(ConnectionResetError, match="runtime gone"):
            await mux.send(Hello(new_uuid()))
    # Lifecycle order: maintenance first, so a failing maintenance stops the delivery.
    assert len(m.sent) == (1 if failing == "interactive" else 0)
    assert i.sent == []


async def test_failing_send_to_the_only_target_is_raised() -> None:
    i = ChannelRuntime(fail_send=BrokenPipeError("interactive down"))
    async with Multiplexer(maintenance=ChannelRuntime(), interactive=i) as mux:
        with pytest.raises(BrokenPipeError):
            await mux.send(Peek(new_uuid(), IndexTarget(U1), 1))


async def test_concurrent_sends_keep_every_runtime_in_routing_order() -> None:
    release = asyncio.Event()

    class SlowMaintenance(ChannelRuntime):
        async def send(self, command: ComputeCommand) -> None:
            await release.wait()  # e.g. a transport waiting for its buffer to drain
            await super().send(command)

    m, i = SlowMaintenance(), ChannelRuntime()
    hello, peek = Hello(new_uuid()), Peek(new_uuid(), IndexTarget(U1), 1)
    async with Multiplexer(maintenance=m, interactive=i) as mux:
        first = asyncio.create_task(mux.send(hello))
        await settle()
        second = asyncio.create_task(mux.send(peek))
        await settle()
        assert i.sent == []  # the peek waits for the Hello to reach both runtimes
        release.set()
        await asyncio.gather(first, second)
    assert m.sent == [hello]
    assert i.sent == [hello, peek]


# -- merge ----------------------------------------------------------------------------------


@KINDS
async def test_both_ready_alternates_starting_with_maintenance(kind: str) -> None:
    mux, m, i = make_mux(kind)
    m.feed(*(status("m", n) for n in range(50)))
    i.feed(*(status("i", n) for n in range(50)))
    async with mux:
        got = await take(mux, 100)
    assert got == [status(s, n) for n in range(50) for s in ("m", "i")]


@KINDS
async def test_one_side_only_is_delivered_in_order(kind: str) -> None:
    mux, _m, i = make_mux(kind)
    responses = [status("i", n) for n in range(3 * BUFFER_LIMIT)]
    i.feed(*responses)
    async with mux:
        assert await take(mux, len(responses)) == responses


@KINDS
async def test_flooding_side_does_not_starve_a_yielding_consumer(kind: str) -> None:
    mux, m, i = make_mux(kind)
    m.feed(*(status("m", n) for n in range(20 * BUFFER_LIMIT)))
    async with mux:
        await take(mux, 100)
        i.feed(status("i", 0))
        await settle()
        # The interactive response is ready: it comes within the next two.
        assert status("i", 0) in await take(mux, 2)


@KINDS
async def test_flooding_side_does_not_starve_a_greedy_consumer(kind: str) -> None:
    mux, m, i = make_mux(kind)
    m.feed(*(status("m", n) for n in range(20 * BUFFER_LIMIT)))
    async with mux:
        await take(mux, 100)
        i.feed(status("i", 0))
        # No yielding between recvs: the bound on the flooding side's buffer still lets the
        # interactive response through within a bounded number of recvs.
        got = await take(mux, 2 * BUFFER_LIMIT + 2)
    assert status("i", 0) in got


@pytest.mark.parametrize("kind", ["pipe", "nowait"])
async def test_flooding_side_is_held_back(kind: str) -> None:
    mux, m, _i = make_mux(kind)
    assert isinstance(m, PlainPipeRuntime)
    total = 10 * BUFFER_LIMIT
    m.feed(*(status("m", n) for n in range(total)))
    async with mux:
        assert await mux.recv() == status("m", 0)
        await settle(20)
        # Backpressure: the multiplexer buffers at most BUFFER_LIMIT of them.
        assert m.pending() >= total - 1 - BUFFER_LIMIT
        assert await take(mux, total - 1) == [status("m", n) for n in range(1, total)]


@KINDS
async def test_responses_pass_verbatim_from_either_side(kind: str) -> None:
    mux, m, i = make_mux(kind, strict=True)
    uuid = new_uuid()
    answer = PeekResponse(uuid, PeekRows([([1, "a"], 2)]))
    responses_m: list[ComputeResponse] = [
        Frontiers(U1, write_frontier=Frontier.at(4)),
        Frontiers(T1, write_frontier=Frontier.at(4)),  # maintenance may report any id
        SubscribeResponse(T1, SubscribeBatch(Frontier.at(0), Frontier.at(4), [])),
        PeekResponse(new_uuid(), PeekCanceled()),
    ]
    # A peek never sent, answered twice: forwarded both times, no dedup.
    responses_i: list[ComputeResponse] = [
        answer,
        answer,
        CopyToResponse(T1, CopyToRowCount(1)),
        Status("x"),
    ]
    m.feed(*responses_m)
    i.feed(*responses_i)
    async with mux:
        got = await take(mux, 8)
    assert got[0::2] == responses_m and got[1::2] == responses_i
    assert got[1] is answer and got[3] is answer


@KINDS
async def test_interactive_transient_frontiers_after_the_drop_are_forwarded(kind: str) -> None:
    mux, _m, i = make_mux(kind, strict=True)
    final = Frontiers(T1, Frontier.empty(), Frontier.empty(), Frontier.empty())
    async with mux:
        await mux.send(peek_dataflow(T1))
        await mux.send(AllowCompaction(T1, Frontier.empty()))
        assert T1 not in mux.collections
        i.feed(final)
        assert await mux.recv() is final


@KINDS
async def test_lenient_foreign_frontiers_are_dropped_and_counted(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    mux, _m, i = make_mux(kind)
    caplog.set_level(logging.WARNING, logger="twofold.multiplex")
    foreign = Frontiers(U1, write_frontier=Frontier.at(1))
    i.feed(status("i", 0), foreign, status("i", 1), foreign)
    i.end()
    async with mux:
        assert await take(mux, 3) == [status("i", 0), status("i", 1), None]
    assert mux.violations["foreign_frontiers"] == 2
    assert "non-transient collection u1" in caplog.text


@KINDS
async def test_strict_foreign_frontiers_raise_in_order_then_the_rest_follows(kind: str) -> None:
    mux, _m, i = make_mux(kind, strict=True)
    foreign = Frontiers(GlobalId.introspection(3), write_frontier=Frontier.at(1))
    i.feed(status("i", 0), foreign, status("i", 1))
    async with mux:
        assert await mux.recv() == status("i", 0)
        with pytest.raises(ProtocolViolation, match="non-transient collection si3") as raised:
            await mux.recv()
        assert raised.value.kind is ViolationKind.FOREIGN_FRONTIERS
        assert raised.value.subject is foreign
        assert await mux.recv() == status("i", 1)


# -- termination and errors -----------------------------------------------------------------


@KINDS
@pytest.mark.parametrize("ending", ["maintenance", "interactive"])
async def test_either_side_ending_ends_the_stream(kind: str, ending: str) -> None:
    mux, m, i = make_mux(kind)
    side = m if ending == "maintenance" else i
    side.feed(status("x", 0), status("x", 1))
    side.end()
    async with mux:
        # What the ending side sent before its end still comes first.
        assert await take(mux, 4) == [status("x", 0), status("x", 1), None, None]


@KINDS
async def test_end_wakes_a_pending_recv(kind: str) -> None:
    mux, _m, i = make_mux(kind)
    async with mux:
        pending = asyncio.create_task(mux.recv())
        await settle()
        assert not pending.done()
        i.end()
        assert await pending is None


@KINDS
@pytest.mark.parametrize("failing", ["maintenance", "interactive"])
async def test_either_side_raising_is_raised(kind: str, failing: str) -> None:
    mux, m, i = make_mux(kind)
    boom = RuntimeError("worker crashed")
    side = m if failing == "maintenance" else i
    side.feed(status("x", 0))
    async with mux:
        pending = asyncio.create_task(take(mux, 2))
        await settle()
        side.fail(boom)
        with pytest.raises(RuntimeError, match="worker crashed") as raised:
            await pending
        assert raised.value is boom
        with pytest.raises(RuntimeError, match="worker crashed"):
            await mux.recv()  # shared fate: it stays failed


# -- cancellation and ownership -------------------------------------------------------------


@KINDS
async def test_cancelled_pending_recv_loses_nothing(kind: str) -> None:
    mux, m, i = make_mux(kind)
    async with mux:
        first = asyncio.create_task(mux.recv())
        await settle()
        i.feed(status("i", 0))
        m.feed(status("m", 0))
        first.cancel()  # woken or not, it has taken nothing
        try:
            got = [await first]
        except asyncio.CancelledError:
            got = []
        got += await take(mux, 2 - len(got))
    assert sorted(r.message for r in got if isinstance(r, Status)) == ["i0", "m0"]


@KINDS
async def test_cancelling_one_waiting_recv_does_not_cancel_another(kind: str) -> None:
    mux, m, _i = make_mux(kind)
    async with mux:
        a = asyncio.create_task(mux.recv())
        b = asyncio.create_task(mux.recv())
        await settle()
        a.cancel()
        await settle()
        m.feed(status("m", 0))
        assert await b == status("m", 0)
        assert a.cancelled()


@KINDS
async def test_aclose_cancels_and_awaits_the_pumps(kind: str) -> None:
    mux, _m, _i = make_mux(kind)
    before = asyncio.all_tasks()
    pending = asyncio.create_task(mux.recv())
    await settle()
    assert len(asyncio.all_tasks() - before - {pending}) == 2  # the pumps
    await mux.aclose()
    assert await pending is None
    assert asyncio.all_tasks() == before
    assert await mux.recv() is None
    await mux.close()  # idempotent


async def test_recv_after_close_starts_nothing() -> None:
    mux, _, _ = make_mux("channel")
    before = asyncio.all_tasks()
    await mux.aclose()
    assert await mux.recv() is None
    assert asyncio.all_tasks() == before


async def test_nowait_runtime_is_detected_structurally() -> None:
    # The fast path is only an optimisation: a runtime's recv_nowait must never be called while
    # its own recv is pending, which this runtime checks.
    class Checked(PipeRuntime):
        def __init__(self) -> None:
            super().__init__()
            self.in_recv = False
            self.nowait_calls = 0

        async def recv(self) -> ComputeResponse | None:
            self.in_recv = True
            try:
                return await super().recv()
            finally:
                self.in_recv = False

        def recv_nowait(self) -> ComputeResponse | None:
            assert not self.in_recv
            self.nowait_calls += 1
            return super().recv_nowait()

    m, i = Checked(), Checked()
    async with Multiplexer(maintenance=m, interactive=i) as mux:
        m.feed(*(status("m", n) for n in range(10)))
        assert await take(mux, 10) == [status("m", n) for n in range(10)]
    assert m.nowait_calls > 0


async def test_multiplexer_is_a_compute_client() -> None:
    mux, _, _ = make_mux("channel")
    async with mux:
        assert isinstance(mux, ComputeClient)


async def test_a_runtime_recv_cancelled_from_inside_is_raised_not_hung() -> None:
    class Vanishing(ChannelRuntime):
        async def recv(self) -> ComputeResponse | None:
            raise asyncio.CancelledError

    async with Multiplexer(maintenance=ChannelRuntime(), interactive=Vanishing()) as mux:
        with pytest.raises(RuntimeError, match="interactive runtime's recv was cancelled"):
            await mux.recv()


@KINDS
async def test_recv_after_close_returns_none_even_after_a_failure(kind: str) -> None:
    mux, m, _ = make_mux(kind)
    m.fail(RuntimeError("crashed"))
    with pytest.raises(RuntimeError):
        await mux.recv()
    await mux.aclose()
    assert await mux.recv() is None


def test_hello_discards_responses_of_the_previous_iteration() -> None:
    import asyncio
    import uuid as _uuid

    from twofold.client import channel_pair
    from twofold.multiplex import Multiplexer
    from twofold.protocol import Hello, Status

    async def case() -> None:
        m_ctl, m_rep = channel_pair()
        i_ctl, i_rep = channel_pair()
        async with Multiplexer(maintenance=m_ctl, interactive=i_ctl) as mux:
            await m_rep.send(Status("old-m"))
            await i_rep.send(Status("old-i"))
            # Let the pumps buffer both old responses.
            first = await mux.recv()
            assert first in (Status("old-m"), Status("old-i"))
            await asyncio.sleep(0)
            await mux.send(Hello(_uuid.uuid4()))
            await m_rep.send(Status("new"))
            assert await asyncio.wait_for(mux.recv(), 5) == Status("new")

    asyncio.run(case())


def test_pushed_maintenance_responses_skip_the_pump_turn() -> None:
    """A maintenance client that says when responses arrived (`SupportsPush`) has them in a
    waiting `recv`'s hands a loop turn sooner than one the pump must await, in order."""
    from .fakes import PushRuntime, run_async

    async def turns(push: bool) -> int:
        m = PushRuntime() if push else PipeRuntime()
        mux = Multiplexer(maintenance=m, interactive=PipeRuntime())
        async with mux:
            first = asyncio.ensure_future(mux.recv())
            await settle()  # the pumps wait on their runtimes
            a, b = Frontiers(GlobalId.user(1)), Frontiers(GlobalId.user(2))
            m.feed(a, b)
            n = 0
            while not first.done():
                await asyncio.sleep(0)
                n += 1
            assert first.result() is a and await mux.recv() is b
            return n

    assert run_async(turns(True)) < run_async(turns(False))
