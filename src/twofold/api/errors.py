"""Typed errors of the user-facing API.

Contract: every mistake a user can make through `twofold.api` raises a subclass of `TwofoldError`
*where the mistake is made* (when a relation is built, a row is written, a read is asked for),
and its message names the column, relation or operation at fault and what to do instead.
Errors coming from lower layers (controller, storage) are translated at the API boundary, with
the original kept as `__cause__`, so users catch one family.
"""

from __future__ import annotations


class TwofoldError(Exception):
    """Base class of every error raised by the twofold API."""


class ColumnNotFound(TwofoldError, KeyError):
    """An expression or operation named a column the relation does not have."""

    def __init__(self, column: str, operation: str, available: list[str]) -> None:
        super().__init__(
            f"{operation}: no column {column!r}; the relation has columns {available}"
        )
        self.column = column
        self.operation = operation
        self.available = available

    def __str__(self) -> str:
        return str(self.args[0])


class DuplicateColumn(TwofoldError, ValueError):
    """An operation would produce two columns with one name."""

    def __init__(self, column: str, operation: str, detail: str | None = None) -> None:
        what = detail or f"column {column!r} would appear twice"
        super().__init__(f"{operation}: {what}; rename one with .alias()")
        self.column = column
        self.operation = operation


class TypeMismatch(TwofoldError, TypeError):
    """An operation got a value or column of a type it cannot use."""

    def __init__(self, operation: str, message: str, column: str | None = None) -> None:
        where = f"{operation} on column {column!r}" if column else operation
        super().__init__(f"{where}: {message}")
        self.operation = operation
        self.column = column


class InvalidSchema(TwofoldError, ValueError):
    """A table schema that cannot be used (unknown type, empty, bad nullable list)."""


class InvalidRows(TwofoldError, ValueError):
    """Rows written to a table do not fit its schema; nothing was written."""


class UniqueViolation(TwofoldError, ValueError):
    """A write would leave two rows with one primary key; nothing was written (SQLSTATE 23505)."""

    def __init__(self, operation: str, table: str, columns: tuple[str, ...],
                 key: tuple[object, ...], reason: str) -> None:
        cols = ", ".join(columns)
        vals = ", ".join(map(repr, key))
        super().__init__(f"{operation} into table {table!r}: primary key ({cols}) = ({vals}) "
                         f"{reason}; nothing was written")
        self.operation = operation
        self.table = table
        self.columns = columns
        self.key = key


class InvalidArgument(TwofoldError, ValueError):
    """An API call got an argument it cannot use (a bad key, limit, format or name)."""


class UnknownObject(TwofoldError, KeyError):
    """A table, index or view name that this database does not know."""

    def __init__(self, name: str, kind: str, known: list[str]) -> None:
        super().__init__(f"no {kind} named {name!r}; known: {known}")
        self.name = name

    def __str__(self) -> str:
        return str(self.args[0])


class ObjectExists(TwofoldError, ValueError):
    """A create call named an object that already exists."""


class DependencyError(TwofoldError):
    """A drop would leave other objects reading a dropped one; drop those first. `name` is
    the object others read, `dependents` those that read it (directly or not)."""

    def __init__(self, message: str, name: str | None = None,
                 dependents: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.name = name
        self.dependents = dependents


class CatalogConflict(TwofoldError):
    """Other processes kept changing the catalog while this change was tried; nothing was
    changed. Retry it."""


class ReadBeforeSince(TwofoldError, ValueError):
    """A read asked for a time before the relation's `since`: that history is compacted."""

    def __init__(self, name: str, time: int, since: int | None) -> None:
        since_s = "nothing (it is dropped)" if since is None else f"time {since}"
        super().__init__(
            f"cannot read {name} at time {time}: it is readable from {since_s} on; "
            "read at or after the since, or keep more history (retain_history=)"
        )
        self.name = name
        self.time = time
        self.since = since


class QueryFailed(TwofoldError):
    """The replica could not compute the answer (e.g. a division by zero in the data).
    `primary` is the evaluation error's own message (`division by zero`, PostgreSQL's), which
    the message puts after what was read; the pgwire server sends that alone, as PostgreSQL
    does."""

    def __init__(self, message: str, primary: str | None = None) -> None:
        super().__init__(message)
        self.primary = primary


class QueryTimeout(TwofoldError, TimeoutError):
    """No answer arrived within the timeout; the read was cancelled."""


class SubscribeEnded(TwofoldError):
    """A subscribe ended with an error or was dropped before it completed."""


class SubscribeBacklogFull(SubscribeEnded):
    """A subscribe whose reader fell further behind than its bound
    (`AsyncSubscription.bound_backlog`; `twofold serve` bounds every SUBSCRIBE): it ended, its
    queued batches dropped. SQLSTATE 53400 (configuration_limit_exceeded)."""

    sqlstate = "53400"


class ObjectFailed(QueryFailed, SubscribeEnded):
    """The dataflow maintaining an object (an index, a view) — or one it is computed from —
    raised an engine error, and raised it again after the replica was restarted and the
    dataflow replayed: it was given up and dropped at the replica. Every read and subscribe of
    it fails with this at once (the message names the object and the engine's error) until it
    is dropped and created again; everything else keeps serving."""


class DatabaseClosed(TwofoldError):
    """The database was closed (or not opened); nothing more can be asked of it."""


class ConnectError(TwofoldError, ConnectionError):
    """Could not set up the database: storage or replicas could not be reached or opened."""


class ConnectionFailed(ConnectError):
    """A replica could not be reached (refused, unknown host, no answer, a TLS mismatch), or
    every replica has been unreachable for the database's `connect_timeout` while a read waited.
    The message names the address and the cause; `addresses` lists the replicas at fault."""

    def __init__(self, message: str, addresses: list[str] | None = None) -> None:
        super().__init__(message)
        self.addresses = list(addresses or [])


class AuthenticationFailed(ConnectionFailed):
    """A replica refused this client's token (a wrong one, or none where one is required)."""


class StorageMismatch(ConnectionFailed):
    """A replica serves another storage than the one this database opened."""
