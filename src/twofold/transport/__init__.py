"""Network transport: the compute protocol over TCP (optionally TLS), with a token handshake.

`connect(host, port, token=None, ssl=None)` gives the controller a `ReplicaConnection` (a
`twofold.client.ComputeClient`); `ReplicaServer(target, ...)` serves a replica's compute endpoint
to one controller connection at a time. Frames follow `spec/protocol.md` §6; every connection
starts with the handshake of `twofold.transport.handshake`. Errors are `TransportError`s, except
malformed bytes, which raise the protocol's `DecodeError`.
"""

from twofold.transport.client import (
    DEFAULT_BUFFER_LIMIT,
    DEFAULT_TIMEOUT,
    ReplicaConnection,
    connect,
)
from twofold.transport.errors import (
    AuthenticationFailed,
    ConnectFailed,
    ConnectionClosed,
    ConnectionLost,
    ConnectTimeout,
    EndpointEnded,
    HandshakeFailed,
    MessageTooLarge,
    StorageMismatch,
    TlsFailed,
    TransportError,
    VersionMismatch,
)
from twofold.transport.handshake import PROTOCOL_VERSION
from twofold.transport.server import DEFAULT_HANDSHAKE_TIMEOUT, ReplicaServer

__all__ = [
    "DEFAULT_BUFFER_LIMIT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "PROTOCOL_VERSION",
    "AuthenticationFailed",
    "ConnectFailed",
    "ConnectTimeout",
    "ConnectionClosed",
    "ConnectionLost",
    "EndpointEnded",
    "HandshakeFailed",
    "MessageTooLarge",
    "ReplicaConnection",
    "ReplicaServer",
    "StorageMismatch",
    "TlsFailed",
    "TransportError",
    "VersionMismatch",
    "connect",
]
