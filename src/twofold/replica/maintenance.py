"""The maintenance process: a replica's maintenance runtime in a process of its own.

Started by the front process (`process.MaintenanceProcess`) as
`python -m twofold.replica.maintenance --fd N --storage URL --parent PID ...`, with one end of a
Unix socket pair at descriptor N. It runs one loop on its main thread: wait for a message on the
socket (or the worker's own deadline), apply it, let the `ComputeWorker` (role `maintenance`)
step, then send what the step produced — publications, tombstones and resets first, then the
responses — in one ordered stream (`wire.py`). It opens storage itself.

`SharingRegistry` is the registry the worker publishes into here: it keeps the standing holds
(I1c: the front forwards the interactive runtime's as `StandingHold` messages, so maintenance
compacts a published arrangement to the meet of the controller's frontier and the hold it knows
— a hold that arrives late only delays compaction) and turns every publication into a `Publish`
message whose new batches are written once into shared memory (`shm.py`).

Shared fate: the process exits when the socket ends (the front closed it or died) and, through
`PR_SET_PDEATHSIG`, the moment the front process's thread that started it dies, even mid-step.
An exception in the worker is reported (`E`) after the responses before it, and the process
exits non-zero; the front's endpoint then raises.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import selectors
import signal
import socket
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from twofold.engine import ArrangementSnapshot
from twofold.engine.batch import Batch
from twofold.protocol import DecodeError, GlobalId, Hello
from twofold.protocol.codec import decode_command, encode
from twofold.replica import heap, wire
from twofold.replica.lagtrace import LagTrace
from twofold.replica.metrics_sync import METRICS_INTERVAL, absorb_metrics, metrics_message
from twofold.replica.shm import SHM_KEY, BufferPool
from twofold.runtime.introspection import ReplicaMetrics
from twofold.runtime.registry import PublicationRegistry

if TYPE_CHECKING:
    from twofold.runtime.worker import ComputeWorker

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1

Outgoing = list[tuple[bytes, list[int]]]


class SharingRegistry(PublicationRegistry[ArrangementSnapshot]):
    """The maintenance process's registry: standing holds kept here, publications sent to the
    front (their new batches through shared memory) on `out`. See the module docstring."""

    def __init__(self, pool: BufferPool, out: Outgoing) -> None:
        super().__init__()
        self.pool = pool
        self.out = out
        self._sent: dict[GlobalId, set[int]] = {}  # buffers in the front's current snapshot

    def _share(self, batches: Sequence[Batch], held: set[int], fds: list[int],
               now: set[int]) -> tuple[list[Batch], list[wire.BatchRef]]:
        out_batches: list[Batch] = []
        refs: list[wire.BatchRef] = []
        for b in batches:
            bid = b.memo.get(SHM_KEY)
            fd, inline = -1, None
            if isinstance(bid, int) and bid in held:
                layout_rows, ipc_len = len(b), 0  # the front has it: a description only
            else:
                shared = (self.pool.resend(b) if bid is not None else None) or self.pool.share(b)
                b, bid = shared.batch, shared.buffer
                layout_rows, ipc_len = shared.layout.rows, shared.layout.ipc_len
                if shared.fd >= 0:
                    fds.append(shared.fd)
                    fd = len(fds) - 1
                    self.pool.sent(bid)
                else:
                    inline = shared.data
            assert isinstance(bid, int)
            now.add(bid)
            out_batches.append(b)
            refs.append(wire.BatchRef(bid, b.lower, b.upper, b.since, b.tmin, b.tmax,
                                      layout_rows, ipc_len, fd, inline))
        return out_batches, refs

    def publish(self, id: GlobalId, snapshot: ArrangementSnapshot) -> ArrangementSnapshot:
        held = self._sent.get(id, set())
        fds: list[int] = []
        now: set[int] = set()
        data, data_refs = self._share(snapshot.data, held, fds, now)
        errors, error_refs = self._share(snapshot.errors, held, fds, now)
        shared = ArrangementSnapshot(snapshot.desc, snapshot.key, tuple(data), tuple(errors),
                                     snapshot.since, snapshot.upper)
        super().publish(id, shared)
        self._sent[id] = now
        msg = wire.Publish(id, snapshot.desc, list(snapshot.key), snapshot.since,
                           snapshot.upper, data_refs, error_refs)
        self.out.append((wire.pack(wire.PUBLISH, msg, len(fds)), fds))
        return shared

    def close(self, id: GlobalId, reason: str | None = None) -> None:
        super().close(id, reason)
        self._sent.pop(id, None)
        self.out.append((wire.pack(wire.CLOSED, wire.Closed(id, reason)), []))

    def reset(self) -> None:
        super().reset()
        self._sent.clear()
        self.out.append((wire.pack(wire.RESET), []))


class MetricsSender:
    """Sends this process's runtime histograms to the front when they change."""

    def __init__(self, metrics: ReplicaMetrics, runtime: str) -> None:
        self.metrics, self.runtime = metrics, runtime
        self._seen = (0, 0)
        self._next = 0.0

    def due(self) -> float:
        return max(0.0, self._next - time.monotonic())

    def sync(self, out: Outgoing, *, force: bool = False) -> None:
        if not force and time.monotonic() < self._next:
            return
        self._next = time.monotonic() + METRICS_INTERVAL
        msg = metrics_message(self.metrics, self.runtime, self._seen)
        if msg is not None:
            sync, self._seen = msg
            out.append((wire.pack(wire.METRICS, sync), []))


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError) as e:
            log.debug("no parent-death signal: %s", e)
    if os.getppid() != parent:  # the front died before the signal was armed
        os._exit(1)


def serve(sock: socket.socket, storage_url: str | None, *, poll_interval: float) -> int:
    """Run the maintenance runtime on `sock` until the front goes away; the exit code."""
    # Imported here, after the scheduling hints are set: threads the engine's libraries start
    # inherit this process's nice value.
    from twofold.replica.assembly import StorageCache
    from twofold.runtime.worker import ComputeWorker

    pool = BufferPool()
    out: Outgoing = []
    registry = SharingRegistry(pool, out)
    metrics = ReplicaMetrics()
    storage = StorageCache(storage_url)
    worker = ComputeWorker("maintenance", open_storage=storage, registry=registry,
                           metrics=metrics, poll_interval=poll_interval)
    sender = MetricsSender(metrics, "maintenance")
    reader = wire.FrameReader()
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    trace = LagTrace("maintenance")
    trim = heap.IdleTrim(on_rest=pool.unmap_free)

    def flush() -> None:
        for frame, fds in out:
            wire.send_blocking(sock, frame, fds)
        out.clear()

    try:
        while True:
            timeout = worker.wait_timeout()
            timeout = sender.due() if timeout is None else min(timeout, sender.due())
            trim_due = trim.due()
            if trim_due is not None:
                timeout = trim_due if timeout is None else min(timeout, trim_due)
            if selector.select(timeout):
                data, fds = wire.receive(sock)
                if not data:
                    return 0  # the front closed the link: nothing left to serve
                for msg in reader.feed(data, fds):
                    _apply(msg, worker, registry, pool, metrics, out)
            else:
                trim.idle()
                if worker.skip_idle_step():
                    # Nothing arrived and nothing changed since a step that did nothing: this
                    # one would do nothing too (idle, ~200 steps a second of ~0.3 ms each).
                    sender.sync(out)
                    flush()
                    continue
            polled = time.time() if trace.on else 0.0
            worker.step()
            trim.worked(worker.last_step_seconds)
            responses = worker.take_responses()
            for response in responses:
                out.append((wire.pack(wire.RESPONSE, encode(response)), []))
            stepped = time.time() if trace.on else 0.0
            sender.sync(out)
            flush()
            if trace.on:
                sent = time.time()
                for response in responses:
                    trace.frontier("m", response, polled, stepped, sent)
            # The merges the step deferred, once its frontiers are on their way: the front
            # learns of the new upper without waiting for them (their publication follows).
            merging = time.perf_counter()
            worker.maintain()
            trim.worked(time.perf_counter() - merging)
            flush()
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the front went away mid-send
    except BaseException as e:
        log.exception("maintenance runtime failed")
        try:
            for response in worker.take_responses():
                out.append((wire.pack(wire.RESPONSE, encode(response)), []))
            text = "".join(traceback.format_exception_only(type(e), e)).strip()
            out.append((wire.pack(wire.FAILED, text.encode()), []))
            flush()
        except OSError:
            pass
        return 1
    finally:
        worker.shutdown()
        storage.close()
        reader.close()
        pool.close()
        trace.close()


def _apply(msg: wire.Message, worker: ComputeWorker, registry: SharingRegistry,
           pool: BufferPool, metrics: ReplicaMetrics, out: Outgoing) -> None:
    kind = msg.kind
    if kind == wire.COMMAND:
        command = decode_command(msg.body, max_size=wire.MAX_LOCAL_FRAME)
        if isinstance(command, Hello):
            worker.take_responses()  # the old iteration's, never to be sent
            worker.handle(command)
            out.append((wire.pack(wire.ITERATION), []))
        else:
            worker.handle(command)
    elif kind == wire.HOLD:
        hold = wire.unpack(kind, msg.body)
        assert isinstance(hold, wire.StandingHold)
        registry.apply_standing_hold(hold.id, hold.frontier)
    elif kind == wire.RELEASED:
        released = wire.unpack(kind, msg.body)
        assert isinstance(released, wire.Released)
        pool.released(released.buffers)
    elif kind == wire.WAKE:
        pass  # the select returned: the step that follows polls the shards
    elif kind == wire.METRICS:
        sync = wire.unpack(kind, msg.body)
        assert isinstance(sync, wire.MetricsSync)
        absorb_metrics(metrics, sync)
    else:
        raise DecodeError(f"unexpected message kind {kind!r} from the front")


def prepare(parent: int, nice: int) -> None:
    """The process's first steps, however it started: die with the front, lower priority,
    keep its heap for the steps (`heap.py`)."""
    _die_with_parent(parent)
    heap.keep()
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + nice)
        except OSError as e:
            log.debug("cannot change the maintenance process's nice value: %s", e)


def reset_inherited_signals() -> None:
    """In a child forked from the front: signals as a fresh interpreter has them, and none
    routed into the front's event loop (its wakeup descriptor)."""
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python starts: EPIPE, not a signal
    signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="twofold-maintenance")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--storage", default=None)
    parser.add_argument("--poll-interval", type=float, required=True)
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    prepare(args.parent, args.nice)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="maintenance %(levelname)s %(name)s: %(message)s")
    sock = socket.socket(fileno=args.fd)
    sock.setblocking(True)
    try:
        return serve(sock, args.storage, poll_interval=args.poll_interval)
    finally:
        sock.close()

if __name__ == "__main__":
    sys.exit(main())
