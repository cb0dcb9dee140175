"""Listeners' leases: every `Shard.listen` on this backend holds the shard's since at the last
time it delivered, under a lease, from whichever process it runs in.

One `ListenerLeases` per backend handle (so per process) keeps the leases of all its listeners:
a listener registers a leased reader at its `as_of` when it starts (one compare-and-set), then
only moves its `Lease.since` in memory as it delivers; a single daemon thread renews every
lease every quarter of `lease_seconds` with one heartbeat compare-and-set per shard, carrying
each lease's since. If the process dies the heartbeats stop and the leases run out, so a dead
replica holds nobody's compaction back for longer than a lease. A listener that is closed (or
garbage-collected) releases its lease through the same thread. A lease found expired at a
heartbeat (the process stalled past it) is registered again at its since, which the shard's
since may already have passed: the listener then fails with `SinceViolation` on its next read,
never with a wrong answer.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING

from twofold.protocol import Frontier
from twofold.storage.errors import StorageError

if TYPE_CHECKING:
    from twofold.storage.persist.backend import PersistBackend

LEASE_SECONDS = 60.0


class Lease:
    """One listener's hold on `shard_id` (reader `reader_id`); see the module docstring."""

    __slots__ = ("_keeper", "reader_id", "shard_id", "since")

    def __init__(self, keeper: ListenerLeases, shard_id: str, reader_id: str,
                 since: Frontier) -> None:
        self._keeper = keeper
        self.shard_id = shard_id
        self.reader_id = reader_id
        self.since = since

    def advance(self, since: Frontier) -> None:
        """Everything before `since` may be compacted as far as this listener is concerned
        (sent with the next heartbeat)."""
        self.since = self.since.join(since)

    def release(self, *, wait: bool = False) -> None:
        """Give the hold up (idempotent): at once with `wait`, else from the keeper's thread
        (a finalizer must not block)."""
        self._keeper.release(self, wait=wait)


class ListenerLeases:
    """The leases of one backend handle's listeners and the thread that renews them."""

    def __init__(self, backend: PersistBackend, lease_seconds: float = LEASE_SECONDS) -> None:
        self.backend = backend
        self.lease_seconds = lease_seconds
        self._lock = threading.Lock()
        self._leases: dict[str, dict[str, Lease]] = {}
        self._released: list[Lease] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None

    def acquire(self, shard_id: str, as_of: Frontier) -> tuple[Lease, Frontier]:
        """Register a leased reader holding `shard_id` at `as_of`; returns the lease and the
        since it holds (later than `as_of` if the shard's since already passed it)."""
        reader_id = f"listener-{uuid.uuid4().hex[:16]}"
        held = self.backend.register_reader(shard_id, reader_id, since=as_of,
                                            lease_seconds=self.lease_seconds)
        lease = Lease(self, shard_id, reader_id, held)
        with self._lock:
            self._leases.setdefault(shard_id, {})[reader_id] = lease
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="twofold-listener-leases")
                self._thread.start()
        return lease, held

    def release(self, lease: Lease, *, wait: bool = False) -> None:
        with self._lock:
            held = self._leases.get(lease.shard_id, {})
            if held.pop(lease.reader_id, None) is None:
                return
            if not held:
                del self._leases[lease.shard_id]
            if not wait:
                self._released.append(lease)
        if not wait:
            self._wake.set()
            return
        try:
            self.backend.expire_reader(lease.shard_id, lease.reader_id)
        except StorageError as e:  # unreachable: the lease runs out instead
            self.last_error = e

    def held(self) -> dict[str, dict[str, Frontier]]:
        """Each shard's live leases of this handle and their sinces (what a heartbeat sends)."""
        with self._lock:
            return {s: {r: lease.since for r, lease in leases.items()}
                    for s, leases in self._leases.items()}

    def heartbeat(self) -> None:
        """Expire released leases, then renew every live one now (one compare-and-set per
        shard)."""
        self._expire_released()
        for shard_id, sinces in self.held().items():
            try:
                lost = self.backend.heartbeat_readers(shard_id, sinces)
                for reader_id in lost:  # stalled past the lease: hold again where it was
                    self.backend.register_reader(shard_id, reader_id, since=sinces[reader_id],
                                                 lease_seconds=self.lease_seconds)
            except StorageError as e:  # keep going: the lease may still outlast the outage
                self.last_error = e

    def _expire_released(self) -> None:
        with self._lock:
            released, self._released = self._released, []
        for n, lease in enumerate(released):
            try:
                self.backend.expire_reader(lease.shard_id, lease.reader_id)
            except StorageError as e:  # unreachable: the rest run out on their own
                self.last_error = e
                if self._stop.is_set():
                    return
                with self._lock:
                    self._released[:0] = released[n:]
                return

    def _run(self) -> None:
        interval = self.lease_seconds / 4
        next_beat = time.monotonic() + interval
        while not self._stop.is_set():
            self._wake.wait(max(0.0, next_beat - time.monotonic()))
            if self._stop.is_set():
                return
            self._wake.clear()
            if time.monotonic() >= next_beat:
                self.heartbeat()
                next_beat = time.monotonic() + interval
            else:  # a release: expire it now, renew on schedule
                self._expire_released()

    def close(self) -> None:
        """Stop renewing; give up every lease this handle holds (best effort: if the database
        is unreachable they run out instead)."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            thread, self._thread = self._thread, None
            self._released += [lease for held in self._leases.values() for lease in held.values()]
            self._leases.clear()
        if thread is not None:
            thread.join(timeout=5)
        self._expire_released()
