"""A replica: one compute endpoint over one or two runtimes (`spec/runtime.md`).

`Replica(storage_url, runtimes="two", placement="auto")` builds, on `start()`:

- a `StorageCache` that opens each storage URL once (the replica's own for `None`);
- for `"one"`: a `solo` runtime, which is the endpoint (one process, whatever the placement);
- for `"two"`: a publication registry, an `interactive` runtime on a thread reading it, a
  `maintenance` runtime publishing into it, and a `Multiplexer` over the two, which is the
  endpoint. Placement (`spec/placement.md`): with `"processes"` the maintenance runtime runs in
  a child process (`process.MaintenanceProcess`) and the registry here is a mirror of its
  publications, batches shared through memfds; with `"threads"` both runtimes are threads of
  this process sharing one registry. `"auto"` (the default) is processes unless the storage
  lives only in this process (`memory://`, or no URL); `TWOFOLD_PLACEMENT` may choose instead.

The endpoint is a `ComputeClient`. The runtimes share fate: an unexpected error in either ends
the endpoint (its `recv` raises), and `serve_replica` turns that into a non-zero exit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl as _ssl
import tempfile
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from twofold.client import ComputeClient
from twofold.engine import ArrangementSnapshot
from twofold.multiplex import Multiplexer
from twofold.protocol import (
    ComputeCommand,
    ComputeResponse,
    GlobalId,
    Hello,
    MapFilterProject,
    Row,
    RowSetFinishing,
)
from twofold.replica.process import MaintenanceProcess
from twofold.replica.start import StartMethod
from twofold.runtime import sched
from twofold.runtime.introspection import ReplicaMetrics
from twofold.runtime.registry import PublicationRegistry
from twofold.runtime.sched import ThreadHints, latency_slice_from_env
from twofold.runtime.thread import RuntimeClient
from twofold.runtime.worker import POLL_INTERVAL, ComputeWorker, Role
from twofold.storage import Storage, open_storage
from twofold.storage.identity import storage_id
from twofold.transport import ReplicaServer

log = logging.getLogger(__name__)

RuntimesMode = Literal["one", "two"]
Placement = Literal["auto", "threads", "processes"]
PLACEMENTS: tuple[Placement, ...] = ("auto", "threads", "processes")


def shareable(storage_url: str | None) -> bool:
    """Whether a second process can open the same storage (not `memory://`)."""
    return storage_url is not None and not storage_url.startswith("memory:")


def resolve_placement(placement: Placement, runtimes: RuntimesMode,
                      storage_url: str | None) -> Literal["threads", "processes"]:
    """Where two runtimes run; `ValueError` for processes over storage they cannot share.
    For `"auto"`, `TWOFOLD_PLACEMENT` (threads/processes) may choose; it yields to storage a
    second process cannot open."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
    if runtimes == "one":
        return "threads"
    if placement == "auto":
        chosen = os.environ.get("TWOFOLD_PLACEMENT", "auto")
        if chosen == "threads":
            return "threads"
        if chosen not in PLACEMENTS:
            raise ValueError(f"TWOFOLD_PLACEMENT must be one of {', '.join(PLACEMENTS)}, "
                             f"got {chosen!r}")
        return "processes" if shareable(storage_url) else "threads"
    if placement == "processes" and not shareable(storage_url):
        raise ValueError(f"placement='processes' needs storage two processes can open; "
                         f"{storage_url!r} lives in this process only (use a SQLite file, or "
                         f"placement='threads')")
    return placement


def inline_lookups() -> bool:
    """Whether the interactive runtime answers ready point lookups on the event loop's thread
    (on by default; `TWOFOLD_INLINE_LOOKUPS=0` turns it off). Measured with 8 closed-loop
    readers over TCP against the process placement, churn running, alternating pairs of runs
    on the shared 2-core machine (load 3.7-5.9): answering on the loop served 3,209 and 4,004
    lookups/s against the hop to the interactive thread's 3,058 and 2,974, at 102-115 us of
    the front's CPU per lookup against 114-134, with a quarter of the front's involuntary
    context switches. (An earlier measurement found the hop faster; its client woke all 8
    readers on every response, so the client's CPU, not the front's, decided it.)"""
    return os.environ.get("TWOFOLD_INLINE_LOOKUPS", "1") != "0"


class ScratchStorage:
    """A fresh SQLite file in the temp directory, for an embedded database that named no
    storage: unlike `memory://`, a maintenance process can open it too. `remove()` deletes it
    with its WAL files (also done at interpreter exit if nobody did)."""

    def __init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="twofold-", suffix=".db")
        os.close(fd)
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self._finalizer = weakref.finalize(self, _remove_sqlite, self.path)

    def remove(self) -> None:
        self._finalizer()


def _remove_sqlite(path: Path) -> None:
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        p.unlink(missing_ok=True)


def needs_shared_storage(runtimes: RuntimesMode) -> bool:
    """Whether an embedded replica of `runtimes` defaults to processes (so its default storage
    must be a file both open): two runtimes, unless `TWOFOLD_PLACEMENT=threads`."""
    return resolve_placement("auto", runtimes, "sqlite:///scratch.db") == "processes"


class StorageCache:
    """Opens each storage URL once; thread-safe (both runtimes open through it)."""

    def __init__(self, default_url: str | None) -> None:
        self.default_url = default_url
        self._lock = threading.Lock()
        self._open: dict[str, Storage] = {}

    def __call__(self, url: str | None) -> Storage:
        url = url or self.default_url
        if url is None:
            raise ValueError("no storage URL: the replica has no default and none was given")
        with self._lock:
            storage = self._open.get(url)
            if storage is None:
                storage = self._open[url] = open_storage(url)
            return storage

    def close(self) -> None:
        with self._lock:
            for storage in self._open.values():
                storage.close()
            self._open.clear()


class LocalConnection:
    """An in-process connection to a replica endpoint (see `Replica.connect`)."""

    def __init__(self, endpoint: ComputeClient) -> None:
        self._endpoint = endpoint
        self._closed = asyncio.Event()
        self._started = False  # this connection's Hello reached the endpoint
        self._waiting: asyncio.Task[object] | None = None  # the task in a pending `recv`
        self._interrupted: asyncio.Task[object] | None = None  # cancelled by `close()`
        self.ended = False
        """The endpoint raised or ended: the replica has failed (shared fate)."""

    async def send(self, command: ComputeCommand) -> None:
        if self._closed.is_set():
            raise ConnectionError("connection closed")
        try:
            await self._endpoint.send(command)
        except Exception:
            self.ended = True
            raise
        if isinstance(command, Hello):
            self._started = True

    async def recv(self) -> ComputeResponse | None:
        # The endpoint's recv is awaited in the caller's own task (no task and no `wait` of
        # its own per response: the embedded controller takes each frontier one loop turn
        # after the multiplexer has it, not three); `close()` interrupts a pending one by
        # cancelling that task, which is taken back here (the endpoint's recv is cancel-safe:
        # nothing is lost).
        while True:
            if self._closed.is_set():
                return None
            task = asyncio.current_task()
            self._waiting = task
            try:
                response = await self._endpoint.recv()
            except asyncio.CancelledError:
                if self._interrupted is task:
                    self._interrupted = None
                    if task is not None and task.uncancel() == 0:
                        return None  # closed while waiting
                raise  # cancelled by someone else too
            except Exception:
                self.ended = True
                raise
            finally:
                self._waiting = None
            if response is None:
                self.ended = True
                return None
            # Whatever the endpoint said before this connection's Hello reached it belongs to
            # the previous protocol iteration (read at once: a Hello sent later must not count).
            if self._started:
                return response

    def close(self) -> None:
        self._closed.set()
        waiting = self._waiting
        if waiting is not None and waiting is not asyncio.current_task() and not waiting.done():
            self._interrupted = waiting
            waiting.cancel()

    async def aclose(self) -> None:
        self.close()


class Replica:
    """An in-process replica. `async with Replica(url) as endpoint:` gives its endpoint."""

    def __init__(
        self, storage_url: str | None = None, runtimes: RuntimesMode = "two", *,
        strict: bool = False, poll_interval: float = POLL_INTERVAL,
        maintenance_nice: int | None = None, latency_slice_us: int | None = None,
        placement: Placement = "auto", maintenance_start: StartMethod = "spawn",
    ) -> None:
        if runtimes not in ("one", "two"):
            raise ValueError(f"runtimes must be 'one' or 'two', got {runtimes!r}")
        self.mode: RuntimesMode = runtimes
        self.placement = resolve_placement(placement, runtimes, storage_url)
        self.storage_url = storage_url
        # How a maintenance process starts (`process.py`): `fork` only where this process's
        # state is the replica's own (`serve_replica`); it falls back to `spawn` when unsafe.
        self.maintenance_start: StartMethod = maintenance_start
        self.storage = StorageCache(storage_url)
        self.metrics = ReplicaMetrics()
        self.strict = strict
        self.poll_interval = poll_interval
        # How much lower maintenance's OS priority is than interactive's (`TWOFOLD_MAINTENANCE_NICE`
        # overrides). As a thread of this process: +10, so when both runtimes want a core the
        # read wins (they share the GIL either way). As a process of its own: 0 — at +10 any
        # nice-0 process wanting a whole core starves it (a saturating reader in the front made
        # the index 3.6-4.6x staler than a light one; at 0, 0.8x), while the read path keeps its
        # latency slice, which already lets a waking read preempt it (`docs/architecture.md`).
        if maintenance_nice is None:
            default = "0" if self.placement == "processes" else "10"
            maintenance_nice = int(os.environ.get("TWOFOLD_MAINTENANCE_NICE", default))
        self.maintenance_nice = maintenance_nice
        # The interactive runtime's thread asks the OS for a short latency slice, so that waking
        # for a read preempts whatever is mid-slice (`runtime/sched.py`). `None`: the default,
        # or `TWOFOLD_LATENCY_SLICE_US`; 0: off.
        if latency_slice_us is None:
            latency_slice_us = latency_slice_from_env()
        self.latency_slice_us: int | None = latency_slice_us or None
        self.registry: PublicationRegistry[ArrangementSnapshot] | None = None
        self.runtimes: dict[Role, RuntimeClient] = {}
        self.maintenance_process: MaintenanceProcess | None = None
        self.endpoint: ComputeClient | None = None
        self._mux: Multiplexer | None = None
        self._current: LocalConnection | None = None

    def _runtime(self, role: Role) -> RuntimeClient:
        worker = ComputeWorker(role, open_storage=self.storage, registry=self.registry,
                               metrics=self.metrics, poll_interval=self.poll_interval)
        hints = ThreadHints()
        if role == "maintenance":
            hints = ThreadHints(nice=self.maintenance_nice)
        elif role == "interactive":
            hints = ThreadHints(slice_us=self.latency_slice_us)
        # Optionally, the interactive runtime answers ready point lookups on the event loop's
        # thread as they arrive (`ComputeWorker.answer_now`): no hop to its thread and back.
        inline = worker.answer_now if role == "interactive" and inline_lookups() else None
        client = RuntimeClient(worker, name=role, hints=hints, inline=inline)
        worker.set_activator(client.wake)
        self.runtimes[role] = client
        return client

    async def start(self) -> ComputeClient:
        if self.endpoint is not None:
            return self.endpoint
        if self.mode == "one":
            self.endpoint = await self._runtime("solo").start()
        else:
            self.registry = PublicationRegistry()
            maintenance: ComputeClient
            if self.placement == "processes":
                self.maintenance_process = MaintenanceProcess(
                    self.storage_url, self.registry, self.metrics,
                    poll_interval=self.poll_interval, nice=self.maintenance_nice,
                    start=self.maintenance_start)
                maintenance = await self.maintenance_process.start()
                if self.storage_url is not None:
                    # This process's appends (over any handle of the storage: SQLite's share
                    # one notifier per file) wake the maintenance process at once.
                    self.maintenance_process.wake_on(
                        self.storage(self.storage_url).backend.notifier)
            else:
                maintenance = await self._runtime("maintenance").start()
            interactive = await self._runtime("interactive").start()
            self._mux = Multiplexer(maintenance=maintenance, interactive=interactive,
                                    strict=self.strict)
            self.endpoint = self._mux
        return self.endpoint

    async def close(self) -> None:
        await self._stop_runtimes()
        self.storage.close()

    async def _stop_runtimes(self) -> None:
        """Stop the endpoint, runtimes and maintenance process (storage stays open)."""
        if self._mux is not None:
            await self._mux.aclose()
            self._mux = None
        for rt in self.runtimes.values():
            await rt.close()
        self.runtimes.clear()
        if self.maintenance_process is not None:
            await self.maintenance_process.close()
            self.maintenance_process = None
        self.endpoint = None

    async def __aenter__(self) -> ComputeClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> LocalConnection:
        """A fresh in-process connection to this replica's endpoint, for a controller's connect
        factory: closing it ends only that connection, never the replica. As over TCP, one
        connection is current at a time and a new one supersedes the old. A replica whose
        endpoint failed (a runtime raised: shared fate) is rebuilt first — new runtimes over the
        same storage — as a supervisor restarts a failed `twofold replica`."""
        if self._current is not None and self._current.ended:
            log.warning("the replica's endpoint failed; restarting its runtimes")
            self._current.close()
            self._current = None
            await self._stop_runtimes()
        endpoint = await self.start()
        if self._current is not None:
            self._current.close()
        self._current = LocalConnection(endpoint)
        return self._current

    def lookup_now(self, gid: GlobalId, t: int, keys: list[Row], mfp: MapFilterProject | None,
                   finishing: RowSetFinishing | None) -> list[tuple[Row, int]] | None:
        """A ready point lookup answered at once on the calling (event loop's) thread from the
        interactive runtime's published arrangement (`ComputeWorker.lookup_now`), or None
        (not two runtimes, not started, not ready): the controller's synchronous read of a
        replica in its own process (`Controller.peek_now`). Nothing is sent to the runtime,
        so no ordering against its command stream is needed: the answer is the index's
        contents at `t`, which any arrangement readable there holds."""
        client = self.runtimes.get("interactive")
        if client is None or self.endpoint is None:
            return None
        worker = client.worker
        assert isinstance(worker, ComputeWorker)
        return worker.lookup_now(gid, t, keys, mfp, finishing)

    def lookup_now_each(
        self, gid: GlobalId, t: int,
        lookups: Sequence[tuple[list[Row], MapFilterProject | None, RowSetFinishing | None]],
    ) -> list[list[tuple[Row, int]] | None] | None:
        """`lookup_now` of each lookup, the shared checks once (`ComputeWorker.lookup_now_each`)."""
        client = self.runtimes.get("interactive")
        if client is None or self.endpoint is None:
            return None
        worker = client.worker
        assert isinstance(worker, ComputeWorker)
        return worker.lookup_now_each(gid, t, lookups)

    # A Replica is itself usable as a ComputeClient once started.
    async def send(self, command: ComputeCommand) -> None:
        if self.endpoint is None:
            raise RuntimeError("replica not started")
        await self.endpoint.send(command)

    async def recv(self) -> ComputeResponse | None:
        if self.endpoint is None:
            raise RuntimeError("replica not started")
        return await self.endpoint.recv()


def eager_first(runtimes: RuntimesMode, placement: str) -> bool:
    """Whether the replica's TCP server writes the first response of each event-loop turn at
    once (`transport/coalesce.py`): with maintenance in a process of its own. Then this
    process's loop has a core's worth of CPU to spare for one more `send` per burst, and the
    controller starts on that response while the rest of the burst is answered, instead of the
    two sides taking turns over whole bursts (8 closed-loop readers in `bench/twoway.py`:
    7,186-7,208 -> 8,255-8,335 lookups/s, load 1.6-5). When maintenance shares this process
    (one runtime, or two as threads) the process is what saturates, and the extra wakeups cost
    more than the overlap gains (one runtime 6,111-6,184 -> 5,140-5,775), so a turn's responses
    leave in one write. `TWOFOLD_EAGER_FIRST=1`/`0` overrides, for measuring."""
    raw = os.environ.get("TWOFOLD_EAGER_FIRST")
    if raw is not None:
        return raw == "1"
    return runtimes == "two" and placement == "processes"


async def serve_replica(
    storage_url: str, *, host: str = "127.0.0.1", port: int = 0,
    runtimes: RuntimesMode = "two", token: str | None = None,
    ssl: _ssl.SSLContext | None = None, ready: asyncio.Future[tuple[str, int]] | None = None,
    placement: Placement = "auto",
) -> int:
    """Serve a replica over TCP until its endpoint ends; returns the process exit code.

    The storage is opened first (a bad URL or an unopenable file raises `StorageError` before
    anything listens), and its identity guards the handshake: a controller naming another
    storage is refused."""
    # This process is the replica's own, so its maintenance process may be forked from it
    # (sharing the interpreter's and libraries' pages; `process.py`). `TWOFOLD_MAINTENANCE_START
    # =spawn` starts a fresh interpreter instead.
    start = os.environ.get("TWOFOLD_MAINTENANCE_START", "fork")
    if start not in ("fork", "spawn"):
        raise ValueError(f"TWOFOLD_MAINTENANCE_START must be fork or spawn, got {start!r}")
    replica = Replica(storage_url, runtimes, placement=placement,
                      maintenance_start=start)  # type: ignore[arg-type]
    try:
        storage = replica.storage(None)  # a bad URL fails here, before anything starts
        # Started before this process reads storage: that runs polars, whose thread pool must
        # not have started when the maintenance process is forked.
        endpoint = await replica.start()
        own = storage_id(storage)
    except BaseException:
        await replica.close()
        raise
    if runtimes == "two" and replica.latency_slice_us is not None:
        # This thread runs the event loop — network and multiplexer — so it is on every read's
        # path too. The process is the replica's own, so its main thread may take the hint.
        sched.apply(ThreadHints(slice_us=replica.latency_slice_us), "replica event loop")
    server = ReplicaServer(endpoint, host=host, port=port, token=token, ssl=ssl,
                           storage_id=own, storage=storage_url,
                           eager_first=eager_first(runtimes, replica.placement))
    try:
        await server.start()
        if ready is not None and not ready.done():
            ready.set_result(server.address)
        await server.wait_closed()
    finally:
        await server.aclose()
        await replica.close()
    if server.exception is not None:
        log.error("replica ended: %s", server.exception)
        return 1
    return 0
