"""Durable collections for sources and materialized views (`spec/storage.md`).

Shards are append-only logs of `(row, time, diff)` updates with a write frontier (`upper`) and a
compaction frontier (`since`), written by compare-and-append and read by `snapshot`/`listen`.
Tables are shards that users write, stamped by a `TimestampOracle` and kept moving by a
`Ticker`. Updates travel as Arrow update tables (`twofold.storage.updates`). Backends:
`sqlite:///path.db` (default, multi-process) and `memory://name` (in-process).
"""

from twofold.storage.backend import Backend, Notifier, Part, PartInfo, ShardState
from twofold.storage.errors import (
    BeyondUpper,
    CorruptStorage,
    InvalidName,
    InvalidStorageUrl,
    InvalidUpdates,
    NotReadable,
    SchemaMismatch,
    ShardExists,
    SinceViolation,
    StorageClosed,
    StorageError,
    TableExists,
    UnknownShard,
    UnknownTable,
    UpperMismatch,
)
from twofold.storage.listener import Listener
from twofold.storage.memory import drop_memory_store
from twofold.storage.oracle import TimestampOracle, wall_clock_ms
from twofold.storage.shard import Shard
from twofold.storage.storage import Storage, open_storage
from twofold.storage.table import Table, Ticker
from twofold.storage.updates import (
    DIFF,
    TIME,
    UpdateBatch,
    UpdatesLike,
    consolidate,
    rows_table,
    to_tuples,
    to_update_table,
    update_schema,
)

__all__ = [
    "DIFF", "TIME",
    "Backend", "BeyondUpper", "CorruptStorage", "InvalidName", "InvalidStorageUrl",
    "InvalidUpdates",
    "Listener", "NotReadable", "Notifier", "Part", "PartInfo", "SchemaMismatch", "Shard",
    "ShardExists", "ShardState", "SinceViolation", "Storage", "StorageClosed", "StorageError",
    "Table", "TableExists", "Ticker", "TimestampOracle", "UnknownShard", "UnknownTable",
    "UpdateBatch", "UpdatesLike", "UpperMismatch", "consolidate", "drop_memory_store",
    "open_storage", "rows_table", "to_tuples", "to_update_table", "update_schema",
    "wall_clock_ms",
]  # fmt: skip
