"""Shared drivers for the protocol-level runtime tests: replicas in-process and over TCP, and a
`Driver` that checks the protocol's response obligations on every response it sees.

`Driver` wraps a replica endpoint (`ComputeClient`). Every response it receives goes through
`ProtocolChecker`, which enforces `spec/protocol.md` §5 as it goes — frontier reports never
regress, the first is `>= as_of`, nothing follows an `empty()` report; exactly one `PeekResponse`
per `Peek`, `PeekCanceled` only after `CancelPeek`; subscribe batches contiguous and increasing,
ended exactly once with nothing after; exactly one `CopyToResponse` per copy-to. A violation fails
the test at the response that commits it. Waits are on responses (`asyncio.wait_for`), never on
sleeps; a timeout fails the test with what was being waited for.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import tempfile
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from twofold.client import ComputeClient
from twofold.protocol import (
    CancelPeek,
    ColumnType,
    ComputeCommand,
    ComputeResponse,
    CopyToResponse,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    IndexDesc,
    IndexImport,
    IndexTarget,
    InitializationComplete,
    InstanceConfig,
    Peek,
    PeekCanceled,
    PeekResponse,
    PeekResult,
    RelationDesc,
    Schedule,
    SourceImport,
    SubscribeBatch,
    SubscribeDroppedAt,
    SubscribeResponse,
)
from twofold.replica import Replica
from twofold.storage import Storage, Table, open_storage
from twofold.testing.helpers import multiset, until
from twofold.transport import ReplicaServer, connect

Mode = Literal["one", "two", "procs"]
"""One runtime; two runtimes as threads of one process; two with maintenance in a child process
(`spec/placement.md`), over a SQLite file both processes open."""
Transport = Literal["inproc", "tcp"]
MODES: tuple[Mode, ...] = ("one", "two", "procs")

KV = RelationDesc(["k", "v"], [ColumnType("int", nullable=False), ColumnType("str")])
"""The tables most scenarios use: an int key and a string value."""

WAIT = 10.0
"""Seconds any single wait may take before the test fails (generous for a loaded 2-core box)."""

_names = itertools.count()


def unique_url(tag: str = "rt") -> str:
    return f"memory://{tag}-{uuid.uuid4().hex[:12]}-{next(_names)}"


def sqlite_url(tag: str = "rt") -> str:
    """A fresh SQLite file (in the temp dir, removed at exit) two processes can share."""
    path = Path(tempfile.gettempdir()) / f"twofold-{tag}-{uuid.uuid4().hex[:12]}.db"
    atexit.register(_remove_db, path)
    return f"sqlite:///{path}"


def _remove_db(path: Path) -> None:
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)


def make_replica(mode: Mode, url: str | None = None) -> tuple[Replica, str]:
    """A replica of `mode` over `url` (fresh storage of the right kind when `None`)."""
    if mode == "procs":
        url = url or sqlite_url("procs")
        return Replica(url, "two", placement="processes"), url
    url = url or unique_url(mode)
    return Replica(url, mode, placement="threads"), url


class ProtocolViolationSeen(AssertionError):
    """A response broke an obligation of `spec/protocol.md` §5."""


_KINDS = ("write_frontier", "input_frontier", "output_frontier")


@dataclass
class ProtocolChecker:
    """Checks every response against the replica's obligations. See the module docstring."""

    as_of: dict[GlobalId, Frontier] = field(default_factory=dict)
    frontiers: dict[tuple[GlobalId, str], list[Frontier]] = field(
        default_factory=lambda: defaultdict(list))
    peeks_sent: set[uuid.UUID] = field(default_factory=set)
    cancels_sent: set[uuid.UUID] = field(default_factory=set)
    peek_results: dict[uuid.UUID, PeekResult] = field(default_factory=dict)
    subscribes: dict[GlobalId, list[SubscribeResponse]] = field(
        default_factory=lambda: defaultdict(list))
    subscribe_ended: set[GlobalId] = field(default_factory=set)
    copy_tos: dict[GlobalId, list[CopyToResponse]] = field(
        default_factory=lambda: defaultdict(list))

    def sent(self, command: ComputeCommand) -> None:
        match command:
            case Hello():
                # A new iteration: per-connection obligations restart.
                self.frontiers.clear()
                self.subscribe_ended.clear()
                self.subscribes.clear()
            case CreateDataflow(dataflow=desc):
                as_of = desc.as_of if desc.as_of is not None else Frontier.minimum()
                for gid in desc.export_ids():
                    self.as_of[gid] = as_of
            case Peek(uuid=u):
                self.peeks_sent.add(u)
            case CancelPeek(uuid=u):
                self.cancels_sent.add(u)
            case _:
                pass

    def fail(self, message: str) -> None:
        raise ProtocolViolationSeen(message)

    def received(self, response: ComputeResponse) -> None:
        match response:
            case Frontiers():
                self._frontiers(response)
            case PeekResponse(uuid=u, result=result):
                if u not in self.peeks_sent:
                    self.fail(f"PeekResponse for a uuid never peeked: {u}")
                if u in self.peek_results:
                    self.fail(f"second PeekResponse for {u}: {self.peek_results[u]} then {result}")
                if isinstance(result, PeekCanceled) and u not in self.cancels_sent:
                    self.fail(f"PeekCanceled for {u} without a CancelPeek")
                self.peek_results[u] = result
            case SubscribeResponse(id=gid, event=event):
                self._subscribe(gid, event, response)
            case CopyToResponse(id=gid):
                if self.copy_tos[gid]:
                    self.fail(f"second CopyToResponse for {gid}: {response}")
                self.copy_tos[gid].append(response)
            case _:
                pass

    def _frontiers(self, r: Frontiers) -> None:
        for kind in _KINDS:
            f: Frontier | None = getattr(r, kind)
            if f is None:
                continue
            seen = self.frontiers[(r.id, kind)]
            if seen:
                last = seen[-1]
                if last.is_empty:
                    self.fail(f"{r.id} {kind} reported {f} after it was reported empty")
                if not last.less_equal(f):
                    self.fail(f"{r.id} {kind} regressed from {last} to {f}")
            else:
                as_of = self.as_of.get(r.id)
                if as_of is not None and not as_of.less_equal(f):
                    self.fail(f"{r.id} first {kind} report {f} is below its as_of {as_of}")
            seen.append(f)

    def _subscribe(self, gid: GlobalId, event: object, r: SubscribeResponse) -> None:
        if gid in self.subscribe_ended:
            self.fail(f"subscribe {gid} got {event} after it ended")
        prior = [e.event for e in self.subscribes[gid] if isinstance(e.event, SubscribeBatch)]
        if isinstance(event, SubscribeBatch):
            expected_lower = prior[-1].upper if prior else self.as_of.get(gid)
            if expected_lower is not None and event.lower != expected_lower:
                self.fail(f"subscribe {gid} batch lower {event.lower} != previous upper "
                          f"{expected_lower}")
            if not event.lower < event.upper:
                self.fail(f"subscribe {gid} batch is not increasing: {event.lower}..{event.upper}")
            for t, _row, diff in event.updates or []:
                if not (event.lower.less_equal_time(t) and not event.upper.less_equal_time(t)):
                    self.fail(f"subscribe {gid} update at {t} outside [{event.lower}, "
                              f"{event.upper})")
                if diff == 0:
                    self.fail(f"subscribe {gid} update with diff 0")
            if event.upper.is_empty:
                self.subscribe_ended.add(gid)
        elif isinstance(event, SubscribeDroppedAt):
            self.subscribe_ended.add(gid)
        self.subscribes[gid].append(r)

    # -- queries -------------------------------------------------------------------------------

    def last(self, gid: GlobalId, kind: str = "write_frontier") -> Frontier | None:
        seen = self.frontiers.get((gid, kind))
        return seen[-1] if seen else None

    def distinct(self, gid: GlobalId, kind: str = "write_frontier") -> list[Frontier]:
        return list(self.frontiers.get((gid, kind), []))


class Driver:
    """Sends commands to a replica endpoint and waits on its responses, checking each one."""

    def __init__(self, client: ComputeClient) -> None:
        self.client = client
        self.check = ProtocolChecker()
        self.log: list[ComputeResponse] = []
        self.ended = False
        self._ids = itertools.count(1)

    def next_id(self, kind: Callable[[int], GlobalId] = GlobalId.user) -> GlobalId:
        return kind(next(self._ids) + 100)

    async def send(self, *commands: ComputeCommand) -> None:
        for command in commands:
            self.check.sent(command)
            await self.client.send(command)

    async def start(self, config: InstanceConfig | None = None) -> None:
        await self.send(Hello(uuid.uuid4()), CreateInstance(config or InstanceConfig()),
                        InitializationComplete())

    async def recv_one(self, timeout: float) -> ComputeResponse | None:
        r = await asyncio.wait_for(self.client.recv(), timeout)
        if r is None:
            self.ended = True
            return None
        self.check.received(r)
        self.log.append(r)
        return r

    async def until(self, done: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
        """Receive responses until `done()`; fail the test after `timeout` seconds."""

        async def receive(remaining: float) -> None:
            if await self.recv_one(remaining) is None and not done():
                raise AssertionError(f"the endpoint ended while waiting for {what}")

        await until(done, what, timeout, receive)

    async def peek(self, target: GlobalId, timestamp: int, *, timeout: float = WAIT,
                   **kw: Any) -> PeekResult:
        u = await self.send_peek(target, timestamp, **kw)
        return await self.result(u, timeout)

    async def send_peek(self, target: GlobalId, timestamp: int, **kw: Any) -> uuid.UUID:
        u = uuid.uuid4()
        await self.send(Peek(u, IndexTarget(target), timestamp, **kw))
        return u

    async def result(self, u: uuid.UUID, timeout: float = WAIT) -> PeekResult:
        await self.until(lambda: u in self.check.peek_results, f"the response to peek {u}",
                         timeout)
        return self.check.peek_results[u]

    async def frontier_reaches(self, gid: GlobalId, frontier: Frontier,
                               kind: str = "write_frontier") -> None:
        def done() -> bool:
            last = self.check.last(gid, kind)
            return last is not None and frontier.less_equal(last)
        await self.until(done, f"{gid} {kind} to reach {frontier}")

    async def barrier(self, gid: GlobalId, timestamp: int) -> None:
        """A peek round trip on `gid`: everything the replica sent before its answer is seen."""
        await self.peek(gid, timestamp)

    async def index_on_table(self, table: Table, *, as_of: int | None = None,
                             key: list[int] | None = None, schedule: bool = True,
                             ids: tuple[GlobalId, GlobalId] | None = None,
                             ) -> tuple[GlobalId, GlobalId]:
        """Create (and schedule) an index over `table`; returns (source id, index id).
        `ids` replays an earlier create (after a `Hello`) under the same ids."""
        src, idx = ids or (self.next_id(), self.next_id())
        if as_of is None:
            up = table.upper.time
            assert up is not None
            as_of = max(up - 1, 0)
        desc = table.desc
        await self.send(CreateDataflow(DataflowDescription(
            f"index-{idx}", source_imports={src: SourceImport(table.shard.shard_id, desc)},
            index_exports={idx: (IndexDesc(src, key or [0]), desc)}, as_of=Frontier.at(as_of))))
        if schedule:
            await self.send(Schedule(idx))
        return src, idx


def index_import(src: GlobalId, desc: RelationDesc, key: list[int] | None = None) -> IndexImport:
    return IndexImport(IndexDesc(src, key or [0]), desc)


def rows_of(result: PeekResult) -> list[tuple[list[Any], int]]:
    rows = getattr(result, "rows", None)
    assert rows is not None, f"expected rows, got {result}"
    return list(rows)


as_multiset = multiset
"""The shared `twofold.testing.helpers.multiset` under its old name here (for the tests that
still import it from this module)."""


@contextlib.asynccontextmanager
async def replica(mode: Mode, transport: Transport = "inproc", url: str | None = None,
                  *, token: str | None = None) -> AsyncIterator[tuple[Driver, Storage]]:
    """A replica over a fresh memory storage, and a `Driver` on it (in-process or over TCP)."""
    rep, url = make_replica(mode, url)
    storage = open_storage(url)
    endpoint = await rep.start()
    try:
        if transport == "inproc":
            yield Driver(endpoint), storage
        else:
            server = ReplicaServer(endpoint, token=token)
            await server.start()
            host, port = server.address
            conn = await connect(host, port, token=token)
            try:
                yield Driver(conn), storage
            finally:
                await conn.aclose()
                await server.aclose()
    finally:
        await rep.close()
        storage.close()


def table(storage: Storage, rows: list[list[Any]], name: str = "t",
          desc: RelationDesc = KV) -> Table:
    t = storage.create_table(name, desc)
    if rows:
        t.insert(rows)
    return t


def complete_time(t: Table) -> int:
    """The latest time at which `t` is complete (readable)."""
    up = t.upper.time
    assert up is not None and up > 0
    return up - 1



class Workers:
    """Runtimes' state machines driven directly, without threads: a solo worker, or a
    maintenance/interactive pair sharing a `PublicationRegistry` behind a pure `Router`.

    Commands are routed at `send` into per-runtime queues; the test chooses when each runtime
    applies its next command (`deliver`) and when it steps (`step`), so any interleaving of the
    two runtimes' progress can be produced deterministically. Responses pass the multiplexer's
    screen and the `ProtocolChecker`.
    """

    def __init__(self, mode: Mode, storage: Storage) -> None:
        from twofold.engine import ArrangementSnapshot
        from twofold.multiplex import Router
        from twofold.runtime.registry import PublicationRegistry
        from twofold.runtime.worker import ComputeWorker

        self.mode = mode
        self.check = ProtocolChecker()
        self.router = Router()
        self.registry: PublicationRegistry[ArrangementSnapshot] | None = None
        opener: Callable[[str | None], Storage] = lambda _url: storage  # noqa: E731
        if mode == "one":
            self.workers = [ComputeWorker("solo", open_storage=opener)]
        else:
            self.registry = PublicationRegistry()
            self.workers = [
                ComputeWorker("maintenance", open_storage=opener, registry=self.registry),
                ComputeWorker("interactive", open_storage=opener, registry=self.registry),
            ]
        self.queues: list[list[ComputeCommand]] = [[] for _ in self.workers]

    @property
    def maintenance(self) -> Any:
        return self.workers[0]

    @property
    def interactive(self) -> Any:
        return self.workers[-1]

    def send(self, *commands: ComputeCommand) -> None:
        for command in commands:
            self.check.sent(command)
            if self.mode == "one":
                self.queues[0].append(command)
                continue
            for runtime, routed in self.router.route(command).deliveries:
                self.queues[int(runtime)].append(routed)

    def deliver(self, which: int, n: int = 1) -> bool:
        """Apply up to `n` queued commands on runtime `which`; False if none was queued."""
        queue = self.queues[which]
        if not queue:
            return False
        for _ in range(min(n, len(queue))):
            self.workers[which].handle(queue.pop(0))
        self._collect(which)
        return True

    def step(self, which: int) -> None:
        """One turn of runtime `which`'s loop: step, take its responses, then the merges the
        step deferred (as `RuntimeClient` and the maintenance process do)."""
        self.workers[which].step()
        self._collect(which)
        self.workers[which].maintain()
        self._collect(which)

    def _collect(self, which: int) -> None:
        from twofold.multiplex import Runtime
        for r in self.workers[which].take_responses():
            if self.mode == "two" and self.router.screen(Runtime(which), r) is not None:
                continue
            self.check.received(r)

    def settle(self, done: Callable[[], bool] = lambda: False, rounds: int = 30) -> None:
        """Deliver everything and step every runtime until `done()` or nothing is queued
        after `rounds` rounds (each round: every queue drained, every runtime stepped)."""
        for _ in range(rounds):
            for which in range(len(self.workers)):
                self.deliver(which, n=len(self.queues[which]))
                self.step(which)
            if done():
                return
        assert done() or not any(self.queues), "commands still queued after settling"

    def close(self) -> None:
        for w in self.workers:
            w.shutdown()
