"""A real replica (one and two runtimes) served over TCP: shared fate, and hostile input.

- Shared fate (`spec/runtime.md`): an unexpected exception in any runtime — the solo one,
  maintenance, or interactive — ends the replica endpoint (its `recv` raises), the server
  closes with the cause, the controller's connection ends, and `serve_replica` returns non-zero.
  The fault is injected by patching one worker method to raise on a marker.
- Hostile input (`spec/protocol.md` §6): an undecodable frame, a first command that is not
  `Hello`, a truncated frame, an oversized frame header and an over-limit command each close only
  that connection; wrong or missing tokens are refused at the handshake. After each, a fresh
  connection gets a fully working replica.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from tests.runtime.helpers import (
    MODES,
    WAIT,
    Driver,
    Mode,
    complete_time,
    multiset,
    rows_of,
    table,
    unique_url,
)

from twofold.protocol import (
    CancelPeek,
    CreateDataflow,
    DataflowDescription,
    Frontier,
    GlobalId,
    Hello,
    IndexDesc,
    IndexTarget,
    InitializationComplete,
    Peek,
    PeekRows,
    Schedule,
    SourceImport,
)
from twofold.protocol.codec import encode
from twofold.protocol.framing import frame
from twofold.replica import Replica, serve_replica
from twofold.runtime.dataflows import HostedDataflow
from twofold.runtime.worker import ComputeWorker
from twofold.storage import open_storage
from twofold.transport import AuthenticationFailed, ReplicaServer, TransportError, connect
from twofold.transport.handshake import client_hello

# In-process placements only: these inject failures by monkeypatching the runtime, which a
# maintenance process does not see (its shared fate is tested in tests/replica/test_fate.py).
both = pytest.mark.parametrize("mode", [m for m in MODES if m != "procs"])
BOOM = "boom"


def _inject_step_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dataflow named `boom` raises a non-engine error when stepped (a runtime bug)."""
    step = HostedDataflow.step

    def failing(self: HostedDataflow) -> bool:
        if self.desc.debug_name == BOOM and self.scheduled:
            raise RuntimeError("injected runtime failure")
        return step(self)

    monkeypatch.setattr(HostedDataflow, "step", failing)


def _inject_peek_failure(monkeypatch: pytest.MonkeyPatch, at: int) -> None:
    """A peek at timestamp `at` raises inside the runtime that handles it."""
    peek = ComputeWorker._peek

    def failing(self: ComputeWorker, p: Peek) -> None:
        if p.timestamp == at:
            raise RuntimeError(f"injected failure in runtime {self.role}")
        peek(self, p)

    monkeypatch.setattr(ComputeWorker, "_peek", failing)


@asynccontextmanager
async def served(mode: Mode, **server_kw: object) -> AsyncIterator[tuple[ReplicaServer, str]]:
    url = unique_url("tcp")
    rep = Replica(url, mode)
    endpoint = await rep.start()
    server = ReplicaServer(endpoint, **server_kw)  # type: ignore[arg-type]
    await server.start()
    try:
        yield server, url
    finally:
        await server.aclose()
        await rep.close()


async def _working(server: ReplicaServer, url: str, token: str | None = None) -> None:
    """A fresh controller connection gets a fully working replica."""
    host, port = server.address
    conn = await connect(host, port, token=token)
    try:
        d = Driver(conn)
        storage = open_storage(url)
        name = f"t{uuid.uuid4().hex[:8]}"
        t = table(storage, [[1, "a"], [2, "b"]], name=name)
        await d.start()
        _, idx = await d.index_on_table(t)
        got = await d.peek(idx, complete_time(t))
        assert multiset(rows_of(got)) == {(1, "a"): 1, (2, "b"): 1}
        storage.close()
    finally:
        await conn.aclose()


async def _ended(d: Driver) -> None:
    """The controller's connection ends: recv returns None or raises a transport error."""
    try:
        await d.until(lambda: d.ended, "the connection to end", WAIT)
    except TransportError:
        return


# -- shared fate -----------------------------------------------------------------------------------


@both
async def test_maintenance_failure_ends_the_served_endpoint(
        mode: Mode, monkeypatch: pytest.MonkeyPatch) -> None:
    _inject_step_failure(monkeypatch)
    async with served(mode) as (server, url):
        host, port = server.address
        conn = await connect(host, port)
        d = Driver(conn)
        storage = open_storage(url)
        t = table(storage, [[1, "a"]])
        await d.start()
        src, idx = d.next_id(), d.next_id()
        await d.send(CreateDataflow(DataflowDescription(
            BOOM, source_imports={src: SourceImport(t.shard.shard_id, t.desc)},
            index_exports={idx: (IndexDesc(src, [0]), t.desc)},
            as_of=Frontier.at(complete_time(t)))), Schedule(idx))
        await _ended(d)
        await asyncio.wait_for(server.wait_closed(), WAIT)
        assert isinstance(server.exception, RuntimeError)
        assert "injected" in str(server.exception)
        await conn.aclose()
        storage.close()


async def test_interactive_failure_ends_the_two_runtime_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _inject_peek_failure(monkeypatch, at=4242)
    rep = Replica(unique_url("fate"), "two")
    endpoint = await rep.start()
    try:
        d = Driver(endpoint)
        await d.start()
        await d.send(Peek(uuid.uuid4(), IndexTarget(GlobalId.user(1)), 4242))
        with pytest.raises(RuntimeError, match="injected failure in runtime interactive"):
            await d.until(lambda: False, "the endpoint to fail", WAIT)
        assert rep.runtimes["interactive"].error is not None
    finally:
        await rep.close()


@both
async def test_serve_replica_exits_non_zero_on_a_runtime_failure(
        mode: Mode, monkeypatch: pytest.MonkeyPatch) -> None:
    _inject_peek_failure(monkeypatch, at=4242)
    ready: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_replica(unique_url("serve"), runtimes=mode, ready=ready))
    host, port = await asyncio.wait_for(ready, WAIT)
    conn = await connect(host, port)
    d = Driver(conn)
    await d.start()
    await d.send(Peek(uuid.uuid4(), IndexTarget(GlobalId.user(1)), 4242))
    assert await asyncio.wait_for(task, WAIT) == 1
    await _ended(d)
    await conn.aclose()


@both
async def test_serve_replica_exits_zero_when_closed_in_order(mode: Mode) -> None:
    ready: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_replica(unique_url("serve"), runtimes=mode, ready=ready))
    await asyncio.wait_for(ready, WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- hostile input ---------------------------------------------------------------------------------


async def _raw(server: ReplicaServer, token: str | None = None,
               ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A raw socket that has completed the handshake (so it is the current connection)."""
    host, port = server.address
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(frame(client_hello(token)))
    await writer.drain()
    (n,) = struct.unpack(">I", await reader.readexactly(4))
    await reader.readexactly(n)  # the server hello (OK)
    return reader, writer


async def _closed_by_server(reader: asyncio.StreamReader) -> None:
    """The server closes the connection (EOF or reset), without sending anything back."""
    try:
        data = await asyncio.wait_for(reader.read(), WAIT)
    except ConnectionError:
        return
    assert data == b""


HELLO = encode(Hello(uuid.uuid4()))


@both
@pytest.mark.parametrize("bad", ["undecodable", "not-hello-first", "truncated", "header-only"])
async def test_bad_frames_close_only_that_connection(mode: Mode, bad: str) -> None:
    async with served(mode) as (server, url):
        reader, writer = await _raw(server)
        if bad == "undecodable":
            writer.write(frame(HELLO) + frame(b"\xc1\xc1 not msgpack"))
        elif bad == "not-hello-first":
            writer.write(frame(encode(InitializationComplete())))
        elif bad == "truncated":
            writer.write(frame(HELLO) + struct.pack(">I", 100) + b"0123456789")
            writer.write_eof()
        else:
            writer.write(struct.pack(">I", 50))
            writer.write_eof()
        await writer.drain()
        await _closed_by_server(reader)
        writer.close()
        assert not server.closed and server.exception is None
        await _working(server, url)


@both
async def test_oversized_frames_are_refused_without_reading_them(mode: Mode) -> None:
    async with served(mode, max_frame=4096) as (server, url):
        # A header announcing 2 GiB: refused on the header alone.
        reader, writer = await _raw(server)
        writer.write(frame(HELLO) + struct.pack(">I", 2**31))
        await writer.drain()
        await _closed_by_server(reader)
        writer.close()
        # A real command over the limit: the client refuses to send it ...
        host, port = server.address
        conn = await connect(host, port, max_frame=1 << 20)
        d = Driver(conn)
        await d.start()
        huge = Peek(uuid.uuid4(), IndexTarget(GlobalId.user(1)), 1,
                    literal_constraints=[[i] for i in range(2000)])
        assert len(encode(huge)) > 4096
        await d.send(huge)  # under the client's limit, over the server's
        await _ended(d)
        await conn.aclose()
        assert not server.closed
        await _working(server, url)


@both
async def test_tokens_are_checked_before_any_command(mode: Mode) -> None:
    async with served(mode, token="s3cret") as (server, url):
        host, port = server.address
        for wrong in ("wrong", None, "s3cret "):
            with pytest.raises(AuthenticationFailed):
                await connect(host, port, token=wrong)
        # A raw client that skips the handshake and sends a command is refused too.
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(frame(HELLO))
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), WAIT)
        assert b"s3cret" not in data
        writer.close()
        await _working(server, url, token="s3cret")


@both
async def test_a_cancelled_recv_over_tcp_loses_no_response(mode: Mode) -> None:
    async with served(mode) as (server, _):
        host, port = server.address
        conn = await connect(host, port)
        d = Driver(conn)
        await d.start()
        # Cancel pending recvs repeatedly while responses arrive; every peek still gets exactly
        # one response (the checker fails on duplicates).
        sent = [uuid.uuid4() for _ in range(20)]
        for u in sent:
            await d.send(Peek(u, IndexTarget(GlobalId.user(1)), 10**12))
        for _ in range(5):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(conn.recv(), 0)
        for u in sent:
            await d.send(CancelPeek(u))
        for u in sent:
            await d.result(u)
        assert len(d.check.peek_results) == 20
        assert all(not isinstance(r, PeekRows) for r in d.check.peek_results.values())
        await conn.aclose()
