"""One replica connection: connect, replay under a new epoch, forward commands, receive.

Contract: `ReplicaConnection.run()` loops until cancelled. Each iteration connects through the
replica's factory; on success it bumps the **epoch**, swaps in an empty command queue and calls
`on_connect(replica, epoch)` — synchronously, so no command can slip between the history
snapshot and the queue — which returns the reduced history to replay. It sends the replay (each
`Hello` with a fresh nonce), then forwards queued commands and hands every response to
`on_response(replica, epoch, response)`. Any failure — refused, reset, closed, a decode or
protocol error, a connect timeout — ends the iteration (`last_error` says why); the next one
starts after the backoff policy's delay, and `on_failure(replica, error)` hears why (before
the next attempt). `on_change(replica)` is called on every connection, every
disconnection and every failed attempt (`connected`, `down_since`, `last_error` are then
current). Cancellation propagates and closes the client.

Invariant protected: every command reaches every connection of the replica exactly as the
history says, in order: commands queued while disconnected are not sent (the replay already
re-declares them), and commands issued after the snapshot are queued behind the replay.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from uuid import UUID, uuid4

from twofold.client import ComputeClient, Pipe
from twofold.controller.backoff import Backoff
from twofold.controller.frontiers import ReplicaId
from twofold.protocol import ComputeCommand, ComputeResponse, Hello

log = logging.getLogger(__name__)

ConnectFactory = Callable[[], Awaitable[ComputeClient]]
"""How to reach one replica: returns a connected `ComputeClient`, or raises."""
Sleep = Callable[[float], Awaitable[None]]


class ReplicaGone(ConnectionError):
    """The replica ended the connection cleanly (`recv` returned `None`)."""


class ReplicaConnection:
    """The connection task of one replica. See the module docstring."""

    def __init__(
        self,
        replica: ReplicaId,
        connect: ConnectFactory,
        *,
        on_connect: Callable[[ReplicaId, int], list[ComputeCommand]],
        on_response: Callable[[ReplicaId, int, ComputeResponse], None],
        on_change: Callable[[ReplicaId], None] | None = None,
        on_failure: Callable[[ReplicaId, BaseException], None] | None = None,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
        connect_timeout: float | None = 10.0,
        nonce: Callable[[], UUID] = uuid4,
    ) -> None:
        self.replica = replica
        self._connect = connect
        self._on_connect = on_connect
        self._on_response = on_response
        self._on_change = on_change
        self._on_failure = on_failure
        self.backoff = Backoff() if backoff is None else backoff
        self._sleep = sleep
        self._connect_timeout = connect_timeout
        self._nonce = nonce
        self._queue: Pipe[ComputeCommand] = Pipe()
        self.epoch = 0
        """Bumped on every successful connection; responses of older epochs are stale."""
        self.connected = False
        self.failures = 0
        self.last_error: BaseException | None = None
        """Why the latest attempt or connection failed (`None` before any failure)."""
        self.down_since: float | None = asyncio.get_running_loop().time()
        """Loop time since which the replica has been disconnected; `None` while connected."""
        self.delays: list[float] = []
        self._epoch_changed = asyncio.Event()

    def enqueue(self, commands: list[ComputeCommand]) -> None:
        """Queue commands for the current connection. While disconnected they are not kept:
        they are in the history, and the next connection's replay re-declares them (so an
        outage costs no memory proportional to traffic)."""
        if not self.connected:
            return
        for c in commands:
            self._queue.put(c)

    async def wait_for_epoch(self, epoch: int) -> None:
        """Return once this replica has connected `epoch` times (a test and tooling hook)."""
        while self.epoch < epoch:
            self._epoch_changed.clear()
            await self._epoch_changed.wait()

    async def run(self) -> None:
        while True:
            try:
                await self._session()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # every failure means: reconnect
                self.failures += 1
                self.last_error = exc
                log.info("replica %s connection failed (%r); reconnecting", self.replica, exc)
                if self._on_failure is not None:
                    self._on_failure(self.replica, exc)
            self._set_connected(False)
            delay = self.backoff.next_delay()
            self.delays.append(delay)
            await self._sleep(delay)

    async def _session(self) -> None:
        # Not `asyncio.wait_for`: on 3.11 it can swallow a cancellation that races with the
        # connect completing, and a task that missed its cancel would make `close()` hang.
        async with asyncio.timeout(self._connect_timeout):
            client = await self._connect()
        try:
            self.epoch += 1
            epoch = self.epoch
            queue: Pipe[ComputeCommand] = Pipe()
            self._queue = queue
            # Connected *before* the snapshot: commands `on_connect` itself issues (and all
            # later ones) queue behind the replay; no await separates the two.
            self._set_connected(True)
            replay = self._on_connect(self.replica, epoch)
            self._epoch_changed.set()
            for cmd in replay:
                await client.send(self._specialize(cmd))
            await self._pump(client, queue, epoch)
        finally:
            self._set_connected(False)
            await _close(client)

    def _set_connected(self, connected: bool) -> None:
        if connected != self.connected:
            self.connected = connected
            self.down_since = None if connected else asyncio.get_running_loop().time()
        if self._on_change is not None:
            self._on_change(self.replica)

    def _specialize(self, cmd: ComputeCommand) -> ComputeCommand:
        # Each protocol iteration needs a nonce never used before with this replica.
        return Hello(nonce=self._nonce()) if isinstance(cmd, Hello) else cmd

    async def _pump(self, client: ComputeClient, queue: Pipe[ComputeCommand], epoch: int) -> None:
        async def send_loop() -> None:
            while True:
                cmd = await queue.get()
                assert cmd is not None  # the queue is never closed
                await client.send(self._specialize(cmd))

        async def recv_loop() -> None:
            healthy = False
            while True:
                resp = await client.recv()
                if resp is None:
                    raise ReplicaGone(f"replica {self.replica} closed the connection")
                if not healthy:
                    healthy = True
                    self.backoff.reset()
                self._on_response(self.replica, epoch, resp)

        tasks = [asyncio.create_task(send_loop()), asyncio.create_task(recv_loop())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # raises the failure
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _close(client: ComputeClient) -> None:
    close = getattr(client, "close", None)
    if not callable(close):
        return
    try:
        result = close()
        if inspect.isawaitable(result):
            await result
    except Exception as exc:  # a broken connection may fail to close; it is gone either way
        log.debug("closing a replica client failed: %r", exc)
