"""Recording runtime clients and protocol builders for the multiplexer tests.

`ChannelRuntime` is a runtime seen through `twofold.client.channel_pair` and `PlainPipeRuntime`
one over a bare `Pipe` (neither has `recv_nowait`, so the multiplexer awaits every response);
`PipeRuntime` offers the optional `recv_nowait` fast path, `PushRuntime` also the optional push
(`SupportsPush`). All record every command they are
sent, as the very objects sent, and let a test feed responses, end the stream or fail it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from twofold.client import Pipe, channel_pair
from twofold.multiplex import Multiplexer
from twofold.protocol import (
    ColumnType,
    ComputeCommand,
    ComputeResponse,
    CopyToSink,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    GlobalId,
    IndexDesc,
    InstanceConfig,
    LoggingConfig,
    MaterializedViewSink,
    RelationDesc,
    SinkDesc,
    SubscribeSink,
)

T = TypeVar("T")


class ChannelRuntime:
    """A runtime client over an in-process channel; records what it is sent."""

    def __init__(self, *, fail_send: Exception | None = None) -> None:
        self.client, self.replica = channel_pair()
        self.sent: list[ComputeCommand] = []
        self.fail_send = fail_send

    async def send(self, command: ComputeCommand) -> None:
        if self.fail_send is not None:
            raise self.fail_send
        self.sent.append(command)
        await self.client.send(command)

    async def recv(self) -> ComputeResponse | None:
        return await self.client.recv()

    def feed(self, *responses: ComputeResponse) -> None:
        for r in responses:
            self.replica.send_nowait(r)

    def end(self) -> None:
        self.replica.close()

    def fail(self, exc: Exception) -> None:
        self.replica.fail(exc)


class PlainPipeRuntime:
    """A runtime client over a `Pipe` without the fast path; `pending()` counts what it holds."""

    def __init__(self, *, fail_send: Exception | None = None) -> None:
        self.responses: Pipe[ComputeResponse] = Pipe()
        self.sent: list[ComputeCommand] = []
        self.fail_send = fail_send

    async def send(self, command: ComputeCommand) -> None:
        if self.fail_send is not None:
            raise self.fail_send
        self.sent.append(command)

    async def recv(self) -> ComputeResponse | None:
        return await self.responses.get()

    def feed(self, *responses: ComputeResponse) -> None:
        for r in responses:
            self.responses.put(r)

    def end(self) -> None:
        self.responses.close()

    def fail(self, exc: Exception) -> None:
        self.responses.fail(exc)

    def pending(self) -> int:
        return len(self.responses)


class PipeRuntime(PlainPipeRuntime):
    """`PlainPipeRuntime` offering the optional `recv_nowait` fast path."""

    def recv_nowait(self) -> ComputeResponse | None:
        return self.responses.get_nowait()


class PushRuntime(PipeRuntime):
    """`PipeRuntime` that also says when responses arrived (`SupportsPush`), as the
    maintenance process's client does: the multiplexer takes them at once."""

    def __init__(self, *, fail_send: Exception | None = None) -> None:
        super().__init__(fail_send=fail_send)
        self.on_ready: Callable[[], None] | None = None

    def set_on_ready(self, on_ready: Callable[[], None] | None) -> None:
        self.on_ready = on_ready

    def feed(self, *responses: ComputeResponse) -> None:
        super().feed(*responses)
        if self.on_ready is not None:
            self.on_ready()


FakeRuntime = ChannelRuntime | PlainPipeRuntime
RUNTIME_KINDS: dict[str, Callable[[], FakeRuntime]] = {
    "channel": ChannelRuntime,
    "pipe": PlainPipeRuntime,
    "nowait": PipeRuntime,
    "push": PushRuntime,
}


def make_mux(kind: str, *, strict: bool = False) -> tuple[Multiplexer, FakeRuntime, FakeRuntime]:
    m, i = RUNTIME_KINDS[kind](), RUNTIME_KINDS[kind]()
    return Multiplexer(maintenance=m, interactive=i, strict=strict), m, i


def run_async(coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
    """Run `coro` on a fresh event loop; a hang (a lost response) fails instead of blocking."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def settle(steps: int = 5) -> None:
    """Let every ready task run a few steps (deterministic scheduling, not a timed wait)."""
    for _ in range(steps):
        await asyncio.sleep(0)


# -- protocol builders ------------------------------------------------------------------------

REL = RelationDesc(names=["k"], types=[ColumnType("int")])


def index_export(on: GlobalId) -> tuple[IndexDesc, RelationDesc]:
    return (IndexDesc(on, [0]), REL)


def sink(connection: MaterializedViewSink | SubscribeSink | CopyToSink) -> SinkDesc:
    return SinkDesc(GlobalId.system(1), REL, connection)


def maintained_index(*ids: GlobalId, name: str = "index") -> CreateDataflow:
    """A maintained (non-peek) dataflow exporting indexes `ids`."""
    return CreateDataflow(
        DataflowDescription(
            name,
            index_exports={gid: index_export(GlobalId.system(1)) for gid in ids},
            as_of=Frontier.at(0),
        )
    )


def materialized_view(gid: GlobalId) -> CreateDataflow:
    return CreateDataflow(
        DataflowDescription(
            "mv",
            sink_exports={gid: sink(MaterializedViewSink(f"shard-{gid}"))},
            as_of=Frontier.at(0),
        )
    )


def peek_dataflow(*ids: GlobalId, on: GlobalId | None = None, at: int = 5) -> CreateDataflow:
    """A transient, single-time dataflow exporting indexes `ids`: interactive's work."""
    return CreateDataflow(
        DataflowDescription(
            "peek",
            index_exports={gid: index_export(on or GlobalId.system(1)) for gid in ids},
            as_of=Frontier.at(at),
            until=Frontier.at(at + 1),
        )
    )


def subscribe_dataflow(gid: GlobalId, *, single_time: bool = True) -> CreateDataflow:
    return CreateDataflow(
        DataflowDescription(
            "subscribe",
            sink_exports={gid: sink(SubscribeSink())},
            as_of=Frontier.at(5),
            until=Frontier.at(6) if single_time else Frontier.empty(),
        )
    )


def copy_to_dataflow(gid: GlobalId) -> CreateDataflow:
    return CreateDataflow(
        DataflowDescription(
            "copy",
            sink_exports={gid: sink(CopyToSink("/tmp/out.parquet"))},
            as_of=Frontier.at(5),
            until=Frontier.at(6),
        )
    )


def instance(*logs: GlobalId) -> CreateInstance:
    index_logs = {f"log{n}": gid for n, gid in enumerate(logs)}
    return CreateInstance(InstanceConfig(logging=LoggingConfig(index_logs=index_logs)))


def new_uuid() -> uuid.UUID:
    return uuid.uuid4()
