"""The front process's side of a maintenance process (`spec/placement.md`).

`MaintenanceProcess` is a `ComputeClient`: the multiplexer talks to it exactly as it talks to a
runtime on a thread. `start()` starts the maintenance process (`python -m
twofold.replica.maintenance`, or a fork of this process: `start.py`) with one end of a Unix
socket pair and then, on the event loop:

- sends commands as `C` messages, in order (`wire.py`);
- applies what arrives, in order: responses go to `recv` behind the iteration fence (as for a
  threaded runtime, nothing answered before maintenance handled a `Hello` reaches the new
  iteration); `Publish` messages become snapshots in the front's **registry mirror** — their new
  batches mapped read-only from the memfds that came with them (`shm.py`), their unchanged ones
  taken from the id's current snapshot — so readiness waits, tombstones (`Closed`) and resets
  (`Z`) behave for the interactive runtime exactly as with threads;
- forwards the interactive runtime's standing holds (I1c) and the release of every mapping whose
  last view is gone, and syncs both runtimes' metrics for introspection.

Shared fate: if the maintenance process dies or fails, `recv` raises `MaintenanceFailed` (the
multiplexer, and `twofold replica`, end with it). Closing the client closes the socket, which
ends the process (and the process also dies with the thread that started it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable

from twofold.engine import ArrangementSnapshot
from twofold.engine.batch import Batch
from twofold.protocol import (
    ComputeCommand,
    ComputeResponse,
    DecodeError,
    Frontier,
    GlobalId,
    Hello,
)
from twofold.protocol.codec import decode_response, encode
from twofold.replica import wire
from twofold.replica.lagtrace import LagTrace
from twofold.replica.metrics_sync import METRICS_INTERVAL, absorb_metrics, metrics_message
from twofold.replica.shm import Layout, map_readonly, read_from
from twofold.replica.start import ChildProcess, StartMethod, fork, fork_is_safe, spawn
from twofold.runtime.introspection import ReplicaMetrics
from twofold.runtime.registry import PublicationRegistry
from twofold.runtime.thread import ITERATION_STARTED, FencedOutbox
from twofold.storage.backend import Notifier

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 5.0
"""Seconds `close` waits for the maintenance process to exit before killing it."""

_READS_PER_WAKEUP = 16
_WAKE = wire.pack(wire.WAKE)

class MaintenanceFailed(ConnectionError):
    """The maintenance process died or its runtime failed: the replica fails with it."""


class MaintenanceProcess:
    """A `ComputeClient` over a maintenance runtime in a child process. Use `async with` or
    `start()`/`close()`. See the module docstring."""

    def __init__(
        self, storage_url: str | None, registry: PublicationRegistry[ArrangementSnapshot],
        metrics: ReplicaMetrics, *, poll_interval: float, nice: int = 0,
        start: StartMethod = "spawn",
    ) -> None:
        self.storage_url = storage_url
        self.registry = registry
        self.metrics = metrics
        self.poll_interval = poll_interval
        self.nice = nice
        self.start_method: StartMethod = start
        self.started_by: StartMethod | None = None  # how it was started (fork may fall back)
        self.process: ChildProcess | None = None
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._responses: FencedOutbox | None = None
        self._reader = wire.FrameReader()
        self._wbuf = bytearray()
        self._batches: dict[GlobalId, dict[int, Batch]] = {}  # buffers of each current snapshot
        self._released: list[int] = []
        self._released_lock = threading.Lock()
        self._on_ready: Callable[[], None] | None = None
        self._metrics_task: asyncio.Task[None] | None = None
        self._closing = False
        self.error: BaseException | None = None
        self._woken = False  # a WAKE is on its way to the loop, not yet written
        self.wakes_sent = 0
        self._notifiers: list[Notifier] = []
        self._trace = LagTrace("front")  # off unless TWOFOLD_LAG_TRACE is set (lagtrace.py)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    async def start(self) -> MaintenanceProcess:
        if self.process is not None:
            raise RuntimeError("maintenance process already started")
        loop = self._loop = asyncio.get_running_loop()
        self._responses = FencedOutbox(loop)
        front, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self.start_method == "fork" and fork_is_safe():
                self.process = fork(front, child, self.storage_url,
                                    poll_interval=self.poll_interval, nice=self.nice)
                self.started_by = "fork"
            else:
                self.process = spawn(child, self.storage_url, poll_interval=self.poll_interval,
                                     nice=self.nice)
                self.started_by = "spawn"
        finally:
            child.close()
        log.debug("maintenance process %d started (%s)", self.process.pid, self.started_by)
        front.setblocking(False)
        self._sock = front
        loop.add_reader(front.fileno(), self._on_readable)
        self.registry.add_hold_waker(self._on_hold)
        self._metrics_task = loop.create_task(self._sync_metrics())
        return self

    async def __aenter__(self) -> MaintenanceProcess:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the ComputeClient ---------------------------------------------------------------------

    async def send(self, command: ComputeCommand) -> None:
        if self.error is not None or self._closing or self._sock is None:
            raise MaintenanceFailed("the maintenance process has stopped") from self.error
        if isinstance(command, Hello) and self._responses is not None:
            self._responses.hello_sent()
        self._write(wire.pack(wire.COMMAND, encode(command)))

    async def recv(self) -> ComputeResponse | None:
        if self._responses is None:
            raise RuntimeError("maintenance process was not started")
        response = await self._responses.recv()
        if self._trace.on:
            self._trace.frontier("t", response)
        return response

    def recv_nowait(self) -> ComputeResponse | None:
        response = None if self._responses is None else self._responses.recv_nowait()
        if response is not None and self._trace.on:
            self._trace.frontier("t", response)
        return response

    def set_on_ready(self, on_ready: Callable[[], None] | None) -> None:
        """Call `on_ready()` (on the loop's thread) after responses arrive (the multiplexer's
        `SupportsPush`)."""
        self._on_ready = on_ready

    # -- writing -------------------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        """Queue `frame` (on the loop's thread); frames go out whole and in order."""
        sock = self._sock
        if sock is None:
            return
        if not self._wbuf:
            try:
                sent = sock.send(frame)
            except BlockingIOError:
                sent = 0
            except OSError as e:
                self._fail(MaintenanceFailed(f"the link to the maintenance process broke: {e}"))
                return
            if sent == len(frame):
                return
            frame = frame[sent:]
            assert self._loop is not None
            self._loop.add_writer(sock.fileno(), self._on_writable)
        self._wbuf += frame

    def _on_writable(self) -> None:
        sock = self._sock
        if sock is None:
            return
        try:
            sent = sock.send(self._wbuf)
        except BlockingIOError:
            return
        except OSError as e:
            self._fail(MaintenanceFailed(f"the link to the maintenance process broke: {e}"))
            return
        del self._wbuf[:sent]
        if not self._wbuf and self._loop is not None:
            self._loop.remove_writer(sock.fileno())

    def _from_any_thread(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None or self._closing:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            loop.call_soon_threadsafe(fn)

    def wake_on(self, notifier: Notifier) -> None:
        """After every change `notifier` tells of (an append by this process: the front's
        INSERTs), send the maintenance process a `WAKE`, so it polls its shards at once rather
        than at its next poll interval; appends by other processes still land by the poll."""
        notifier.subscribe_all(self._wake)
        self._notifiers.append(notifier)

    def _wake(self) -> None:
        # On the appending thread: one WAKE per burst of appends before the loop sends it.
        if not self._woken:
            self._woken = True
            self._from_any_thread(self._send_wake)

    def _send_wake(self) -> None:
        self._woken = False
        self.wakes_sent += 1
        self._write(_WAKE)

    def _on_hold(self, gid: GlobalId) -> None:
        # On the interactive runtime's thread: read the hold now, send it from the loop.
        hold = self.registry.standing_hold(gid) or Frontier.empty()
        frame = wire.pack(wire.HOLD, wire.StandingHold(gid, hold))
        self._from_any_thread(lambda: self._write(frame))

    def _release(self, buffer: int) -> None:
        # On whichever thread dropped the mapping's last view.
        with self._released_lock:
            first = not self._released
            self._released.append(buffer)
        if first:
            self._from_any_thread(self._flush_released)

    def _flush_released(self) -> None:
        with self._released_lock:
            buffers, self._released = self._released, []
        if buffers:
            self._write(wire.pack(wire.RELEASED, wire.Released(buffers)))

    async def _sync_metrics(self) -> None:
        seen = (0, 0)
        while True:
            await asyncio.sleep(METRICS_INTERVAL)
            msg = metrics_message(self.metrics, "interactive", seen)
            if msg is not None:
                sync, seen = msg
                self._write(wire.pack(wire.METRICS, sync))

    # -- reading -------------------------------------------------------------------------------

    def _on_readable(self) -> None:
        sock = self._sock
        assert sock is not None and self._responses is not None
        items: list[ComputeResponse | object] = []
        try:
            for _ in range(_READS_PER_WAKEUP):
                try:
                    data, fds = wire.receive(sock)
                except BlockingIOError:
                    break
                except ConnectionResetError:  # it died with our bytes unread
                    data, fds = b"", []
                if not data:
                    self._ended()
                    break
                for msg in self._reader.feed(data, fds):
                    self._dispatch(msg, items)
                    if self._sock is None:  # it reported a failure: nothing more to read
                        return
        except Exception as e:  # a corrupt stream or a failed publication: the replica fails
            log.exception("the maintenance process's stream failed")
            self._deliver(items)
            self._fail(MaintenanceFailed(f"the maintenance process's stream failed: {e}"))
            return
        self._deliver(items)

    def _deliver(self, items: list[ComputeResponse | object]) -> None:
        if items and self._responses is not None:
            # On the loop's thread: the multiplexer's pump is woken directly, not a loop turn
            # later through the self-pipe (responses wait behind reads for every such turn).
            self._responses.outbox.put_many_from_loop(items)  # type: ignore[arg-type]
            items.clear()
            if self._on_ready is not None:
                self._on_ready()

    def _dispatch(self, msg: wire.Message, items: list[ComputeResponse | object]) -> None:
        kind = msg.kind
        if kind == wire.RESPONSE:
            response = decode_response(msg.body, max_size=wire.MAX_LOCAL_FRAME)
            items.append(response)
            if self._trace.on:
                self._trace.frontier("a", response)
        elif kind == wire.PUBLISH:
            publish = wire.unpack(kind, msg.body)
            assert isinstance(publish, wire.Publish)
            self._publish(publish, msg.fds)
        elif kind == wire.CLOSED:
            closed = wire.unpack(kind, msg.body)
            assert isinstance(closed, wire.Closed)
            self._batches.pop(closed.id, None)
            self.registry.close(closed.id, closed.reason)
        elif kind == wire.RESET:
            self._batches.clear()
            self.registry.reset()
        elif kind == wire.ITERATION:
            items.append(ITERATION_STARTED)
        elif kind == wire.METRICS:
            sync = wire.unpack(kind, msg.body)
            assert isinstance(sync, wire.MetricsSync)
            absorb_metrics(self.metrics, sync)
        elif kind == wire.FAILED:
            self._deliver(items)
            self._fail(MaintenanceFailed(
                f"the maintenance runtime failed: {msg.body.decode(errors='replace')}"))
        else:
            raise DecodeError(f"unexpected message kind {kind!r} from the maintenance process")

    def _publish(self, publish: wire.Publish, fds: list[int]) -> None:
        previous = self._batches.get(publish.id, {})
        current: dict[int, Batch] = {}
        used: set[int] = set()
        try:
            data = tuple(self._batch(r, fds, used, previous, current) for r in publish.data)
            errors = tuple(self._batch(r, fds, used, previous, current) for r in publish.errors)
        finally:
            for i, fd in enumerate(fds):
                if i not in used:
                    os.close(fd)
        self._batches[publish.id] = current
        self.registry.publish(publish.id, ArrangementSnapshot(
            publish.desc, tuple(publish.key), data, errors, publish.since, publish.upper))

    def _batch(self, ref: wire.BatchRef, fds: list[int], used: set[int],
               previous: dict[int, Batch], current: dict[int, Batch]) -> Batch:
        if ref.fd < 0 and ref.inline is None:
            old = previous.get(ref.buffer) or current.get(ref.buffer)
            if old is None:
                raise DecodeError(f"publication refers to buffer {ref.buffer}, which the front "
                                  f"does not hold")
            batch = Batch(old.data, old.codes, old.hashes, ref.lower, ref.upper, ref.since,
                          ref.tmin, ref.tmax, old.memo)
        else:
            layout = Layout(ref.rows, ref.ipc_len)
            if ref.fd >= 0:
                used.add(ref.fd)
                buffer = ref.buffer
                buf = map_readonly(fds[ref.fd], layout, lambda: self._release(buffer))
                batch = read_from(buf, layout, lower=ref.lower, upper=ref.upper, since=ref.since,
                                  tmin=ref.tmin, tmax=ref.tmax)
            else:
                assert ref.inline is not None
                batch = read_from(ref.inline, layout, lower=ref.lower, upper=ref.upper,
                                  since=ref.since, tmin=ref.tmin, tmax=ref.tmax)
        current[ref.buffer] = batch
        return batch

    def _ended(self) -> None:
        if self._closing:
            return
        code = self.process.poll() if self.process is not None else None
        self._fail(MaintenanceFailed(
            "the maintenance process exited" + (f" with code {code}" if code is not None else "")))

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
            log.error("replica failing: %s", error)
        self._detach()
        if self._responses is not None:
            self._responses.outbox.close(self.error)

    def _detach(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(sock.fileno())
                self._loop.remove_writer(sock.fileno())
            sock.close()
        self._reader.close()

    async def close(self) -> None:
        """Stop the maintenance process (closing the link ends it) and wait for it."""
        self._closing = True
        self.registry.remove_waker(self._on_hold)
        for notifier in self._notifiers:
            notifier.unsubscribe_all(self._wake)
        self._notifiers.clear()
        self._trace.close()
        if self._metrics_task is not None:
            self._metrics_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._metrics_task
            self._metrics_task = None
        self._detach()
        # Drop the mirror's snapshots: their mappings go as soon as no reader holds a view.
        self._batches.clear()
        self.registry.reset()
        proc = self.process
        if proc is not None and proc.poll() is None:
            loop = asyncio.get_running_loop()
            try:
                await asyncio.wait_for(loop.run_in_executor(None, proc.wait), CLOSE_TIMEOUT)
            except TimeoutError:
                log.warning("the maintenance process did not exit; killing it")
                proc.kill()
                await loop.run_in_executor(None, proc.wait)
        if self._responses is not None:
            self._responses.outbox.close()
