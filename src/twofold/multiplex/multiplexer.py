"""`Multiplexer`: one `ComputeClient` over the maintenance and interactive runtimes.

`send` asks the pure `Router` where a command goes and awaits each delivery in order; a failing
send is raised to the caller. `recv` merges the two response streams (`spec/multiplexer.md`,
"Merging responses").

Invariants it protects:
- Nothing is lost or duplicated. One long-lived pump task per runtime moves that runtime's
  responses, in order, into a bounded per-runtime buffer; only `recv` takes from the buffers,
  and it never awaits between taking a response and returning it, so cancelling `recv` at any
  point loses nothing. The pumps are cancelled only once the merge is over (`aclose`, or a
  runtime's end), and a runtime's `recv` is cancel-safe anyway.
- Per runtime, responses keep their order (one pump per runtime, FIFO buffers). A pump may
  drain extra responses without awaiting through an optional `recv_nowait()`, which it calls
  only between its own `recv`s, so order holds.
- Fairness: when both buffers hold a response, successive `recv`s alternate between runtimes.
  A flooding runtime fills only its own bounded buffer, whose pump then waits for space.
- Shared fate: when either runtime's stream ends (`None`) the multiplexer's `recv` returns
  `None` from then on; when either raises, `recv` raises that error from then on. A runtime's
  end is reported in its turn, after the responses it sent before it; what the other runtime
  still has buffered then is discarded, as its stream ends with it.
- Frontier filter: interactive `Frontiers` pass `Router.screen` in the pump. A dropped one is
  logged and counted; in strict mode the `ProtocolViolation` is raised by `recv` in the
  response's place, and the responses after it follow.
- No task without an owner: `aclose()` (or leaving `async with`) cancels and awaits the pumps.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from collections import deque
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Final, Protocol, runtime_checkable

from twofold.client import ComputeClient
from twofold.multiplex.routing import (
    INTERACTIVE,
    MAINTENANCE,
    Collection,
    ProtocolViolation,
    Router,
    Runtime,
)
from twofold.protocol import ComputeCommand, ComputeResponse, Frontiers, GlobalId, Hello

log = logging.getLogger(__name__)

BUFFER_LIMIT: Final = 1024
"""Responses a pump buffers per runtime before it waits for the consumer (backpressure)."""


@runtime_checkable
class SupportsRecvNowait(Protocol):
    """Optional fast path a runtime client may offer: a response that is already available,
    or `None` when none is (also at the end of the stream). It must never block, and must not
    be called while one of the client's own `recv`s is pending."""

    def recv_nowait(self) -> ComputeResponse | None: ...


@runtime_checkable
class SupportsPush(Protocol):
    """Optional: a runtime client whose responses arrive on the event loop's own thread (the
    maintenance process's link) may call `on_ready()` after each arrival; the multiplexer then
    moves them into its buffer at once through `recv_nowait`, instead of a loop turn later in
    its pump. Order holds: neither the pump nor this holds a response across an await."""

    def set_on_ready(self, on_ready: Callable[[], None] | None) -> None: ...


class _Mark:
    """What a pump hands to `recv` after its buffered responses: the end of the runtime's stream
    (`final`, with the runtime's error if it raised), or a strict-mode `ProtocolViolation` to
    raise before the responses that followed it."""

    __slots__ = ("error", "final")

    def __init__(self, error: Exception | None, *, final: bool) -> None:
        self.error = error
        self.final = final


class _Nothing(enum.Enum):
    NOTHING = enum.auto()


_NOTHING: Final = _Nothing.NOTHING


class _Side:
    """One runtime as the merge sees it: its client, its buffer and its pump."""

    __slots__ = ("buffer", "client", "mark", "other", "pump", "resume", "runtime", "space")

    def __init__(self, runtime: Runtime, client: ComputeClient) -> None:
        self.runtime = runtime
        self.client = client
        self.buffer: deque[ComputeResponse] = deque()
        # Handed over after `buffer` drains; the pump appends nothing while it is set.
        self.mark: _Mark | None = None
        # Set while the pump waits for `recv` to raise a non-final mark.
        self.resume: asyncio.Future[None] | None = None
        # Set while the pump waits for `recv` to make room in `buffer`.
        self.space: asyncio.Future[None] | None = None
        self.pump: asyncio.Task[None] | None = None
        self.other: _Side = self

    def release_space(self) -> None:
        """Wake the pump if it waits for room in `buffer`."""
        space = self.space
        if space is not None:
            self.space = None
            if not space.done():
                space.set_result(None)

    def popleft(self) -> ComputeResponse:
        """Take the oldest buffered response (the buffer must not be empty)."""
        self.release_space()
        return self.buffer.popleft()


def _take(
    buf: deque[ComputeResponse],
    item: ComputeResponse,
    nowait: Callable[[], ComputeResponse | None] | None,
) -> None:
    """Buffer `item`, then drain what the client already has, without awaiting, up to the
    limit. Safe for order: the pump calls this only while none of the client's `recv`s is
    pending."""
    append = buf.append
    append(item)
    if nowait is None:
        return
    while len(buf) < BUFFER_LIMIT:
        more = nowait()
        if more is None:
            return
        append(more)


class Multiplexer:
    """A `ComputeClient` over a maintenance and an interactive `ComputeClient`.

    Use it from one event loop. Concurrent `send`s are serialised in call order; `recv` is meant
    for one consumer (concurrent callers each get distinct responses).
    """

    def __init__(
        self,
        *,
        maintenance: ComputeClient,
        interactive: ComputeClient,
        strict: bool = False,
    ) -> None:
        self._router = Router(strict=strict)
        self._clients: tuple[ComputeClient, ComputeClient] = (maintenance, interactive)
        m = _Side(MAINTENANCE, maintenance)
        i = _Side(INTERACTIVE, interactive)
        m.other, i.other = i, m
        self._sides = (m, i)
        self._turn = m  # the side `recv` tries first
        self._waiters: list[asyncio.Future[None]] = []
        self._send_lock = asyncio.Lock()
        self._started = False
        self._closed = False
        # The first end `recv` reported; sticky, because the runtimes share fate.
        self._ended: _Mark | None = None

    # -- introspection ------------------------------------------------------------------------

    @property
    def strict(self) -> bool:
        return self._router.strict

    @property
    def violations(self) -> dict[str, int]:
        """Cumulative violation counts keyed `undeclared`, `declared_twice`,
        `peek_undeclared`, `foreign_frontiers` (lenient mode)."""
        return self._router.violations

    @property
    def collections(self) -> Mapping[GlobalId, Collection]:
        """The routing table: live collections, their owner and whether they are published."""
        return self._router.collections

    # -- commands -----------------------------------------------------------------------------

    async def send(self, command: ComputeCommand) -> None:
        """Route `command` and deliver it, in order, to each runtime the table names.

        Raises `ProtocolViolation` (strict mode) before anything is forwarded, and whatever a
        runtime's `send` raises (the multiplexer must then not be used further).
        """
        # One send at a time, routing included: the table's order is then every runtime's
        # order, even when concurrent senders' deliveries would suspend (a slow transport).
        # (`acquire`/`release` rather than `async with`: two coroutines fewer per command.)
        lock = self._send_lock
        await lock.acquire()
        try:
            routing = self._router.route(command)
            if isinstance(command, Hello):
                self._discard_buffered()
            for violation in routing.violations:
                log.warning("protocol violation (%s): %s", violation.kind.value, violation.message)
            clients = self._clients
            for runtime, delivered in routing.deliveries:
                await clients[runtime].send(delivered)
        finally:
            lock.release()

    def _discard_buffered(self) -> None:
        """A `Hello` starts a new protocol iteration: responses buffered now were produced for
        the previous one and must not reach the new controller (runtimes fence their own
        streams the same way)."""
        for side in self._sides:
            dropped = len(side.buffer)
            side.buffer.clear()
            side.release_space()
            if dropped:
                log.debug("discarded %d %s responses of the previous iteration", dropped,
                          side.runtime.label)

    # -- responses ----------------------------------------------------------------------------

    async def recv(self) -> ComputeResponse | None:
        """The next response of either runtime; `None` once either runtime ended. Cancel-safe.

        Raises the error of a runtime whose `recv` raised, and `ProtocolViolation` (strict
        mode) for a response outside the protocol, which is dropped (later responses follow).
        """
        # Fast path: the runtime whose turn it is has a response buffered. No await between
        # taking it and returning it, so there is no point at which a cancel could lose it.
        side = self._turn
        buf = side.buffer
        if buf:
            self._turn = side.other
            # `_Side.popleft` inlined: this is the hottest line of the merge (about 15% of
            # merged throughput in bench/mux.py).
            space = side.space
            if space is not None:
                side.space = None
                if not space.done():
                    space.set_result(None)
            return buf.popleft()
        return await self._recv_slow()

    async def _recv_slow(self) -> ComputeResponse | None:
        while True:
            if self._closed:
                return None
            item = self._poll()
            if item is not _NOTHING:
                return item
            if not self._started:
                self._start()
                continue
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # One future per waiting `recv`: a shared one would be cancelled along with the
            # first cancelled caller and wake the others with CancelledError.
            self._waiters.append(waiter)
            try:
                # Cancelling here takes nothing from the buffers.
                await waiter
            finally:
                if not waiter.done() or waiter.cancelled():
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)

    def _poll(self) -> ComputeResponse | _Nothing | None:
        """Take the next thing `recv` reports, preferring the side whose turn it is; a side's
        mark counts only once its buffer is empty. `_NOTHING` if neither side has anything."""
        ended = self._ended
        if ended is not None:
            if ended.error is not None:
                raise ended.error
            return None
        first = self._turn
        for side in (first, first.other):
            buf = side.buffer
            if buf:
                self._turn = side.other
                return side.popleft()
            mark = side.mark
            if mark is None:
                continue
            self._turn = side.other
            if mark.final:
                self._end(mark)
                return self._poll()
            side.mark = None
            resume, side.resume = side.resume, None
            if resume is not None and not resume.done():
                resume.set_result(None)
            assert mark.error is not None
            raise mark.error
        return _NOTHING

    def _end(self, mark: _Mark) -> None:
        # The runtimes share fate: nothing after the first end is delivered. The pumps stop
        # here; `aclose` awaits them.
        self._ended = mark
        for side in self._sides:
            side.buffer.clear()
            if side.pump is not None:
                side.pump.cancel()

    def _wake(self) -> None:
        waiters = self._waiters
        if waiters:
            self._waiters = []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def _start(self) -> None:
        self._started = True
        loop = asyncio.get_running_loop()
        for side in self._sides:
            side.pump = loop.create_task(
                self._pump(side), name=f"twofold-mux-pump-{side.runtime.label}"
            )
            client = side.client
            # Interactive's responses pass the screen in the pump; only maintenance's are pushed.
            if (side.runtime is MAINTENANCE and isinstance(client, SupportsPush)
                    and isinstance(client, SupportsRecvNowait)):
                client.set_on_ready(functools.partial(self._pushed, side))

    def _pushed(self, side: _Side) -> None:
        """`side`'s client has responses (called on the loop's thread): buffer them now."""
        if self._closed or self._ended is not None or side.mark is not None:
            return
        client = side.client
        assert isinstance(client, SupportsRecvNowait)
        buf = side.buffer
        moved = False
        while len(buf) < BUFFER_LIMIT:
            item = client.recv_nowait()
            if item is None:
                break
            buf.append(item)
            moved = True
        if moved and self._waiters:
            self._wake()

    async def _pump(self, side: _Side) -> None:
        """Move `side`'s responses, in order, into its buffer until its stream ends."""
        client = side.client
        buf = side.buffer
        nowait: Callable[[], ComputeResponse | None] | None = (
            client.recv_nowait if isinstance(client, SupportsRecvNowait) else None
        )
        # Only interactive `Frontiers` can be foreign (see `Router.screen`); maintenance's
        # responses skip the router.
        screens = side.runtime is INTERACTIVE
        loop = asyncio.get_running_loop()
        wake = self._wake
        try:
            while True:
                if len(buf) >= BUFFER_LIMIT:
                    space = side.space = loop.create_future()
                    await space
                    continue
                item = await client.recv()
                if item is None:
                    side.mark = _Mark(None, final=True)
                    wake()
                    return
                if screens:
                    self._take_screened(side, item, nowait)
                else:
                    _take(side.buffer, item, nowait)
                if self._waiters:
                    wake()
                resume = side.resume
                if resume is not None:
                    await resume
        except asyncio.CancelledError:
            if not self._closed and self._ended is None:
                # Not cancelled by its owner (`aclose`, or the end of the other runtime): the
                # runtime's stream is gone, and a silent stop would hang `recv` forever.
                side.mark = _Mark(
                    RuntimeError(f"the {side.runtime.label} runtime's recv was cancelled"),
                    final=True,
                )
                wake()
            raise
        except Exception as exc:  # handed to `recv` in order, after what came before it
            side.mark = _Mark(exc, final=True)
            wake()

    def _take_screened(
        self,
        side: _Side,
        item: ComputeResponse,
        nowait: Callable[[], ComputeResponse | None] | None,
    ) -> None:
        """`_take` for interactive, whose `Frontiers` reports pass `Router.screen`. A strict
        violation becomes `side`'s mark: `recv` raises it after the responses before it, and
        the pump waits until it has, so the ones after it stay behind it."""
        buf = side.buffer
        append = buf.append
        screen = self._router.screen
        while True:
            if type(item) is not Frontiers:
                append(item)
            else:
                try:
                    violation = screen(INTERACTIVE, item)
                except ProtocolViolation as exc:
                    side.mark = _Mark(exc, final=False)
                    side.resume = asyncio.get_running_loop().create_future()
                    return
                if violation is None:
                    append(item)
                else:
                    log.warning("dropped a response: %s", violation.message)
            if nowait is None or len(buf) >= BUFFER_LIMIT:
                return
            next_item = nowait()
            if next_item is None:
                return
            item = next_item

    # -- lifecycle ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop merging: cancel and await the pumps. Buffered responses are discarded and any
        pending or later `recv` returns `None`. Idempotent."""
        self._closed = True
        self._wake()
        pumps = [side.pump for side in self._sides if side.pump is not None]
        for pump in pumps:
            pump.cancel()
        for side in self._sides:
            side.buffer.clear()
            side.pump = None
        if pumps:
            await asyncio.gather(*pumps, return_exceptions=True)

    close = aclose

    async def __aenter__(self) -> Multiplexer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
