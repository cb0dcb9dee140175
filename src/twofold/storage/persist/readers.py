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

import msgspec

from twofold.protocol import Frontier
from twofold.storage.errors import StorageError
from twofold.storage.persist import state as S
from twofold.storage.persist.base import Core, now_ms

if TYPE_CHECKING:
    from twofold.storage.persist.backend import PersistBackend


class ReaderFenced(StorageError):
    """A critical reader's move named a token that is no longer the stored one: another
    holder (a newer controller) took the hold over. Nothing changed."""


class ReaderCommands:
    """The reader commands of `PersistBackend` (a mixin over `base.Core`): each one CAS."""

    def register_reader(self: Core, shard_id: str, reader_id: str, *, since: Frontier,
                        lease_seconds: float | None, token: str = "") -> Frontier:
        """Register (or renew) a reader holding since at `since` (or the shard's since, if
        later); `lease_seconds=None` makes it a critical reader. Returns its since."""
        def command(head: S.Head) -> S.StateData:
            held = since.join(S.dec(head.data.since))
            reader = S.ReaderState(S.enc(held), head.seqno, lease_seconds is None,
                                   int((lease_seconds or 0) * 1000), now_ms(), token)
            return S.with_reader(head.data, reader_id, reader, now_ms())

        head = self._update(shard_id, command, "registering a reader")
        reader = head.data.readers.get(reader_id)
        if reader is None:
            raise StorageError(f"shard {shard_id!r}: reader {reader_id!r} expired at once")
        return S.dec(reader.since)

    def reader(self: Core, shard_id: str, reader_id: str) -> S.ReaderState | None:
        return S.live_readers(self._head(shard_id).data, now_ms()).get(reader_id)

    def heartbeat_readers(self: Core, shard_id: str,
                          readers: list[str] | dict[str, Frontier]) -> list[str]:
        """Renew the leases of `readers` (one CAS), moving each one's since forward to the
        frontier given for it (a dict); return those that had already expired."""
        sinces = (readers if isinstance(readers, dict)
                  else dict.fromkeys(readers, Frontier.minimum()))
        encoded = {rid: S.enc(f) for rid, f in sinces.items()}
        lost: list[str] = []

        def command(head: S.Head) -> S.StateData:
            data, gone = S.renew_readers(head.data, encoded, head.seqno, now_ms())
            lost[:] = gone
            return data

        self._update(shard_id, command, "heartbeat")
        return lost

    def downgrade_reader(self: Core, shard_id: str, reader_id: str, since: Frontier,
                         *, expected_token: str | None = None, new_token: str | None = None
                         ) -> Frontier:
        """Move one reader's since forward; the shard's since follows the meet of its readers.
        A critical reader passes its opaque token (`expected_token`): a mismatch (another
        controller took over) raises `StorageError` and changes nothing."""
        def command(head: S.Head) -> S.StateData:
            live = S.live_readers(head.data, now_ms())
            reader = live.get(reader_id)
            if reader is None:
                raise StorageError(f"shard {shard_id!r}: no live reader {reader_id!r}")
            if expected_token is not None and reader.token != expected_token:
                raise ReaderFenced(
                    f"shard {shard_id!r}: reader {reader_id!r} is fenced: token "
                    f"{reader.token!r}, not {expected_token!r}"
                )
            held = S.dec(reader.since).join(since)
            updated = msgspec.structs.replace(
                reader, since=S.enc(held), heartbeat_ms=now_ms(), seqno=head.seqno,
                token=reader.token if new_token is None else new_token)
            return S.with_reader(head.data, reader_id, updated, now_ms())

        head = self._update(shard_id, command, "downgrading a reader")
        self.notify(shard_id)
        return S.dec(head.data.since)

    def expire_reader(self: Core, shard_id: str, reader_id: str) -> None:
        self._update(shard_id, lambda h: S.with_reader(h.data, reader_id, None, now_ms()),
                     "expiring a reader")


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
