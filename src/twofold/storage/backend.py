"""The backend interface: what a shard needs from a consensus store plus a blob store.

A backend keeps, per shard, its `RelationDesc`, its `upper` and `since`, and an ordered run of
*parts* — stored update tables whose time ranges `[lower, upper)` are disjoint and increasing.
Every method is atomic: a concurrent reader sees the state before or after it, never between.
The three writes are conditional, which is what serialises many writers without a lock service:

- `compare_and_append` succeeds only if the stored upper equals `lower` (exactly one racer wins);
- `downgrade_since` only ever moves `since` forward (taking the join with the stored value);
- `replace_parts` (compaction) succeeds only if every part it replaces is still there.

`memory://`, `sqlite:///` and `postgres://` (PostgreSQL consensus plus an object store,
`twofold.storage.persist`) implement it. Nothing above `Shard` may assume which backend it runs
on. Backends also own a `Notifier`, so listeners wake promptly when a writer in the same process
appends; cross-process writers are noticed by polling (SQLite) or by LISTEN/NOTIFY (PostgreSQL).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from twofold.protocol import Frontier, RelationDesc


@dataclass(frozen=True, slots=True)
class Part:
    """One stored batch of a shard: its updates' times lie in `[lower, upper)`.

    `since` is the time its updates were advanced to by compaction (0 if never compacted): an
    update originally at `t < since` is stored at `since`.
    """

    part_id: int
    lower: int
    upper: Frontier
    since: int
    count: int
    updates: pa.Table


@dataclass(frozen=True, slots=True)
class PartInfo:
    """The metadata of a part, without its updates (what compaction planning looks at)."""

    part_id: int
    lower: int
    upper: Frontier
    since: int
    count: int


@dataclass(frozen=True, slots=True)
class ShardState:
    """A consistent view of a shard's frontiers."""

    upper: Frontier
    since: Frontier


class Backend(Protocol):
    """Durable shard state. All methods are thread-safe; see the module docstring."""

    notifier: Notifier

    def create_shard(self, shard_id: str, desc: RelationDesc) -> bool:
        """Create the shard; `False` if it exists (with any schema) and nothing changed."""
        ...

    def describe(self, shard_id: str) -> RelationDesc:
        """The shard's schema; `UnknownShard` if absent."""
        ...

    def shard_ids(self) -> list[str]:
        ...

    def state(self, shard_id: str) -> ShardState:
        ...

    def compare_and_append(
        self, shard_id: str, lower: Frontier, new_upper: Frontier, updates: pa.Table | None
    ) -> Frontier | None:
        """If the upper is `lower`: store `updates` (if any) as one part, set the upper to
        `new_upper`, return `None`. Otherwise change nothing and return the actual upper."""
        ...

    def advance_uppers(self, shard_ids: list[str], upper: Frontier) -> None:
        """Raise the upper of each shard below `upper` to `upper` (an empty append), all in one
        round trip or transaction: how the ticker keeps many idle tables moving."""
        ...

    def downgrade_since(self, shard_id: str, since: Frontier) -> Frontier:
        """Set since to the join of `since` and the stored since; return the result."""
        ...

    def read_parts(
        self, shard_id: str, *, overlapping_from: int | None, up_to: int | None
    ) -> tuple[ShardState, list[Part]]:
        """A consistent view of the frontiers and the parts, in time order, that may hold times
        `>= overlapping_from` (parts whose upper is beyond it) and `<= up_to` (lower `<= up_to`);
        `None` leaves that side open."""
        ...

    def part_infos(self, shard_id: str) -> tuple[ShardState, list[PartInfo]]:
        ...

    def load_parts(self, shard_id: str, part_ids: list[int]) -> list[Part] | None:
        """The given parts in time order, or `None` if any of them is gone."""
        ...

    def replace_parts(self, shard_id: str, old: list[int], new: Part) -> bool:
        """Atomically replace the parts `old` (adjacent in time) by `new` (its `part_id` is
        ignored); `False`, changing nothing, if any of `old` is gone."""
        ...

    def close(self) -> None:
        ...


class ListenerLease(Protocol):
    """A listener's hold on its shard's since, in backends whose readers hold leases
    (`postgres://`): `advance` as it delivers, `release` when done."""

    def advance(self, since: Frontier) -> None: ...

    def release(self, *, wait: bool = False) -> None: ...


class LeasingBackend(Protocol):
    """A backend whose listeners hold leases: `lease_listener(shard_id, as_of)` registers one
    at `as_of` and returns it with the since it holds (past `as_of` if compaction got there
    first). Memory and SQLite shards are not compacted behind their listeners' backs (nothing
    but an explicit `downgrade_since` moves their since), so they have none."""

    def lease_listener(self, shard_id: str, as_of: int) -> tuple[ListenerLease, Frontier]: ...


class Notifier:
    """Wakes waiters when a shard changes in this process. Thread-safe.

    A waiter registers a callback for a shard; `notify` calls every callback of that shard from
    the notifying thread, so callbacks must be cheap and must not block (set an event, or
    `call_soon_threadsafe` onto a loop).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[str, set[Callable[[], None]]] = {}
        self._every: tuple[Callable[[], None], ...] = ()  # called for every shard's change

    def subscribe_all(self, callback: Callable[[], None]) -> None:
        """Call `callback` when any shard changes (the front waking a maintenance process)."""
        with self._lock:
            self._every = (*self._every, callback)

    def unsubscribe_all(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._every = tuple(c for c in self._every if c is not callback)

    def subscribe(self, shard_id: str, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.setdefault(shard_id, set()).add(callback)

    def unsubscribe(self, shard_id: str, callback: Callable[[], None]) -> None:
        with self._lock:
            callbacks = self._callbacks.get(shard_id)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del self._callbacks[shard_id]

    def notify(self, shard_id: str) -> None:
        with self._lock:
            callbacks = [*self._callbacks.get(shard_id, ()), *self._every]
        for callback in callbacks:
            callback()
