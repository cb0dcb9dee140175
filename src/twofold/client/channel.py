"""In-process channels between a controller side and a replica side.

A `Pipe` is one direction: a deque plus the futures of its waiting receivers. `send` never
blocks; `recv` is **cancel-safe** — a message is removed from the deque only by the `recv` that
returns it, so cancelling a pending `recv` loses nothing. Every waiting receiver owns its own
future, so cancelling one receiver never cancels another. The sender ends a pipe with `close()` (the
receiver drains what was sent, then gets `None`) or `fail(exc)` (drains, then `exc` is raised).

Pipes are single-loop objects: use them from coroutines of one event loop. Crossing threads is
the runtime's job (it wakes the loop with `call_soon_threadsafe`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Generic, Protocol, TypeVar, runtime_checkable

from twofold.protocol import ComputeCommand, ComputeResponse

T = TypeVar("T")


@runtime_checkable
class ComputeClient(Protocol):
    """The controller's view of anything that answers compute commands."""

    async def send(self, command: ComputeCommand) -> None: ...

    async def recv(self) -> ComputeResponse | None:
        """The next response; `None` once the other side ended cleanly. Cancel-safe."""
        ...


class ChannelClosed(ConnectionError):
    """A message was sent on a pipe that was already closed."""


class Pipe(Generic[T]):
    """One direction of an in-process channel. See the module docstring."""

    __slots__ = ("_closed", "_error", "_items", "_waiters")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._waiters: list[asyncio.Future[None]] = []
        self._closed = False
        self._error: BaseException | None = None

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def put(self, item: T) -> None:
        """Enqueue `item` without blocking."""
        if self._closed:
            raise ChannelClosed("send on a closed channel")
        self._items.append(item)
        self._wake()

    def close(self) -> None:
        """End the stream: after draining, `recv` returns `None`."""
        self._closed = True
        self._wake()

    def fail(self, exc: BaseException) -> None:
        """End the stream with an error: after draining, `recv` raises `exc`."""
        self._closed = True
        self._error = exc
        self._wake()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    def get_nowait(self) -> T | None:
        """The next item if one is queued, else `None` (also at end of stream)."""
        return self._items.popleft() if self._items else None

    async def get(self) -> T | None:
        """The next item; `None` at a clean end of stream; raises a failed stream's error."""
        items = self._items
        while not items:
            if self._closed:
                if self._error is not None:
                    raise self._error
                return None
            # One future per receiver: a shared one would be cancelled by the first receiver
            # cancelled, raising CancelledError in receivers nobody cancelled.
            w: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(w)
            try:
                # Cancelling here consumes nothing: the item stays queued for the next get().
                await w
            finally:
                if not w.done() or w.cancelled():
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(w)
        return items.popleft()


class _End(Generic[T]):
    __slots__ = ("_inbox", "_outbox")

    def __init__(self, outbox: Pipe[object], inbox: Pipe[T]) -> None:
        self._outbox = outbox
        self._inbox = inbox

    async def recv(self) -> T | None:
        return await self._inbox.get()

    def recv_nowait(self) -> T | None:
        """A message already queued, else `None` (also at the end of the stream). Never blocks;
        the multiplexer's fast path uses it."""
        return self._inbox.get_nowait()

    def close(self) -> None:
        """End this side's outgoing stream; the peer's `recv` returns `None` after draining."""
        self._outbox.close()

    def fail(self, exc: BaseException) -> None:
        """End this side's outgoing stream with an error the peer's `recv` raises."""
        self._outbox.fail(exc)


class ControllerEnd(_End[ComputeResponse]):
    """The controller side of a channel: a `ComputeClient`."""

    __slots__ = ()

    async def send(self, command: ComputeCommand) -> None:
        self._outbox.put(command)


class ReplicaEndpoint(_End[ComputeCommand]):
    """The replica side of a channel: receives commands, sends responses."""

    __slots__ = ()

    async def send(self, response: ComputeResponse) -> None:
        self._outbox.put(response)

    def send_nowait(self, response: ComputeResponse) -> None:
        self._outbox.put(response)


def channel_pair() -> tuple[ControllerEnd, ReplicaEndpoint]:
    """A connected (controller side, replica side) pair of in-process channel ends."""
    commands: Pipe[ComputeCommand] = Pipe()
    responses: Pipe[ComputeResponse] = Pipe()
    controller = ControllerEnd(commands, responses)  # type: ignore[arg-type]
    replica = ReplicaEndpoint(responses, commands)  # type: ignore[arg-type]
    return controller, replica
