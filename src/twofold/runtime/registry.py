"""The publication registry: how the interactive runtime reads what maintenance maintains.

One registry per replica, shared by both runtimes' threads. For every index maintenance renders
it holds a **publication**: the arrangement's current immutable snapshot (batches plus `since` and
`upper`), replaced atomically each time maintenance advances it. Readers take the snapshot and
walk it with no lock held; publishing costs a dict store, never a copy.

Contracts (`spec/runtime.md`):

- **Readiness.** A read of an id that is not published yet is not an error and never sees an empty
  placeholder: `lookup` returns `None` and the reader waits. Every `publish` (new id or advanced
  upper) and every `close` calls the registered wakers with the id, so waiting readers are woken,
  never polled.
- **Dropped ids.** `close(id)` (maintenance dropped the collection) leaves a tombstone: `lookup`
  raises `PublicationClosed` naming the id, for readers already waiting and for later ones.
  `reset()` (maintenance saw `Hello`) forgets publications and tombstones: the controller is about
  to replay, and a replayed read must wait for the republish, not fail on an old tombstone.
- **Standing holds (I1c).** Per published id, the last compaction frontier the *interactive*
  runtime has applied from its own command stream. Seeded at the publication's `since` when the id
  is first published (the adoption floor — seeding at time 0 would pin a collection the controller
  never compacts again), raised only by interactive (`apply_standing_hold`, a join), removed by the
  empty frontier. Maintenance compacts a published arrangement to `compaction_target`: the meet of
  the controller's allowed frontier and the standing hold. A compaction that would pass a peek
  dataflow's `as_of` is queued on interactive's stream behind that dataflow's create, so the hold
  cannot rise past `as_of` before the dataflow has taken its own snapshot. Standing holds survive
  `reset()` on purpose: they are per collection, not per connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from twofold.protocol import Frontier, GlobalId


class Snapshot(Protocol):
    """What the registry needs of a published snapshot."""

    @property
    def since(self) -> Frontier: ...

    @property
    def upper(self) -> Frontier: ...


S = TypeVar("S", bound=Snapshot)
Waker = Callable[[GlobalId], None]


class PublicationClosed(LookupError):
    """The publication was dropped (or its dataflow failed); reads of it fail instead of
    hanging."""

    def __init__(self, id: GlobalId, reason: str | None = None) -> None:
        super().__init__(reason or f"collection {id} was dropped")
        self.id = id
        self.reason = reason


class PublicationRegistry(Generic[S]):
    """Publications by `GlobalId`; thread-safe. See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshots: dict[GlobalId, S] = {}
        self._closed: dict[GlobalId, str | None] = {}
        self._standing: dict[GlobalId, Frontier] = {}
        self._reader_wakers: list[Waker] = []
        self._hold_wakers: list[Waker] = []

    # -- wakeups ---------------------------------------------------------------------------

    def add_reader_waker(self, waker: Waker) -> None:
        """Call `waker(id)` (on the publisher's thread) whenever `id` is published, advanced,
        closed or reset: a reader waiting on it should look again."""
        with self._lock:
            self._reader_wakers.append(waker)

    def add_hold_waker(self, waker: Waker) -> None:
        """Call `waker(id)` (on the reader's thread) whenever `id`'s standing hold rises: the
        publisher may compact further."""
        with self._lock:
            self._hold_wakers.append(waker)

    def remove_waker(self, waker: Waker) -> None:
        with self._lock:
            for wakers in (self._reader_wakers, self._hold_wakers):
                if waker in wakers:
                    wakers.remove(waker)

    def _wake(self, id: GlobalId) -> None:
        for waker in list(self._reader_wakers):
            waker(id)

    def _wake_holders(self, id: GlobalId) -> None:
        for waker in list(self._hold_wakers):
            waker(id)

    # -- maintenance side --------------------------------------------------------------------

    def publish(self, id: GlobalId, snapshot: S) -> S:
        """Atomically replace `id`'s snapshot (creating the publication on first use); returns
        the snapshot published — `snapshot` itself here, a shared copy in a registry that
        publishes to another process."""
        with self._lock:
            self._closed.pop(id, None)
            if id not in self._snapshots and id not in self._standing:
                self._standing[id] = snapshot.since
            self._snapshots[id] = snapshot
        self._wake(id)
        return snapshot

    def close(self, id: GlobalId, reason: str | None = None) -> None:
        """`id` was dropped (or its dataflow failed, `reason` says how): readers get
        `PublicationClosed` from now on."""
        with self._lock:
            self._snapshots.pop(id, None)
            self._closed[id] = reason
        self._wake(id)

    def reset(self) -> None:
        """Forget every publication and tombstone (standing holds stay)."""
        with self._lock:
            ids = set(self._snapshots) | set(self._closed)
            self._snapshots.clear()
            self._closed.clear()
        for id in ids:
            self._wake(id)

    def compaction_target(self, id: GlobalId, allowed: Frontier) -> Frontier:
        """How far maintenance may compact `id`: meet of `allowed` and the standing hold."""
        with self._lock:
            hold = self._standing.get(id)
        return allowed if hold is None else allowed.meet(hold)

    # -- interactive side ---------------------------------------------------------------------

    def lookup(self, id: GlobalId) -> S | None:
        """The current snapshot; `None` if not (yet) published; raises if dropped."""
        with self._lock:
            snap = self._snapshots.get(id)
            if snap is None and id in self._closed:
                raise PublicationClosed(id, self._closed[id])
            return snap

    def lookup_held(self, id: GlobalId) -> tuple[S | None, Frontier | None]:
        """`(lookup(id), standing_hold(id))` read under one acquisition of the lock (the
        front's point lookups read both, once per lookup); raises as `lookup` does."""
        with self._lock:
            snap = self._snapshots.get(id)
            if snap is None and id in self._closed:
                raise PublicationClosed(id, self._closed[id])
            return snap, self._standing.get(id)

    def apply_standing_hold(self, id: GlobalId, frontier: Frontier) -> None:
        """Interactive applied `AllowCompaction(id, frontier)`: raise (never lower) the hold;
        the empty frontier removes it."""
        with self._lock:
            if frontier.is_empty:
                self._standing.pop(id, None)
            else:
                current = self._standing.get(id)
                self._standing[id] = frontier if current is None else current.join(frontier)
        # Maintenance may now compact further; let it re-evaluate (in another process, it
        # learns of the change, removal included, through this wakeup).
        self._wake_holders(id)

    def standing_hold(self, id: GlobalId) -> Frontier | None:
        with self._lock:
            return self._standing.get(id)

    def published_ids(self) -> list[GlobalId]:
        with self._lock:
            return sorted(self._snapshots)
