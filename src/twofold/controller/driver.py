"""`InstanceDriver`: the async half of the controller that keeps one instance's replicas in step.

Contract (`spec/controller.md`): every command goes to every replica (and into the command
history first); each replica has a connection task that replays the reduced history under a new
epoch after every (re)connection; responses from older epochs are discarded; a failed replica is
rebuilt by replay while the others keep serving. All decisions are made by the sans-IO
`InstanceState`; this module only moves commands, responses and events (to `Deliveries`), and
watches availability (`availability.py`): `wait_connected`, and failing reads once every replica
has been gone `unavailable_after` seconds. `Controller` (`controller.py`) adds the reads.

Ownership: the driver owns its connection tasks; `close()` cancels and awaits every one, and
fails whatever callers still wait for with `ControllerClosed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Self
from uuid import UUID, uuid4

from twofold.controller.availability import Watchdog, is_configuration_error, unavailable
from twofold.controller.backoff import Backoff
from twofold.controller.delivery import Deliveries
from twofold.controller.errors import (
    CollectionFailed,
    ControllerClosed,
    ReplicaUnavailable,
)
from twofold.controller.failures import FailureTracker, failed_closure
from twofold.controller.frontiers import ReplicaId
from twofold.controller.holds import DEFAULT_READ_POLICY, ReadPolicy
from twofold.controller.instance import (
    Effects,
    InstanceState,
)
from twofold.controller.replica import ConnectFactory, ReplicaConnection, Sleep
from twofold.protocol import (
    ComputeCommand,
    ComputeParameters,
    ComputeResponse,
    DataflowDescription,
    Frontier,
    GlobalId,
    InstanceConfig,
)

log = logging.getLogger(__name__)


class InstanceDriver:
    """Drives the replicas of one instance; see the module docstring."""

    def __init__(
        self,
        replicas: Mapping[ReplicaId, ConnectFactory] | Sequence[ConnectFactory] = (),
        *,
        config: InstanceConfig | None = None,
        read_policy: ReadPolicy = DEFAULT_READ_POLICY,
        backoff: Callable[[], Backoff] = Backoff,
        sleep: Sleep = asyncio.sleep,
        connect_timeout: float | None = 10.0,
        nonce: Callable[[], UUID] = uuid4,
        source_upper: Callable[[str], Frontier | None] | None = None,
        unavailable_after: float | None = None,
        names: Mapping[ReplicaId, str] | None = None,
    ) -> None:
        self.state = InstanceState(config, read_policy, source_upper)
        self.names: dict[ReplicaId, str] = dict(names or {})
        """How errors name each replica (e.g. its address); default `replica N`."""
        self._watchdog = Watchdog(unavailable_after, self._declare_unavailable)
        self._replica_changed = asyncio.Event()
        self._factories: dict[ReplicaId, ConnectFactory] = (
            dict(replicas) if isinstance(replicas, Mapping) else dict(enumerate(replicas, 1))
        )
        self._backoff = backoff
        self._sleep = sleep
        self._connect_timeout = connect_timeout
        self._nonce = nonce
        self.connections: dict[ReplicaId, ReplicaConnection] = {}
        self._tasks: dict[ReplicaId, asyncio.Task[None]] = {}
        self.deliveries = Deliveries()
        """The callers waiting for peeks, copy-tos, subscribes and frontiers."""
        self._transient_ids = itertools.count(1)
        self._started = False
        self._closed = False
        self.stale_responses = 0
        """Responses from an older epoch of their replica: discarded."""
        self.response_errors = 0
        self.failures = FailureTracker()
        self.failed: dict[GlobalId, str] = {}
        """Collections failed for good (`failures.py`), with why; their reads raise
        `CollectionFailed`."""

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._apply(self.state.start())
        for rid, factory in list(self._factories.items()):
            self._spawn(rid, factory)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Cancel and await every connection task; fail every waiting caller."""
        if self._closed:
            return
        self._closed = True
        self._watchdog.cancel()
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self.deliveries.fail_all(lambda: ControllerClosed("the controller was closed"))

    def _check_open(self) -> None:
        if self._closed:
            raise ControllerClosed("the controller was closed")
        if not self._started:
            raise ControllerClosed("the controller was not started (use `async with`)")

    # -- availability -----------------------------------------------------------------------

    async def wait_connected(self, timeout: float | None) -> None:
        """Return once every replica has connected at least once. Raises `ReplicaUnavailable`
        (naming each missing replica and its last error) at once when a replica refused this
        controller's configuration (token, storage, wire version, TLS, unknown host), or when
        `timeout` seconds pass first."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            self._replica_changed.clear()
            waiting = {r: c for r, c in self.connections.items() if c.epoch == 0}
            if not waiting:
                return
            refused = {r: c for r, c in waiting.items() if is_configuration_error(c.last_error)}
            if refused:
                raise unavailable("a replica cannot be used as configured", refused, self.names)
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise unavailable(f"no connection to the replica within {timeout} s",
                                  waiting, self.names)  # fmt: skip
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._replica_changed.wait()

    def _on_replica_change(self, replica: ReplicaId) -> None:
        self._watchdog.update(self.connections)
        self._replica_changed.set()

    def _unavailable(self) -> ReplicaUnavailable:
        return unavailable(f"no replica has been connected for {self._watchdog.after} s",
                           self.connections, self.names)  # fmt: skip

    def _declare_unavailable(self) -> None:
        if self.deliveries.peeks or self.deliveries.copy_tos:
            log.warning("%s; failing the reads waiting for an answer", self._unavailable())
        self.deliveries.fail_reads(self._unavailable)

    def _check_available(self) -> None:
        """Refuse a read at once while no replica has been connected for `unavailable_after`."""
        if self._watchdog.down:
            raise self._unavailable()

    def add_replica(self, replica: ReplicaId, connect: ConnectFactory) -> None:
        """Add a replica; it is brought up to date by replay."""
        if replica in self._factories:
            raise ValueError(f"replica {replica} already exists")
        self._factories[replica] = connect
        if self._started and not self._closed:
            self._spawn(replica, connect)

    async def remove_replica(self, replica: ReplicaId) -> None:
        """Stop and forget a replica; cleanup no longer waits for its reports."""
        self._factories.pop(replica, None)
        self.connections.pop(replica, None)
        task = self._tasks.pop(replica, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._watchdog.update(self.connections)
        self._apply(self.state.remove_replica(replica))

    def _spawn(self, rid: ReplicaId, factory: ConnectFactory) -> None:
        conn = ReplicaConnection(
            rid,
            factory,
            on_connect=self._on_connect,
            on_response=self.handle_response,
            on_change=self._on_replica_change,
            on_failure=self._on_replica_failure,
            backoff=self._backoff(),
            sleep=self._sleep,
            connect_timeout=self._connect_timeout,
            nonce=self._nonce,
        )
        self.connections[rid] = conn
        self._tasks[rid] = asyncio.create_task(conn.run(), name=f"replica-{rid}")

    # -- dataflows that fail deterministically ----------------------------------------------

    def _on_replica_failure(self, replica: ReplicaId, error: BaseException) -> None:
        """A connection of `replica` ended with `error`. A dataflow failing again after its
        replay is failed for good, with everything computed from it (`failures.py`)."""
        failure = self.failures.replica_failed(replica, error, list(self.connections))
        if failure is None or self._closed:
            return
        live = {id: c.dependencies for id, c in self.state.collections.items() if not c.dropped}
        failed = failed_closure(failure, live)
        if not failed:
            return
        log.error("dataflow %r failed again after its replay (%s); failing %s and dropping it",
                  failure.name, failure.message, ", ".join(str(i) for i in failed))
        self.failed.update(failed)
        for uuid, peek in list(self.state.peeks.items()):
            if peek.target in failed:
                fut = self.deliveries.peeks.pop(uuid, None)
                if fut is not None and not fut.done():
                    fut.set_exception(CollectionFailed(peek.target, failed[peek.target]))
                self._apply(self.state.cancel_peek(uuid))
        for id, message in failed.items():
            sub = self.deliveries.subscriptions.pop(id, None)
            if sub is not None:
                sub._push(CollectionFailed(id, message))
            cfut = self.deliveries.copy_tos.pop(id, None)
            if cfut is not None and not cfut.done():
                cfut.set_exception(CollectionFailed(id, message))
            self._apply(self.state.drop(id))

    def check_not_failed(self, ids: Sequence[GlobalId]) -> None:
        """Raise `CollectionFailed` if any of `ids` failed for good."""
        for id in ids:
            message = self.failed.get(id)
            if message is not None:
                raise CollectionFailed(id, message)

    # -- plumbing ---------------------------------------------------------------------------

    def _on_connect(self, replica: ReplicaId, epoch: int) -> list[ComputeCommand]:
        replay, fx = self.state.connect_replica(replica)
        self._apply(fx)  # queued behind the replay on the new connection
        return replay

    def handle_response(self, replica: ReplicaId, epoch: int, response: ComputeResponse) -> None:
        """Apply a response from `replica` sent during `epoch`; stale epochs are discarded."""
        conn = self.connections.get(replica)
        if conn is None or conn.epoch != epoch:
            self.stale_responses += 1
            return
        try:
            fx = self.state.absorb(replica, response)
        except Exception:
            # A response the state machine cannot apply is a replica bug; it must not take the
            # controller down with it.
            self.response_errors += 1
            log.exception("replica %s sent a response that could not be applied", replica)
            return
        self._apply(fx)

    def _apply(self, fx: Effects) -> None:
        if fx.commands:
            for conn in self.connections.values():
                conn.enqueue(fx.commands)
        self.deliveries.deliver(fx.events)

    def new_transient_id(self) -> GlobalId:
        """A transient id never used before by this controller."""
        return GlobalId.transient(next(self._transient_ids))

    # -- collections ------------------------------------------------------------------------

    async def create_dataflow(
        self, desc: DataflowDescription, *, read_policy: ReadPolicy | None = None
    ) -> DataflowDescription:
        """Create a dataflow on every replica; returns it with its chosen `as_of`. Raises
        `CollectionFailed` if it imports a collection that failed for good."""
        self._check_open()
        self.check_not_failed(desc.import_ids())
        for id in desc.export_ids():  # a re-created id starts afresh
            self.failed.pop(id, None)
        desc, fx = self.state.create_dataflow(desc, read_policy)
        self._apply(fx)
        return desc

    async def drop(self, id: GlobalId) -> None:
        """Drop a collection (its compaction to empty follows once nothing holds it)."""
        self._check_open()
        self._apply(self.state.drop(id))

    async def update_configuration(self, params: ComputeParameters) -> None:
        self._check_open()
        self._apply(self.state.update_configuration(params))

    async def set_read_policy(self, id: GlobalId, policy: ReadPolicy) -> None:
        self._check_open()
        self._apply(self.state.set_read_policy(id, policy))

    def acquire_hold(self, id: GlobalId, timestamp: int) -> None:
        """Keep `id` readable at `timestamp` (its since stays at or before it) until
        `release_hold(id, timestamp)`. Raises `HoldError` if the since is already past it,
        `UnknownCollection` for an unknown or dropped collection."""
        self._check_open()
        self._apply(self.state.acquire_hold(id, Frontier.at(timestamp)))

    def release_hold(self, id: GlobalId, timestamp: int) -> None:
        """Release a hold `acquire_hold` took (after close, or of a forgotten collection: a
        no-op)."""
        if self._closed:
            return
        self._apply(self.state.release_hold(id, Frontier.at(timestamp)))

    def frontier(self, id: GlobalId) -> Frontier:
        """The global write frontier of `id` (maximum over replicas; never regresses)."""
        return self.state.collection(id, "frontier").write_frontier

    def since(self, id: GlobalId) -> Frontier:
        return self.state.collection(id, "since").since

    def wait_for_frontier(self, id: GlobalId, frontier: Frontier) -> asyncio.Future[None]:
        """A future that resolves once `id`'s write frontier is at or beyond `frontier` (await
        it). The wait is registered at the call; it fails with `UnknownCollection` if the
        collection is forgotten first, `ControllerClosed` if the controller closes."""
        self._check_open()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if frontier <= self.frontier(id):
            fut.set_result(None)
        else:
            self.deliveries.frontier_waiters.setdefault(id, []).append((frontier, fut))
        return fut
