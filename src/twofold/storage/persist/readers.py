"""Reader handles that hold a shard's `since` back (persist's leased and critical readers).

A `LeasedReader` registers under a lease and renews it from a heartbeat thread every quarter of
the lease; if its process dies, the heartbeats stop, the lease runs out and the next command on
the shard (by anyone) drops it, so a crashed reader never holds compaction back for long. A
`CriticalReader` (the controller's role) has no lease: it holds until it moves itself, and every
move names its opaque token, so a newer controller that took over (with a new token) fences the
old one out.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING

from twofold.protocol import Frontier
from twofold.storage.errors import StorageError

if TYPE_CHECKING:
    from twofold.storage.persist.backend import PersistBackend


class LeasedReader:
    """Holds `shard_id`'s since at (at least) `since` while this process keeps heartbeating."""

    def __init__(self, backend: PersistBackend, shard_id: str, since: Frontier, *,
                 lease_seconds: float = 60.0, reader_id: str | None = None) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"a lease must be positive, got {lease_seconds}")
        self.backend = backend
        self.shard_id = shard_id
        self.reader_id = reader_id or f"leased-{uuid.uuid4().hex[:12]}"
        self.lease_seconds = lease_seconds
        self.since = backend.register_reader(shard_id, self.reader_id, since=since,
                                             lease_seconds=lease_seconds)
        self.expired = False
        self.last_error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="twofold-reader-heartbeat",
                                        daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_seconds / 4):
            try:
                if self.backend.heartbeat_readers(self.shard_id, [self.reader_id]):
                    self.expired = True  # a stall outlived the lease: this hold is gone
                    return
            except StorageError as e:  # keep trying: the lease may still outlast the outage
                self.last_error = e

    def downgrade_since(self, frontier: Frontier) -> Frontier:
        """Release history before `frontier`; returns the shard's since after it."""
        if self.expired:
            raise StorageError(
                f"shard {self.shard_id!r}: reader {self.reader_id!r} expired (its lease ran out)"
            )
        result = self.backend.downgrade_reader(self.shard_id, self.reader_id, frontier)
        self.since = self.since.join(frontier)
        return result

    def close(self) -> None:
        """Stop heartbeating and release the hold (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=5)
        if not self.expired:
            self.backend.expire_reader(self.shard_id, self.reader_id)

    def __enter__(self) -> LeasedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CriticalReader:
    """A hold without a lease, fenced by an opaque token (the controller's)."""

    def __init__(self, backend: PersistBackend, shard_id: str, reader_id: str, token: str,
                 since: Frontier) -> None:
        self.backend = backend
        self.shard_id = shard_id
        self.reader_id = reader_id
        self.token = token
        self.since = backend.register_reader(shard_id, reader_id, since=since,
                                             lease_seconds=None, token=token)

    def compare_and_downgrade_since(self, expected_token: str, new_token: str,
                                    frontier: Frontier) -> Frontier:
        """Move the hold to `frontier` iff the stored token is `expected_token`, storing
        `new_token`; `StorageError` (nothing changed) if another holder took over."""
        result = self.backend.downgrade_reader(self.shard_id, self.reader_id, frontier,
                                               expected_token=expected_token,
                                               new_token=new_token)
        self.token = new_token
        self.since = self.since.join(frontier)
        return result
