"""The compute controller: command history, collection frontiers and read holds, peeks,
subscribes and copy-tos, and the async `Controller` driving several replicas of one instance.

Decisions live in sans-IO state machines (`history`, `frontiers`, `holds`, `subscribes`,
`instance`, `backoff`); asyncio lives only in `replica` and `controller`.
"""

from twofold.controller.errors import (
    CollectionExists,
    ControllerClosed,
    ControllerError,
    CopyToFailed,
    HistoryError,
    PeekCancelled,
    PeekFailed,
    PeekTimeout,
    SinceViolation,
    SubscribeFailed,
    UnknownCollection,
)
from twofold.controller.history import CommandHistory

__all__ = [
    "CollectionExists",
    "CommandHistory",
    "ControllerClosed",
    "ControllerError",
    "CopyToFailed",
    "HistoryError",
    "PeekCancelled",
    "PeekFailed",
    "PeekTimeout",
    "SinceViolation",
    "SubscribeFailed",
    "UnknownCollection",
]
