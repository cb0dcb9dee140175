"""Property tests of the multiplexer over random histories.

- Commands: random valid command sequences arrive exactly where the routing model
  (`model.py`) says, once, as the very objects sent, in order — in strict mode (so no valid
  sequence is mistaken for a violation) and lenient mode.
- Responses: random interleavings of the two runtimes' responses come out complete, without
  duplicates and in per-runtime order, whatever the arrival schedule, and however many `recv`s
  are cancelled on the way.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.multiplex import Multiplexer, Runtime
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeParameters,
    ComputeResponse,
    CreateDataflow,
    DataflowDescription,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    IndexTarget,
    InitializationComplete,
    Peek,
    PeekResponse,
    PeekRows,
    Schedule,
    Status,
    StorageTarget,
    UpdateConfiguration,
)
from twofold.testing.profiles import examples

from .fakes import (
    RUNTIME_KINDS,
    index_export,
    instance,
    materialized_view,
    run_async,
    settle,
    subscribe_dataflow,
)
from .model import RoutingModel

MAINT, INTER = Runtime.MAINTENANCE, Runtime.INTERACTIVE


# -- commands -------------------------------------------------------------------------------


@dataclass
class Ids:
    """The generator's bookkeeping: fresh ids, the ids of earlier iterations that a replay
    after `Hello` may declare again, the peeks sent. Where each command goes is the routing
    model's to say (`model.py`), not the generator's."""

    retired: set[GlobalId] = field(default_factory=set)
    next_id: int = 0
    peeks: list[uuid.UUID] = field(default_factory=list)

    def fresh(self, kind: Callable[[int], GlobalId]) -> GlobalId:
        self.next_id += 1
        return kind(self.next_id)


@st.composite
def command_histories(draw: st.DrawFn) -> list[tuple[ComputeCommand, tuple[Runtime, ...]]]:
    """A valid command sequence, each command with the runtimes it must reach, in order."""
    model, ids = RoutingModel(), Ids()
    out: list[tuple[ComputeCommand, tuple[Runtime, ...]]] = []

    def emit(command: ComputeCommand) -> None:
        to, violations = model.route(command, apply=True)
        assert not violations, (command, violations)  # the generator makes valid sequences
        out.append((command, tuple(to)))

    def hello() -> None:
        ids.retired |= set(model.live)
        emit(Hello(uuid.uuid4()))

    hello()
    ops = [
        "hello", "instance", "init", "config", "index", "mv", "peek_dataflow", "subscribe",
        "schedule", "allow_writes", "compact", "drop", "peek", "storage_peek", "cancel",
    ]  # fmt: skip
    for op in draw(st.lists(st.sampled_from(ops), max_size=40)):
        live = sorted(model.live)
        if op == "hello":
            hello()
        elif op == "instance":
            emit(instance(*[ids.fresh(GlobalId.introspection)
                            for _ in range(draw(st.integers(0, 2)))]))  # fmt: skip
        elif op == "init":
            emit(InitializationComplete())
        elif op == "config":
            emit(UpdateConfiguration(ComputeParameters(max_result_size=7)))
        elif op == "index":
            # A replay after Hello may declare an id of an earlier iteration again.
            reusable = sorted(g for g in ids.retired - set(model.live) if not g.is_transient)
            gids = [ids.fresh(GlobalId.user) for _ in range(draw(st.integers(1, 2)))]
            reuse = draw(st.booleans())
            if reusable and reuse:
                gids[0] = draw(st.sampled_from(reusable))
            emit(CreateDataflow(DataflowDescription(
                "index",
                index_exports={g: index_export(GlobalId.system(1)) for g in gids},
                as_of=Frontier.at(draw(st.integers(0, 5))),
            )))  # fmt: skip
        elif op == "mv":
            emit(materialized_view(ids.fresh(GlobalId.user)))
        elif op == "peek_dataflow":
            gids = [ids.fresh(GlobalId.transient) for _ in range(draw(st.integers(1, 2)))]
            t = draw(st.integers(0, 5))
            on = draw(st.sampled_from(live)) if live else GlobalId.system(1)
            emit(CreateDataflow(DataflowDescription(
                "peek",
                index_exports={g: index_export(on) for g in gids},
                as_of=Frontier.at(t),
                until=Frontier.at(t + 1),
            )))  # fmt: skip
        elif op == "subscribe":
            emit(subscribe_dataflow(ids.fresh(GlobalId.transient),
                                    single_time=draw(st.booleans())))  # fmt: skip
        elif op in ("schedule", "allow_writes") and live:
            gid = draw(st.sampled_from(live))
            emit(Schedule(gid) if op == "schedule" else AllowWrites(gid))
        elif op in ("compact", "drop") and live:
            gid = draw(st.sampled_from(live))
            frontier = Frontier.empty() if op == "drop" else Frontier.at(draw(st.integers(0, 9)))
            emit(AllowCompaction(gid, frontier))
        elif op == "peek" and live:
            peek = Peek(uuid.uuid4(), IndexTarget(draw(st.sampled_from(live))), 3)
            ids.peeks.append(peek.uuid)
            emit(peek)
        elif op == "storage_peek":
            peek = Peek(uuid.uuid4(), StorageTarget(ids.fresh(GlobalId.user), "shard"), 3)
            ids.peeks.append(peek.uuid)
            emit(peek)
        elif op == "cancel" and ids.peeks:
            emit(CancelPeek(draw(st.sampled_from(ids.peeks))))
    return out


@settings(max_examples=examples(150))
@given(
    history=command_histories(),
    strict=st.booleans(),
    kind=st.sampled_from(sorted(RUNTIME_KINDS)),
)
def test_every_command_arrives_where_the_table_says(
    history: list[tuple[ComputeCommand, tuple[Runtime, ...]]], strict: bool, kind: str
) -> None:
    m, i = RUNTIME_KINDS[kind](), RUNTIME_KINDS[kind]()

    async def run() -> dict[str, int]:
        async with Multiplexer(maintenance=m, interactive=i, strict=strict) as mux:
            for command, _ in history:
                await mux.send(command)
            return mux.violations

    violations = run_async(run())
    assert set(violations.values()) == {0}
    for runtime, client in ((MAINT, m), (INTER, i)):
        expected = [command for command, targets in history if runtime in targets]
        assert len(client.sent) == len(expected)
        assert all(got is want for got, want in zip(client.sent, expected, strict=True))


# -- responses ------------------------------------------------------------------------------


def responses_of(side: str, n: int) -> list[ComputeResponse]:
    """`n` distinct, valid responses of one runtime (interactive reports only transient ids)."""
    out: list[ComputeResponse] = []
    for k in range(n):
        match k % 3:
            case 0:
                out.append(Status(f"{side}{k}"))
            case 1:
                gid = GlobalId.user(k) if side == "m" else GlobalId.transient(k)
                out.append(Frontiers(gid, write_frontier=Frontier.at(k)))
            case _:
                out.append(PeekResponse(uuid.uuid4(), PeekRows([([k], 1)])))
    return out


def check_merge(
    got: list[ComputeResponse], m_sent: list[ComputeResponse], i_sent: list[ComputeResponse]
) -> None:
    """`got` is exactly the union of both sides, each side's responses in its order."""
    origin = {id(r): "m" for r in m_sent} | {id(r): "i" for r in i_sent}
    assert len({id(r) for r in got}) == len(got), "a response was delivered twice"
    assert [r for r in got if origin.get(id(r)) == "m"] == m_sent
    assert [r for r in got if origin.get(id(r)) == "i"] == i_sent
    assert len(got) == len(m_sent) + len(i_sent)


# A schedule step: feed k responses to maintenance ("m") or interactive ("i"), or let the event
# loop run k steps ("y").
steps = st.lists(st.tuples(st.sampled_from("miy"), st.integers(1, 40)), min_size=1, max_size=30)


@settings(max_examples=examples(100))
@given(schedule=steps, kind=st.sampled_from(sorted(RUNTIME_KINDS)))
def test_random_interleavings_come_out_complete_and_in_order(
    schedule: list[tuple[str, int]], kind: str
) -> None:
    m, i = RUNTIME_KINDS[kind](), RUNTIME_KINDS[kind]()
    m_all = responses_of("m", sum(k for s, k in schedule if s == "m"))
    i_all = responses_of("i", sum(k for s, k in schedule if s == "i"))

    async def run() -> list[ComputeResponse]:
        got: list[ComputeResponse] = []
        async with Multiplexer(maintenance=m, interactive=i, strict=True) as mux:

            async def consume() -> None:
                for _ in range(len(m_all) + len(i_all)):
                    response = await mux.recv()
                    assert response is not None
                    got.append(response)

            consumer = asyncio.create_task(consume())
            fed = {"m": 0, "i": 0}
            for side, k in schedule:
                if side == "y":
                    await settle(k)
                    continue
                source, client = (m_all, m) if side == "m" else (i_all, i)
                client.feed(*source[fed[side] : fed[side] + k])
                fed[side] += k
                await asyncio.sleep(0)
            await consumer
        return got

    check_merge(run_async(run()), m_all, i_all)


# A cancel-safety step: feed k responses to a side, or start a `recv` and cancel it after the
# event loop ran k steps (it may have completed by then, or be woken but not yet resumed).
cancel_steps = st.lists(
    st.tuples(st.sampled_from("mic"), st.integers(0, 6)), min_size=1, max_size=60
)


@settings(max_examples=examples(150))
@given(schedule=cancel_steps, kind=st.sampled_from(sorted(RUNTIME_KINDS)))
def test_cancelling_recv_at_any_point_loses_and_duplicates_nothing(
    schedule: list[tuple[str, int]], kind: str
) -> None:
    m, i = RUNTIME_KINDS[kind](), RUNTIME_KINDS[kind]()
    m_all = responses_of("m", sum(k for s, k in schedule if s == "m"))
    i_all = responses_of("i", sum(k for s, k in schedule if s == "i"))

    async def run() -> tuple[list[ComputeResponse], int]:
        got: list[ComputeResponse] = []
        cancelled = 0
        async with Multiplexer(maintenance=m, interactive=i) as mux:
            fed = {"m": 0, "i": 0}
            for side, k in schedule:
                if side == "c":
                    task = asyncio.create_task(mux.recv())
                    await settle(k)
                    task.cancel()
                    try:
                        response = await task
                    except asyncio.CancelledError:
                        cancelled += 1
                    else:
                        assert response is not None
                        got.append(response)
                    continue
                source, client = (m_all, m) if side == "m" else (i_all, i)
                # Both runtimes' responses arrive while the recv is pending.
                client.feed(*source[fed[side] : fed[side] + k])
                fed[side] += k
            while len(got) < len(m_all) + len(i_all):
                response = await mux.recv()
                assert response is not None
                got.append(response)
        return got, cancelled

    got, _ = run_async(run())
    check_merge(got, m_all, i_all)
