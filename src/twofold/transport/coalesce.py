"""Frames written in one event-loop turn leave in one socket write (`Coalescer`).

Over loopback TCP a socket write is the most expensive step of answering a point lookup: the
kernel runs the receiver's side of the stack inside the sender's `send` (measured in the
replica's front under 8 closed-loop readers: ~30% of its event loop's time was in
`transport.write`, one `send` per response), and every segment is one more wakeup of the peer.
A burst of commands read in one turn is answered in one turn; this gathers those frames and
writes them at the end of the turn, as one `send`. A frame waits at most one loop turn (the
callbacks already ready run first), and never behind more than `limit` bytes: past that the
gathered frames are written at once, so a sender that never yields still reaches the socket
and `drain()`'s backpressure.

`eager=True` writes the first frame of each turn at once and gathers the rest: the peer starts
on that frame while this side answers the rest of the burst, so the two ends overlap instead of
taking turns over whole bursts — one more `send` per turn, worth it where this process has CPU
to spare (the replica's front with maintenance in its own process: `replica.assembly.eager_first`).

Invariant: frames reach the writer whole and in the order they were written; `flush()` before
closing the writer loses none, `discard()` (an aborted connection) drops the unwritten ones.
"""

from __future__ import annotations

import asyncio
from typing import Final

COALESCE_LIMIT: Final = 64 * 1024
"""Bytes gathered before they are written without waiting for the end of the turn."""


class Coalescer:
    """Gathers frames for `writer` and writes them once per event-loop turn."""

    __slots__ = ("_eager", "_handle", "_limit", "_parts", "_size", "_writer")

    def __init__(
        self, writer: asyncio.StreamWriter, limit: int = COALESCE_LIMIT, *, eager: bool = False
    ) -> None:
        self._writer = writer
        self._eager = eager
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0
        self._handle: asyncio.Handle | None = None

    @property
    def pending(self) -> int:
        """Bytes gathered and not yet handed to the writer."""
        return self._size

    def write(self, data: bytes) -> None:
        """Queue `data` (a whole frame) to be written at the end of this loop turn."""
        if self._eager and self._handle is None:
            # The first frame of a turn leaves at once, so the peer can start on it while the
            # rest of the turn's frames are gathered; the marker makes those wait for its end.
            if not self._writer.is_closing():
                self._writer.write(data)
            self._handle = asyncio.get_running_loop().call_soon(self.flush)
            return
        self._parts.append(data)
        self._size += len(data)
        if self._size >= self._limit:
            self.flush()
        elif self._handle is None:
            self._handle = asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Hand every gathered frame to the writer now, in one write."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()
        parts = self._parts
        if not parts:
            return
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        self._parts = []
        self._size = 0
        if not self._writer.is_closing():
            self._writer.write(data)

    def discard(self) -> None:
        """Drop the gathered frames (the connection is being aborted)."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.cancel()
        self._parts = []
        self._size = 0
