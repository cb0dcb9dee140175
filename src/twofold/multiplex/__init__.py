"""The two-runtime multiplexer (`spec/multiplexer.md`).

A replica runs a maintenance and an interactive runtime but speaks one compute protocol.
`Multiplexer` fans the controller's command stream out to both and merges their responses, so
neither the controller nor the protocol learns that the replica is split. The decisions live in
the pure `Router` (routing table, response filter, violation detection); `Multiplexer` is the
thin asyncio layer that moves messages around it.
"""

from twofold.multiplex.multiplexer import BUFFER_LIMIT, Multiplexer, SupportsRecvNowait
from twofold.multiplex.routing import (
    Collection,
    Delivery,
    ProtocolViolation,
    Router,
    Routing,
    Runtime,
    Violation,
    ViolationKind,
)

__all__ = [
    "BUFFER_LIMIT",
    "Collection",
    "Delivery",
    "Multiplexer",
    "ProtocolViolation",
    "Router",
    "Routing",
    "Runtime",
    "SupportsRecvNowait",
    "Violation",
    "ViolationKind",
]
