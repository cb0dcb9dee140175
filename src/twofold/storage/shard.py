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

import pyarrow as pa

from twofold.protocol import MAX_TIME, Frontier, RelationDesc
from twofold.storage.backend import Backend, Part
from twofold.storage.compaction import plan_compaction
from twofold.storage.errors import (
    BeyondUpper,
    InvalidUpdates,
    SinceViolation,
    UpperMismatch,
)
from twofold.storage.listener import Listener
from twofold.storage.updates import (
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
