"""A connection's received bytes, handed over as they arrive — to a synchronous handler while the
connection waits for them, else to the connection's next read.

Contract: `InboxProtocol` is asyncio's stream protocol (so `StreamWriter`'s writes, drain and
`start_tls` work unchanged) whose received bytes go to its `Inbox` instead of a
`StreamReader`. `Inbox.read()` returns the bytes received since the last read (all of them, in
order), `b""` at end of stream, and None when `poke()` asked the reader to look again without
new bytes. While `Inbox.now` is set and nothing is waiting to be read, arriving bytes are
offered to it first, inside the protocol's callback: when it returns True it has taken them
(and the read goes on waiting) — what lets a connection answer a request with no task to wake,
no read to complete.

With a `Turn` (`Inbox(turn)`), what arrives for `now` while other callbacks are still to run
in the event loop's turn is held until its end instead and offered then, every inbox's in
the order it arrived (first, to the server's `Turn.together`, which answers what it can of
them at once): a turn's requests are answered one after another and their replies sent
after them (`Turn.write`), so the answers run with the code and data they share still in
the caches rather than between one socket's receive and send and the next's. The bytes are
offered before anything else the inbox does (its end of stream, a `poke()`, a read), so
nothing is reordered. With nothing else to run in the turn they are offered at once.

`InboxProtocol` is also a `BufferedProtocol`: the transport receives into one buffer of
`CHUNK` bytes kept per connection (`recv_into`) and the inbox gets a copy of what arrived.
asyncio's plain path (`data_received`) calls `recv(262144)` for every read: CPython allocates
a 256 KiB bytes object each time and shrinks it, ~15-17 us of allocation (and page faults) on
this machine where a `recv_into` of a small request into a kept buffer is ~1.5 us.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from twofold.sql.catalog_watch import begin_scope, end_scope

log = logging.getLogger(__name__)

LIMIT = 1 << 17
"""Bytes an inbox holds unread before the transport stops reading (as a `StreamReader`)."""
CHUNK = 1 << 16
"""Bytes one receive takes at most (the size of the connection's receive buffer)."""

TURN_BATCH: int | None = 0
"""How many of a turn's requests `twofold serve` answers together (`Turn.batch`) unless
`TWOFOLD_TURN_BATCH` says otherwise (`turn_batch`): none — each is answered in its own
receive, which spreads the replies out. Answered together, a turn's replies leave back to
back, and a client process with many connections (threads under one interpreter lock) has
many of them woken at once; on an otherwise idle two-core machine that costs the client more
than answering together saves the server (docs/pgwire.md, "How many are answered together":
measured both ways). On a machine busy with other work it is the other way round:
`TWOFOLD_TURN_BATCH=all` there."""


def turn_batch() -> int | None:
    """`Turn.batch` from `TWOFOLD_TURN_BATCH`: a count (0: hold nothing), `all` (None), or
    unset/empty for `TURN_BATCH`."""
    raw = os.environ.get("TWOFOLD_TURN_BATCH", "").strip()
    if not raw:
        return TURN_BATCH
    if raw == "all":
        return None
    try:
        n = int(raw)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"TWOFOLD_TURN_BATCH must be a count of requests or 'all', not {raw!r}")
    return n


class Turn:
    """The inboxes that received bytes for their `now` during one turn of the event loop,
    offered them together at its end (`asyncio`'s callbacks run in order: the one scheduled
    by a turn's first receive runs after that turn's other receives, before the next
    turn's), and the replies written while they are (`write`), sent after the last.

    `batch` bounds how many are answered together: the held inboxes go in arrival order in
    groups of at most `batch`, each group's replies sent before the next group is answered
    (None: all of them as one group); 0 holds nothing — each receive is answered in its own
    callback (its catalog check still shared with the iteration's others: `scope`)."""

    def __init__(self, batch: int | None = None) -> None:
        if batch is not None and batch < 0:
            raise ValueError(f"a turn's batch is a count of requests, not {batch}")
        self.batch = batch
        self._scoped = False
        self._held: list[Inbox] = []
        self._writes: list[tuple[asyncio.WriteTransport, bytes]] | None = None
        self.together: Callable[[list[Inbox]], None] | None = None
        """Set by the server: answers what it can of several inboxes' held bytes at once
        (each it answers `Inbox.take`n), before the rest are offered to their `now`."""

    def hold(self, inbox: Inbox) -> bool:
        """Hold `inbox`'s bytes to the turn's end: True, unless nothing else is to run in
        this turn (then holding gains nothing and costs a turn of the loop: False, and its
        bytes are offered at once)."""
        if self.batch == 0:
            return False
        if not self._held:
            loop = asyncio.get_running_loop()
            # The callbacks left to run (asyncio's own loop keeps them in `_ready`: this
            # turn's other receives, and whatever was scheduled for the next); a loop that
            # does not keep them so always holds.
            ready = getattr(loop, "_ready", None)
            if ready is not None and not ready:
                return False
            loop.call_soon(self._settle)
        self._held.append(inbox)
        return True

    def scope(self) -> bool:
        """Open this iteration's catalog-check scope (`catalog_watch.begin_scope`), closed by
        a callback scheduled now — which runs in the next iteration, after its poll and
        before any receive it reports. Every receive offered within it was reported by this
        iteration's poll: its first byte arrived before any check made in the scope. True
        when open; False where the loop does not keep its callbacks so (then nothing is
        shared)."""
        if self._scoped:
            return True
        loop = asyncio.get_running_loop()
        if getattr(loop, "_ready", None) is None:
            return False
        self._scoped = True
        begin_scope()
        loop.call_soon(self._unscope)
        return True

    def unscope(self) -> None:
        """Close the scope early (what follows in this iteration checks storage itself)."""
        if self._scoped:
            end_scope()

    def _unscope(self) -> None:
        self._scoped = False
        end_scope()

    def write(self, transport: asyncio.WriteTransport, data: bytes) -> None:
        """`transport.write(data)`, after the turn's other answers when settling one."""
        if self._writes is None:
            transport.write(data)
        else:
            self._writes.append((transport, data))

    def _settle(self) -> None:
        held, self._held = self._held, []
        step = self.batch or len(held) or 1
        for i in range(0, len(held), step):
            self._answer(held[i:i + step])

    def _answer(self, held: list[Inbox]) -> None:
        writes: list[tuple[asyncio.WriteTransport, bytes]] = []
        self._writes = writes
        try:
            if self.together is not None and len(held) > 1:
                try:
                    self.together(held)
                except Exception:  # what it did not take is offered as usual
                    log.exception("answering a turn's requests together failed")
            for inbox in held:
                try:
                    inbox.settle()
                except Exception:  # as asyncio treats a protocol callback's failure
                    log.exception("a pgwire connection's receive failed")
                    if inbox.transport is not None:
                        inbox.transport.abort()
        finally:
            self._writes = None
            for transport, data in writes:
                try:
                    transport.write(data)
                except Exception:  # that connection alone: the others' replies still go
                    log.exception("a pgwire connection's reply could not be written")
                    transport.abort()


class Inbox:
    def __init__(self, turn: Turn | None = None) -> None:
        self._turn = turn
        self.owner: Any = None  # the connection it is the inbox of (`Turn.together`'s)
        self._held: bytes | None = None  # bytes for `now`, offered at the end of the turn
        self._chunks: list[bytes] = []
        self._size = 0
        self.transport: asyncio.Transport | None = None  # paused past LIMIT unread bytes
        self._paused = False
        self._eof = False
        self._poked = False
        self._waiter: asyncio.Future[None] | None = None
        self.now: Callable[[bytes], bool] | None = None
        """Offered arriving bytes first while set and nothing waits to be read."""

    def feed(self, data: bytes) -> None:
        if self._held is not None:  # more in the same turn: offered with it
            self._held += data
            return
        now = self.now
        if now is not None and not self._chunks:
            if self._turn is not None and self._turn.hold(self):
                self._held = data
                return
            if now(data):
                return
        self._take(data)

    def held(self) -> bytes | None:
        """The bytes held for `now`, if any and it is still set (as `settle` would offer)."""
        return self._held if self.now is not None and not self._chunks else None

    def take(self) -> None:
        """The held bytes were answered (`Turn.together`): drop them."""
        self._held = None

    def settle(self) -> None:
        """Offer the bytes held for `now` (module docstring), if any."""
        data, self._held = self._held, None
        if data is None:
            return
        now = self.now
        if now is not None and not self._chunks and now(data):
            return
        self._take(data)

    def _take(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        if self._size > LIMIT and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def feed_eof(self) -> None:
        self.settle()
        self._eof = True
        self._wake()

    def poke(self) -> None:
        """Have the pending (or next) read return None: look again, no new bytes."""
        self.settle()
        self._poked = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self) -> bytes | None:
        self.settle()
        while not self._chunks and not self._eof and not self._poked:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        if self._chunks:
            data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
            self._chunks.clear()
            self._size = 0
            if self._paused:
                self._paused = False
                if self.transport is not None and not self.transport.is_closing():
                    self.transport.resume_reading()
            return data
        if self._poked:
            self._poked = False
            return None
        return b""


class InboxProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """A stream protocol whose received bytes go to `inbox` (module docstring)."""

    def __init__(self, inbox: Inbox, reader: asyncio.StreamReader, connected: Any,
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(reader, connected, loop=loop)
        self.inbox = inbox
        self._buffer = memoryview(bytearray(CHUNK))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.inbox.feed(self._buffer[:nbytes].tobytes())

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.inbox.transport = transport
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.inbox.feed(data)

    def eof_received(self) -> bool:
        self.inbox.feed_eof()
        return bool(super().eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self.inbox.feed_eof()
        super().connection_lost(exc)
