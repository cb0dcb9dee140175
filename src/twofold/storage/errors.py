"""Typed errors of `twofold.storage`.

Every failure a caller can cause or observe has its own class, all under `StorageError`, and every
message names the shard, table, column or frontier at fault. An error is raised before anything is
written: a rejected call leaves storage exactly as it was.
"""

from __future__ import annotations

from twofold.protocol import Frontier


class StorageError(Exception):
    """Base class of every error raised by `twofold.storage`."""


class InvalidStorageUrl(StorageError, ValueError):
    """The storage URL has an unknown scheme or a malformed location."""


class InvalidName(StorageError, ValueError):
    """A shard id or table name is empty or not a string."""


class StorageClosed(StorageError):
    """The storage handle was closed; open a new one with `open_storage`."""


class CorruptStorage(StorageError):
    """The backing file or a stored batch cannot be read as twofold storage."""


class UnknownShard(StorageError, LookupError):
    """No shard with this id exists."""

    def __init__(self, shard_id: str) -> None:
        super().__init__(f"unknown shard {shard_id!r}")
        self.shard_id = shard_id


class ShardExists(StorageError):
    """`create_shard` named an id that is already taken (with a different schema)."""


class UnknownTable(StorageError, LookupError):
    """No table with this name exists."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown table {name!r}")
        self.name = name


class TableExists(StorageError):
    """`create_table` named a table that already exists with a different schema."""


class SchemaMismatch(StorageError, TypeError):
    """Updates do not match the shard's `RelationDesc` (columns, types, or NULLs)."""


class InvalidUpdates(StorageError, ValueError):
    """Updates or bounds are malformed: a time outside `[lower, new_upper)`, a zero or NULL diff,
    or `new_upper` below `lower`."""


class UpperMismatch(StorageError):
    """`compare_and_append` was called with a `lower` that is not the shard's current upper.

    Nothing was written. `actual` is the upper the shard had, so a writer can decide whether to
    retry from there.
    """

    def __init__(self, shard_id: str, expected: Frontier, actual: Frontier) -> None:
        super().__init__(
            f"shard {shard_id!r}: compare_and_append expected upper {expected!r} "
            f"but the upper is {actual!r}; nothing was written"
        )
        self.shard_id = shard_id
        self.expected = expected
        self.actual = actual


class NotReadable(StorageError):
    """A read at `as_of` outside the shard's readable window `since <= as_of < upper`."""

    def __init__(self, message: str, *, shard_id: str, as_of: int, since: Frontier,
                 upper: Frontier) -> None:
        super().__init__(message)
        self.shard_id = shard_id
        self.as_of = as_of
        self.since = since
        self.upper = upper


class SinceViolation(NotReadable):
    """The read time is before the shard's `since`: history there is compacted away."""


class BeyondUpper(NotReadable):
    """The read time is not yet complete: the shard's `upper` has not passed it."""
