"""Typed errors raised by the controller.

Every error names the collection, peek or command at fault, and what the caller can do instead.
They all derive from `ControllerError`, so a user can catch the family at once.
"""

from __future__ import annotations

from uuid import UUID

from twofold.protocol import Frontier, GlobalId


class ControllerError(Exception):
    """Base class of every error the controller raises."""


class HistoryError(ControllerError):
    """A command would make the command history invalid (a second `Hello`, a `CreateDataflow`
    without an `as_of`)."""


class UnknownCollection(ControllerError, KeyError):
    """An operation named a collection the controller does not know (never created, or dropped)."""

    def __init__(self, id: GlobalId, what: str) -> None:
        super().__init__(f"{what}: unknown collection {id}")
        self.id = id

    def __str__(self) -> str:
        return str(self.args[0])


class CollectionExists(ControllerError):
    """A `CreateDataflow` exports an id that is already in use."""

    def __init__(self, id: GlobalId) -> None:
        super().__init__(f"collection {id} already exists; export ids must be unique")
        self.id = id


class SinceViolation(ControllerError):
    """A read or a dataflow asked for a time before the collection's `since` (it is compacted
    there), or the collection is no longer readable at all."""

    def __init__(self, id: GlobalId, time: int | None, since: Frontier) -> None:
        at = "any time" if time is None else f"time {time}"
        super().__init__(
            f"cannot read {id} at {at}: its since is {since!r}; read at or after the since"
        )
        self.id = id
        self.time = time
        self.since = since


class PeekFailed(ControllerError):
    """A replica answered a peek with an error."""

    def __init__(self, uuid: UUID, target: GlobalId, message: str) -> None:
        super().__init__(f"peek {uuid} on {target} failed: {message}")
        self.uuid = uuid
        self.target = target
        self.message = message


class PeekTimeout(ControllerError, TimeoutError):
    """No replica answered a peek within its timeout; the peek was cancelled."""

    def __init__(self, uuid: UUID, target: GlobalId, timeout: float) -> None:
        super().__init__(f"peek {uuid} on {target} got no answer within {timeout} s")
        self.uuid = uuid
        self.target = target
        self.timeout = timeout


class PeekCancelled(ControllerError):
    """The peek was cancelled (by the caller, or because the controller closed)."""

    def __init__(self, uuid: UUID, reason: str) -> None:
        super().__init__(f"peek {uuid} was cancelled: {reason}")
        self.uuid = uuid


class CollectionFailed(ControllerError):
    """The dataflow computing a collection failed the same way on consecutive replays (an
    engine error, not a data error): the controller dropped it, and every read of it — and of
    what is computed from it — fails with this error until it is created again."""

    def __init__(self, id: GlobalId, message: str) -> None:
        super().__init__(f"collection {id} failed: {message}")
        self.id = id
        self.message = message


class SubscribeFailed(ControllerError):
    """A subscribe ended with an error batch or was dropped before it completed."""

    def __init__(self, id: GlobalId, message: str) -> None:
        super().__init__(f"subscribe {id} failed: {message}")
        self.id = id
        self.message = message


class SubscribeBacklogExceeded(SubscribeFailed):
    """A subscription whose reader fell more than its bound (`Subscription.bound_backlog`)
    of updates behind: its queued batches are dropped and the subscribe with them, so a reader
    that stops reading costs bounded memory; it learns why at its next read."""

    def __init__(self, id: GlobalId, limit: int) -> None:
        super().__init__(id, f"the reader fell more than {limit:,} updates behind (a bounded "
                             "backlog); subscribe again to continue")
        self.limit = limit


class CopyToFailed(ControllerError):
    """A copy-to answered with an error or was dropped."""

    def __init__(self, id: GlobalId, message: str) -> None:
        super().__init__(f"copy-to {id} failed: {message}")
        self.id = id
        self.message = message


class ControllerClosed(ControllerError):
    """The controller was closed; nothing more can be asked of it."""


class InvalidDataflow(ControllerError, ValueError):
    """A `DataflowDescription` the controller refuses: an empty `as_of`, an import that does not
    exist or is not readable, a reused export id."""


class InvalidRead(ControllerError, ValueError):
    """A peek, subscribe or copy-to the controller cannot serve as asked (e.g. a storage peek
    without a timestamp, a subscribe dataflow without exactly one subscribe sink)."""


class ReplicaUnavailable(ControllerError, ConnectionError):
    """No replica can serve: none connected within the wait (`Controller.wait_connected`), one
    refused this controller's configuration (a wrong token, another storage or wire version),
    or every replica has been disconnected for longer than the controller's
    `unavailable_after`. `causes` maps each replica to its last connection error (`None`: it
    never answered), `names` to how the controller names it (e.g. its address);
    `configuration` is true when retrying cannot help."""

    def __init__(
        self,
        message: str,
        causes: dict[int, BaseException | None],
        *,
        names: dict[int, str] | None = None,
        configuration: bool = False,
    ) -> None:
        super().__init__(message)
        self.causes = causes
        self.names = {r: (names or {}).get(r, f"replica {r}") for r in causes}
        self.configuration = configuration
