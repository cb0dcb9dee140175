"""Change notification for the PostgreSQL persist backend, over the consensus schema's channel.

`consensus.py` decides *when* a landed version is announced (only if its state holds a leased
reader, never inside the compare-and-set); this module does the announcing and the listening:

- `NotifySender` sends the `NOTIFY`s from a daemon thread with its own connection, batching the
  shards of versions that land while it sends into one statement;
- `NotifyThread` `LISTEN`s on the channel and reports each changed shard, and every reconnect
  (changes may have been missed while the connection was down);
- `ListeningNotifier` is the in-process `Notifier` plus a `NotifyThread` (started on the first
  subscription), so listeners wake for changes made by other processes too.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg

from twofold.storage.backend import Notifier

if TYPE_CHECKING:
    from twofold.storage.persist.consensus import Consensus


class NotifySender:
    """Sends the `NOTIFY`s of landed versions from a daemon thread of its own (with its own
    connection), all shards pending at once in one statement."""

    def __init__(self, consensus: Consensus) -> None:
        self._consensus = consensus
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def send(self, shard: str) -> None:
        with self._lock:
            if self._stopped:
                return
            self._pending.add(shard)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="twofold-pg-notify",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    def _flush(self) -> None:
        with self._lock:
            shards, self._pending = sorted(self._pending), set()
        self._consensus.notify(shards)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            self._flush()
            with self._lock:
                if self._stopped and not self._pending:
                    return

    def stop(self) -> None:
        """Send what is pending, then stop (idempotent)."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=5)


class NotifyThread:
    """LISTENs on the consensus channel and calls `on_notify(shard)` for each change, and
    `on_reconnect()` after a lost connection (changes may have been missed). Daemon thread."""

    def __init__(self, consensus: Consensus, on_notify: Callable[[str], None],
                 on_reconnect: Callable[[], None]) -> None:
        self._consensus = consensus
        self._on_notify = on_notify
        self._on_reconnect = on_reconnect
        self._stop = threading.Event()
        self.listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="twofold-pg-listen", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        first = True
        while not self._stop.is_set():
            try:
                conn = psycopg.connect(self._consensus.conninfo, autocommit=True,
                                       connect_timeout=10)
            except psycopg.Error:
                self._stop.wait(0.5)
                continue
            try:
                conn.execute(f'LISTEN "{self._consensus.channel}"')
                self.listening.set()
                if not first:
                    self._on_reconnect()
                first = False
                while not self._stop.is_set():
                    for n in conn.notifies(timeout=0.5):
                        self._on_notify(n.payload)
            except psycopg.Error:
                if not self._stop.is_set():
                    self._on_reconnect()
            finally:
                with contextlib.suppress(Exception):
                    conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class ListeningNotifier(Notifier):
    """The in-process `Notifier`, plus a LISTEN thread (started on the first subscription)
    that relays changes made by other processes."""

    def __init__(self, consensus: Consensus) -> None:
        super().__init__()
        self._consensus = consensus
        self._thread: NotifyThread | None = None
        self._start_lock = threading.Lock()

    def subscribe(self, shard_id: str, callback: Callable[[], None]) -> None:
        super().subscribe(shard_id, callback)
        with self._start_lock:
            if self._thread is None:
                self._thread = NotifyThread(self._consensus, self._relay,
                                            self._wake_all)
                # Until LISTEN is in place a change would only be seen by the safety-net poll.
                self._thread.listening.wait(timeout=5)

    def _relay(self, shard_id: str) -> None:
        self.notify(shard_id)

    def _wake_all(self) -> None:
        with self._lock:
            shard_ids = list(self._callbacks)
        for shard_id in shard_ids:
            self.notify(shard_id)

    def stop(self) -> None:
        with self._start_lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.stop()
