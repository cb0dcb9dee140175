"""Shards: compare-and-append, snapshot, listen and compaction over any `Backend`.

A `Shard` is a thin, stateless handle: its frontiers are read fresh from the backend on every
access, so handles in different threads and processes agree. The invariants it protects:

- an append is validated completely (schema, non-zero diffs, times in `[lower, new_upper)`,
  `lower <= new_upper`) before the backend is touched, and is then atomic: it lands whole, or
  `UpperMismatch` reports the actual upper and nothing is written;
- a read answers exactly the collection it names or raises: `snapshot(t)` needs
  `since <= t < upper`; a `Listener` raises `SinceViolation` once `since` passes the last time it
  has delivered, because compaction may then have merged times it still has to tell apart;
- `since` never moves backwards, and compaction only rewrites parts wholly behind `since`.

`compare_and_append` with `new_upper == lower` writes nothing but still checks the upper (a
fence); it accepts only an empty batch, since `[lower, lower)` holds no time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from twofold.protocol import MAX_TIME, Frontier, RelationDesc
from twofold.storage.backend import Backend, ListenerLease, Part
from twofold.storage.compaction import plan_compaction
from twofold.storage.errors import (
    BeyondUpper,
    CorruptStorage,
    InvalidUpdates,
    SinceViolation,
    UpperMismatch,
)
from twofold.storage.updates import (
    TIME,
    UpdateBatch,
    UpdatesLike,
    advance_times,
    check_bounds,
    consolidate,
    empty_updates,
    to_update_table,
    update_schema,
)

DEFAULT_POLL_INTERVAL = 0.01
"""Seconds between checks for appends made by other processes (same-process appends wake
listeners at once)."""


def as_frontier(value: Frontier | int, what: str) -> Frontier:
    """Accept a `Frontier` or a bare time `t` (meaning `Frontier.at(t)`)."""
    if isinstance(value, Frontier):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidUpdates(f"{what} must be a Frontier or an int time, got {value!r}")
    try:
        return Frontier.at(value)
    except (TypeError, ValueError) as e:
        raise InvalidUpdates(f"{what}: {e}") from None


def _check_time(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TIME:
        raise InvalidUpdates(f"{what} must be a time in [0, 2**64), got {value!r}")
    return value


class Shard:
    """A handle on one shard of a storage backend. Thread-safe; cheap to create."""

    def __init__(self, backend: Backend, shard_id: str, desc: RelationDesc,
                 *, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        self._backend = backend
        self.shard_id = shard_id
        self.desc = desc
        self.schema: pa.Schema = update_schema(desc)
        self.poll_interval = poll_interval

    def __repr__(self) -> str:
        return f"Shard({self.shard_id!r})"

    @property
    def upper(self) -> Frontier:
        return self._backend.state(self.shard_id).upper

    @property
    def since(self) -> Frontier:
        return self._backend.state(self.shard_id).since

    @property
    def backend(self) -> Backend:
        return self._backend

    # -- writes -----------------------------------------------------------------------------

    def compare_and_append(
        self, updates: UpdatesLike, lower: Frontier | int, new_upper: Frontier | int
    ) -> None:
        """Append `updates` (times in `[lower, new_upper)`) iff the upper is `lower`.

        Raises `UpperMismatch` (carrying the actual upper) when it is not, `SchemaMismatch` or
        `InvalidUpdates` for bad input; in every failure nothing is written.
        """
        lower = as_frontier(lower, "lower")
        new_upper = as_frontier(new_upper, "new_upper")
        if not lower.less_equal(new_upper):
            raise InvalidUpdates(
                f"shard {self.shard_id!r}: new_upper {new_upper!r} is below lower {lower!r}"
            )
        table = to_update_table(updates, self.desc)
        check_bounds(table, lower, new_upper, f"shard {self.shard_id!r}")
        actual = self._backend.compare_and_append(
            self.shard_id, lower, new_upper, table if table.num_rows else None
        )
        if actual is not None:
            raise UpperMismatch(self.shard_id, lower, actual)

    def downgrade_since(self, frontier: Frontier | int, *, compact: bool = True) -> Frontier:
        """Allow compaction up to `frontier`; return the resulting since.

        `since` never moves backwards: a lower `frontier` leaves it where it is. With `compact`,
        history wholly behind the new since is then merged (see `compact`).
        """
        result = self._backend.downgrade_since(self.shard_id, as_frontier(frontier, "since"))
        if compact:
            self.compact()
        return result

    def compact(self) -> int:
        """Merge stored parts wholly behind `since`; return how many parts were merged.

        Safe to run concurrently from anywhere: a merge whose inputs another compactor already
        replaced is abandoned, changing nothing.
        """
        state, infos = self._backend.part_infos(self.shard_id)
        plan = plan_compaction(infos, state.since)
        if len(plan) == 0:
            return 0
        parts = self._backend.load_parts(self.shard_id, plan)
        if parts is None:
            return 0
        # An empty since closes the shard to reads: nothing stored behind it is needed.
        since = MAX_TIME if state.since.time is None else state.since.time
        merged = advance_times(pa.concat_tables([p.updates for p in parts]), since)
        new = Part(0, parts[0].lower, parts[-1].upper, since,
                   merged.num_rows if state.since.time is not None else 0, merged)
        return len(plan) if self._backend.replace_parts(self.shard_id, plan, new) else 0

    # -- reads ------------------------------------------------------------------------------

    def snapshot(self, as_of: int) -> pa.Table:
        """The collection at `as_of`, consolidated, as an update table whose times are `as_of`.

        Requires `since <= as_of < upper`: `SinceViolation` or `BeyondUpper` otherwise.
        """
        as_of = _check_time(as_of, "as_of")
        state, parts = self._backend.read_parts(self.shard_id, overlapping_from=None, up_to=as_of)
        if not state.since.contains(as_of):
            raise SinceViolation(
                f"shard {self.shard_id!r}: cannot read at {as_of}, before since {state.since!r}",
                shard_id=self.shard_id, as_of=as_of, since=state.since, upper=state.upper,
            )
        if state.upper.contains(as_of):
            raise BeyondUpper(
                f"shard {self.shard_id!r}: cannot read at {as_of}, not yet complete "
                f"(upper is {state.upper!r})",
                shard_id=self.shard_id, as_of=as_of, since=state.since, upper=state.upper,
            )
        if not parts:
            return empty_updates(self.desc)
        return consolidate(pa.concat_tables([p.updates for p in parts]), as_of=as_of)

    def listen(self, as_of: int) -> Listener:
        """The updates after `as_of`, batch by batch, as the upper advances (see `Listener`)."""
        return Listener(self, _check_time(as_of, "as_of"))

    def snapshot_and_listen(self, attempts: int = 100) -> tuple[int, pa.Table, Listener]:
        """`(t, snapshot(t), listen(t))` at the latest complete time `t`, with nothing able to
        compact `t` away between the three reads.

        Read one after another (upper, then snapshot, then listen), `since` may pass `t` in
        between: the controller's hold step follows the upper within its window, so a thread
        stalled there for longer — or a fresh table whose upper is still 1 when the ticker and
        a step land — reads at a compacted time. So the listener comes first: on a leasing
        backend its lease holds `since` at `t` from then on, and the snapshot is read under
        it. If `since` passed `t` before the lease (or before the snapshot, on a backend
        without leases, where only an explicit `downgrade_since` moves it), this starts again
        at the then-current upper, up to `attempts` times (`SinceViolation` after that);
        `BeyondUpper` if no time is complete.
        """
        error: SinceViolation | None = None
        for _ in range(attempts):
            upper = self.upper
            last = upper.step_back()
            if last is None:
                raise BeyondUpper(
                    f"shard {self.shard_id!r}: no time is complete yet (upper is {upper!r})",
                    shard_id=self.shard_id, as_of=0, since=self.since, upper=upper)
            try:
                listener = self.listen(last)
            except SinceViolation as e:
                error = e
                continue
            try:
                return last, self.snapshot(last), listener
            except SinceViolation as e:
                listener.close()
                error = e
            except BaseException:
                listener.close()
                raise
        assert error is not None
        raise error


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
            shard.backend, "change_token", None)
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
                shard_id=shard.shard_id, as_of=as_of, since=since, upper=shard.upper,
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
                shard_id=self.shard.shard_id, as_of=start - 1, since=since,
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


def tile_batches(start: int, upper: Frontier, parts: list[Part], empty: pa.Table,
                 shard_id: str) -> list[UpdateBatch]:
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
