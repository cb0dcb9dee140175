"""Test infrastructure for running the controller against real replicas under faults.

`FaultProxy` is a TCP proxy on 127.0.0.1 between a controller and a replica server. It forwards
bytes both ways, in order, and injects faults on command:

- `reset()` aborts every live connection (an RST on both sides, mid-frame or not);
- `refuse(True)` closes each new connection as soon as it is accepted (a replica that is
  "down"), `refuse(False)` accepts again;
- `delay(seconds)` holds every chunk for `seconds` before forwarding it (order is kept: one
  forwarding task per direction reads from a FIFO);
- `stall(True)` stops forwarding (bytes are held, not lost) until `stall(False)`;
- `retarget(host, port)` points new connections at another address (a restarted replica).

`ReplicaProcess` runs the `twofold replica` command in a subprocess over a shared SQLite
storage, reads the `listening on HOST:PORT` line, and can be SIGKILLed and restarted (on the same
port when it is free, else a new one; `address` is always current, so a connect factory that
reads it follows restarts).

The rest are helpers the real-replica tests share: dataflow builders, the storage oracle
(`table_at`), bounded condition waits, and `Audit`, a connect-factory wrapper that checks the
read-hold promise on the wire.

Invariant the proxy protects for the tests: it never reorders, duplicates or invents bytes; a
fault only ever ends connections or holds bytes back, exactly what a network can do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from twofold.client import ComputeClient
from twofold.controller import Backoff, ConnectFactory
from twofold.protocol import (
    AllowCompaction,
    BuildDesc,
    CancelPeek,
    ColumnType,
    ComputeCommand,
    ComputeResponse,
    DataflowDescription,
    Get,
    GlobalId,
    IndexDesc,
    IndexImport,
    Mfp,
    Peek,
    PeekResponse,
    RelationDesc,
    SourceImport,
)
from twofold.storage import Table

# The shared helpers, re-exported for the controller's real-replica tests.
from twofold.testing.helpers import Multiset as Multiset
from twofold.testing.helpers import multiset as multiset
from twofold.testing.helpers import until as until
from twofold.transport import connect


@dataclass(eq=False)
class _Link:
    """One proxied connection: the two sockets and the two forwarding tasks."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        for w in (self.client, self.upstream):
            with contextlib.suppress(Exception):
                w.transport.abort()


class FaultProxy:
    """A fault-injecting TCP proxy; see the module docstring. Use `async with`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._refuse = False
        self._delay = 0.0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.accepted = 0
        """Connections accepted (including refused ones)."""
        self.resets = 0
        self.address: tuple[str, int] = ("127.0.0.1", 0)

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        name = self._server.sockets[0].getsockname()
        self.address = (str(name[0]), int(name[1]))
        return self

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        links = list(self._links)
        for link in links:
            link.abort()
        tasks = [t for link in links for t in link.tasks]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- faults -----------------------------------------------------------------------------

    @property
    def live(self) -> int:
        """Connections currently proxied."""
        return len(self._links)

    def reset(self) -> int:
        """Abort every live connection; returns how many were aborted."""
        links = list(self._links)
        for link in links:
            link.abort()
        self.resets += len(links)
        return len(links)

    def refuse(self, on: bool) -> None:
        self._refuse = on

    def delay(self, seconds: float) -> None:
        self._delay = seconds

    def stall(self, on: bool) -> None:
        if on:
            self._flowing.clear()
        else:
            self._flowing.set()

    def retarget(self, host: str, port: int) -> None:
        self.target = (host, port)

    async def connect(self) -> ComputeClient:
        """A controller connect factory through this proxy."""
        return await connect(*self.address)

    # -- forwarding -------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._refuse:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()  # the replica is down: so is the proxied connection
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._forward(reader, up_writer, link)),
            asyncio.create_task(self._forward(up_reader, writer, link)),
        ]
        try:
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            self._links.discard(link)
            link.abort()

    async def _forward(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: _Link
    ) -> None:
        try:
            while True:
                chunk = await src.read(65536)
                if not chunk:
                    break
                if self._delay:
                    await asyncio.sleep(self._delay)
                await self._flowing.wait()
                dst.write(chunk)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # Either side ending ends the whole link: a half-open proxied connection would
            # hide the failure from the peer that is still there.
            link.abort()


class ReplicaProcess:
    """A `twofold replica` subprocess over `storage_url` (see the module docstring)."""

    def __init__(self, storage_url: str, runtimes: str = "two", log: Path | None = None) -> None:
        self.storage_url = storage_url
        self.runtimes = runtimes
        self.log = log
        self.proc: subprocess.Popen[str] | None = None
        self.address: tuple[str, int] = ("127.0.0.1", 0)
        self.starts = 0

    def start(self, port: int | None = None, timeout: float = 30.0) -> tuple[str, int]:
        """Start the process (on `port`, default: the last one, else a free one) and wait for
        its `listening on` line."""
        port = self.address[1] if port is None else port
        cmd = [sys.executable, "-c", "from twofold.cli.main import main; main()", "replica",
               "--listen", f"127.0.0.1:{port}", "--storage", self.storage_url,
               "--runtimes", self.runtimes, "--log-level", "WARNING"]  # fmt: skip
        stderr = open(self.log, "a") if self.log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        finally:
            if self.log is not None:
                stderr.close()  # type: ignore[union-attr]
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("listening on "):
                host, _, p = line.removeprefix("listening on ").strip().rpartition(":")
                self.address = (host, int(p))
                self.starts += 1
                return self.address
            if not line and self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"replica process did not start (last line {line!r}): {cmd}")

    async def astart(self, port: int | None = None) -> tuple[str, int]:
        return await asyncio.to_thread(self.start, port)

    def kill(self) -> None:
        """SIGKILL: no goodbye, no flushed buffers."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    async def connect(self) -> ComputeClient:
        """A controller connect factory that always dials the current address."""
        return await connect(*self.address)

    def __enter__(self) -> ReplicaProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


# -- shared helpers for the real-replica tests ------------------------------------------------

KV = RelationDesc(["k", "v"], [ColumnType("int", nullable=False), ColumnType("str")])
"""The table every real-replica test uses: an int key and a string value."""

WAIT = 15.0
"""Seconds any single bounded wait may take (generous: the 2-core box is shared and loaded)."""


def fast_backoff() -> Backoff:
    """Reconnect quickly: tests wait on conditions, never on the backoff's clock."""
    return Backoff(initial=0.01, factor=2.0, cap=0.1)


def table_index(src: GlobalId, idx: GlobalId, table: str = "t") -> DataflowDescription:
    """An index on column 0 of table `table`; the controller chooses its `as_of`."""
    return DataflowDescription(
        f"index-{idx}", source_imports={src: SourceImport(f"table/{table}", KV)},
        index_exports={idx: (IndexDesc(src, [0]), KV)},
    )  # fmt: skip


def index_on_index(src: GlobalId, base: GlobalId, idx: GlobalId) -> DataflowDescription:
    """An index re-keying the index `base` (on collection `src`); it holds `base` at its
    `as_of` and then at its own since."""
    mid = GlobalId.user(idx.n + 500_000)
    return DataflowDescription(
        f"index-{idx}-on-{base}",
        index_imports={base: IndexImport(IndexDesc(src, [0]), KV)},
        objects_to_build=[BuildDesc(mid, Mfp(input=Get(base)))],
        index_exports={idx: (IndexDesc(mid, [0]), KV)},
    )


def table_at(table: Table, ts: int) -> Multiset:
    """The oracle: the table's contents at `ts`, straight from storage."""
    out: dict[tuple[Any, ...], int] = defaultdict(int)
    for r in table.snapshot(ts).to_pylist():
        out[(r["k"], r["v"])] += r["diff"]
    return {k: v for k, v in out.items() if v}


@dataclass
class Audit:
    """Watches every connection a controller makes (wrap its connect factory with `wrap`) and
    checks, at the moment each command is sent, the protocol promise behind read holds: no
    `AllowCompaction(id, f)` passes the timestamp of a peek on `id` that is still outstanding
    on that connection (sent, neither answered nor cancelled). Also keeps, per connection, the
    ordered log of what was sent and received."""

    violations: list[str] = field(default_factory=list)
    logs: list[list[tuple[str, ComputeCommand | ComputeResponse]]] = field(default_factory=list)

    def wrap(self, factory: ConnectFactory) -> ConnectFactory:
        async def connect_audited() -> ComputeClient:
            log: list[tuple[str, ComputeCommand | ComputeResponse]] = []
            self.logs.append(log)
            return _Audited(await factory(), self, log)

        return connect_audited


class _Audited:
    def __init__(
        self, inner: ComputeClient, audit: Audit,
        log: list[tuple[str, ComputeCommand | ComputeResponse]],
    ) -> None:  # fmt: skip
        self._inner = inner
        self._audit = audit
        self._log = log
        self._outstanding: dict[UUID, Peek] = {}

    async def send(self, command: ComputeCommand) -> None:
        if isinstance(command, Peek):
            self._outstanding[command.uuid] = command
        elif isinstance(command, CancelPeek):
            self._outstanding.pop(command.uuid, None)
        elif isinstance(command, AllowCompaction):
            for p in self._outstanding.values():
                if p.target.id == command.id and not command.frontier.contains(p.timestamp):
                    self._audit.violations.append(
                        f"AllowCompaction({command.id}, {command.frontier!r}) sent while peek "
                        f"{p.uuid} at {p.timestamp} was outstanding"
                    )
        self._log.append(("sent", command))
        await self._inner.send(command)

    async def recv(self) -> ComputeResponse | None:
        r = await self._inner.recv()
        if r is not None:
            self._log.append(("recv", r))
            if isinstance(r, PeekResponse):
                self._outstanding.pop(r.uuid, None)
        return r

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()
