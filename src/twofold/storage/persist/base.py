"""What the backend's command groups (`readers.ReaderCommands`, `gc.GarbageCollection`) need
from `PersistBackend`: its stores and its read-head / CAS-loop primitives."""

from __future__ import annotations

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
