"""A shard's `Listener` (its updates after a time, as contiguous batches) and `tile_batches`,
the pure decision of which batches those are (split from `shard.py`, which creates listeners)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from twofold.protocol import MAX_TIME, Frontier
from twofold.storage.backend import ListenerLease, Part
from twofold.storage.errors import (
    CorruptStorage,
    SinceViolation,
)
from twofold.storage.updates import (
    TIME,
    UpdateBatch,
    empty_updates,
)

if TYPE_CHECKING:
    from twofold.storage.shard import Shard


class Listener:
    """Delivers a shard's updates at times after `as_of`, in time order, as contiguous batches.

    Each stored batch that lies after `as_of` is delivered as one `UpdateBatch` with its own
    `[lower, upper)`; stretches of time without updates are delivered as empty batches, so the
    batches tile `[as_of + 1, upper)` exactly and `frontier` is the upper of the last one. The
    shard's `since` must stay at or before the last delivered time (`frontier - 1`): once it
    passes, reads raise `SinceViolation` rather than risk delivering compacted times twice.

    One consumer at a time; sync (`next_batch`, iteration) and async (`anext_batch`, `async for`)
    consumers may alternate. Cancelling `anext_batch` loses nothing: fetched batches wait in a
    buffer for the next call. After the shard's upper becomes empty and that final batch is
    delivered, iteration ends.

    On a backend whose readers hold leases (`LeasingBackend`: PostgreSQL), the listener holds
    the shard's since at its last delivered time under a lease, from whatever process it runs
    in, until `close()` (or until it is garbage-collected, or its process dies and the lease
    runs out).
    """

    def __init__(self, shard: Shard, as_of: int) -> None:
        self.shard = shard
        self.as_of = as_of
        self._frontier = Frontier.empty() if as_of == MAX_TIME else Frontier.at(as_of + 1)
        self._buffer: deque[UpdateBatch] = deque()
        self._lock = threading.Lock()
        # The backend's change token at the last fill that read (`_fill`), if it offers one.
        self._change_token: Callable[[], Hashable] | None = getattr(
            shard.backend, "change_token", None
        )
        self._seen_token: Hashable | None = None
        self._lease: ListenerLease | None = None
        lease_listener = getattr(shard.backend, "lease_listener", None)
        if lease_listener is not None:
            self._lease, since = lease_listener(shard.shard_id, as_of)
            self._release = weakref.finalize(self, self._lease.release)
        else:
            since = shard.since
        if not since.contains(as_of):
            self.close()
            raise SinceViolation(
                f"shard {shard.shard_id!r}: cannot listen from {as_of}, before since {since!r}",
                shard_id=shard.shard_id,
                as_of=as_of,
                since=since,
                upper=shard.upper,
            )

    def close(self) -> None:
        """Release this listener's hold on since (idempotent; reads still work until since
        passes them)."""
        if self._lease is not None and self._release.detach() is not None:
            self._lease.release(wait=True)

    @property
    def frontier(self) -> Frontier:
        """Every update at a time before this has been fetched."""
        return self._frontier

    @property
    def done(self) -> bool:
        """The shard is closed and everything has been delivered."""
        return self._frontier.is_empty and not self._buffer

    def poll(self) -> list[UpdateBatch]:
        """Everything available now, without waiting."""
        self._fill()
        out = list(self._buffer)
        self._buffer.clear()
        return out

    def _fill(self) -> None:
        """Fetch the batches in `[frontier, upper)` into the buffer; never waits.

        On a backend with a change token (SQLite: see `SqliteBackend.change_token`), a fill
        whose token equals the one taken before the last fill that read reads nothing: no
        commit to the file has ended since, so neither the upper nor the since can have moved.
        The token is taken before the reads, so a commit during them moves the next one."""
        with self._lock:
            start = self._frontier.time
            if start is None:
                return
            token = None if self._change_token is None else self._change_token()
            if token is not None and token == self._seen_token:
                return
            backend, shard_id = self.shard.backend, self.shard.shard_id
            state = backend.state(shard_id)
            self._check_since(state.since, start)
            if state.upper.contains(start):
                self._seen_token = token
                return  # no time at or after `start` is complete yet
            state, parts = backend.read_parts(shard_id, overlapping_from=start, up_to=None)
            self._check_since(state.since, start)
            self._buffer.extend(
                tile_batches(start, state.upper, parts, empty_updates(self.shard.desc), shard_id)
            )
            self._frontier = state.upper
            self._seen_token = token
            if self._lease is not None:  # delivered before upper: hold only its last time
                last = state.upper.step_back()
                if last is not None:
                    self._lease.advance(Frontier.at(last))

    def _check_since(self, since: Frontier, start: int) -> None:
        if not since.contains(start - 1):
            raise SinceViolation(
                f"shard {self.shard.shard_id!r}: since advanced to {since!r}, past this "
                f"listener's last delivered time {start - 1}",
                shard_id=self.shard.shard_id,
                as_of=start - 1,
                since=since,
                upper=self.shard.upper,
            )

    def _after_fill(
        self, deadline: float | None, now: float
    ) -> tuple[UpdateBatch | None, float | None]:
        """After a fill: `(batch, None)` when the caller should return `batch` (a batch, or
        `None` for done or timed out), else `(None, seconds)` to wait before filling again."""
        if self._buffer:
            return self._buffer.popleft(), None
        if self._frontier.is_empty:
            return None, None
        wait = self.shard.poll_interval
        if deadline is not None:
            remaining = deadline - now
            if remaining <= 0:
                return None, None
            wait = min(wait, remaining)
        return None, wait

    def next_batch(self, timeout: float | None = None) -> UpdateBatch | None:
        """The next batch, waiting up to `timeout` seconds (`None`: forever) for one to arrive.

        Returns `None` on timeout, or at once when the listener is `done`.
        """
        if self._buffer:
            return self._buffer.popleft()
        deadline = None if timeout is None else time.monotonic() + timeout
        wake = threading.Event()
        notifier = self.shard.backend.notifier
        notifier.subscribe(self.shard.shard_id, wake.set)
        try:
            while True:
                # Subscribed before polling, so an append between the poll and the wait still
                # wakes us.
                wake.clear()
                self._fill()
                batch, wait = self._after_fill(deadline, time.monotonic())
                if wait is None:
                    return batch
                wake.wait(wait)
        finally:
            notifier.unsubscribe(self.shard.shard_id, wake.set)

    def __iter__(self) -> Iterator[UpdateBatch]:
        """Every batch, blocking for each, until the shard closes."""
        while True:
            batch = self.next_batch()
            if batch is None:
                return
            yield batch

    async def anext_batch(self, timeout: float | None = None) -> UpdateBatch | None:
        """Async `next_batch`: waits without blocking the event loop; cancel-safe."""
        if self._buffer:
            return self._buffer.popleft()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        wake = asyncio.Event()

        def on_change() -> None:
            loop.call_soon_threadsafe(wake.set)

        notifier = self.shard.backend.notifier
        notifier.subscribe(self.shard.shard_id, on_change)
        try:
            while True:
                wake.clear()
                # Reads may decode large blobs: keep them off the event loop. If this await is
                # cancelled, the fetch still completes into the buffer, so nothing is lost.
                await asyncio.to_thread(self._fill)
                batch, wait = self._after_fill(deadline, loop.time())
                if wait is None:
                    return batch
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), wait)
        finally:
            notifier.unsubscribe(self.shard.shard_id, on_change)

    async def __aiter__(self) -> AsyncIterator[UpdateBatch]:
        while True:
            batch = await self.anext_batch()
            if batch is None:
                return
            yield batch


def tile_batches(
    start: int, upper: Frontier, parts: list[Part], empty: pa.Table, shard_id: str
) -> list[UpdateBatch]:
    """The batches a listener delivers for `[start, upper)`, given the stored parts that may
    hold times in it (in time order): one batch per part, the part's own bounds (clipped at
    `start`), with empty batches over the gaps, so the batches tile `[start, upper)` exactly.

    Pure: the decision half of `Listener`, separate from the reads that feed it.
    """
    out: list[UpdateBatch] = []
    cursor = Frontier.at(start)
    for part in parts:
        if part.upper.less_equal(cursor):
            continue
        if not part.upper.less_equal(upper):
            raise CorruptStorage(
                f"shard {shard_id!r}: part {part.part_id} ends at {part.upper!r}, beyond the "
                f"upper {upper!r}"
            )
        if cursor.time is not None and part.lower > cursor.time:
            out.append(UpdateBatch(cursor, Frontier.at(part.lower), empty))
            cursor = Frontier.at(part.lower)
        updates = part.updates
        if part.lower < start:
            # Only a part appended before the listener's `as_of` can straddle `start`, and it
            # is not compacted (its upper is beyond since), so its times are the original ones.
            keep = pc.greater_equal(updates.column(TIME), pa.scalar(start, pa.uint64()))
            updates = updates.filter(keep)
        out.append(UpdateBatch(cursor, part.upper, updates))
        cursor = part.upper
    if cursor != upper:
        out.append(UpdateBatch(cursor, upper, empty))
    return out
