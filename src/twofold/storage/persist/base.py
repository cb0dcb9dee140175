"""What the backend's command groups (`readers.ReaderCommands`, `gc.GarbageCollection`) need
from `PersistBackend`: its stores and its read-head / CAS-loop primitives."""

from __future__ import annotations

import itertools
import os
import struct
import time
from collections.abc import Callable
from typing import Final, Protocol

from twofold.storage.persist import state as S
from twofold.storage.persist.blob import BlobStore
from twofold.storage.persist.consensus import Consensus

HEADS: Final = (
    "SELECT w.shard, h.seqno, h.upper, h.data_seqno FROM unnest(%(shards)s::text[]) w(shard) "
    "CROSS JOIN LATERAL (SELECT seqno, upper, data_seqno FROM {s}.consensus c "
    "WHERE c.shard = w.shard ORDER BY seqno DESC LIMIT 1) h"
)
"""The head version of each of many shards, each by a backward index scan."""


class UniqueIds:
    """Idempotency tokens and inlined parts' keys, unique across processes without a system
    call each: a random 64-bit prefix, drawn again in a forked child (a child sharing its
    parent's prefix and counter could write a version with the parent's token, which a
    resolution after a lost connection would take for the parent's), and a counter."""

    _COUNT = struct.Struct(">Q")

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = os.urandom(8)
        self._hex = self._prefix.hex()
        self._count = itertools.count(1)

    def token(self) -> bytes:
        """16 bytes (stored as a uuid)."""
        return self._prefix + self._COUNT.pack(next(self._count))

    def key(self) -> str:
        return f"{self._hex}{next(self._count):x}"


UNIQUE: Final = UniqueIds()


def now_ms() -> int:
    """The wall clock in milliseconds (leases and heartbeats)."""
    return time.time_ns() // 1_000_000


class Core(Protocol):
    consensus: Consensus
    blobs: BlobStore
    schema: str
    keep_versions: int
    keep_seconds: float

    def _head(self, shard_id: str) -> S.Head: ...

    def _update(self, shard_id: str, command: Callable[[S.Head], S.StateData | None],
                what: str) -> S.Head: ...

    def shard_ids(self) -> list[str]: ...

    def truncate(self, shard_id: str) -> tuple[int, int]: ...

    def notify(self, shard_id: str) -> None: ...
