"""Errors of the network transport.

Every failure of a connection surfaces as a `TransportError` subclass that says which stage
failed (connecting, the twofold handshake, or an established connection), so a caller can tell
"retry with backoff" (`ConnectFailed`, `ConnectionLost`) from "fix the configuration"
(`AuthenticationFailed`, `VersionMismatch`, `StorageMismatch`). `TransportError` is a
`ConnectionError`, so code that already treats `OSError`s as "the replica is unreachable" keeps
working.

Malformed bytes from the peer are not transport errors: they raise the protocol's own
`twofold.protocol.DecodeError` (and `FrameTooLarge`, one of its subclasses), as `spec/protocol.md`
§6 requires.
"""

from __future__ import annotations


class TransportError(ConnectionError):
    """A network connection to or from a replica failed."""


class ConnectFailed(TransportError):
    """The TCP connection (or its TLS handshake) could not be established."""


class TlsFailed(ConnectFailed):
    """The TLS handshake failed: an untrusted certificate, or a peer that does not speak TLS
    (a plaintext replica answers a TLS client by closing the connection)."""


class ConnectTimeout(ConnectFailed, TimeoutError):
    """Connecting and completing the handshake took longer than the allowed timeout."""


class HandshakeFailed(TransportError):
    """The peer did not complete the twofold handshake (closed, or answered garbage)."""


class AuthenticationFailed(HandshakeFailed):
    """The replica refused the token (a wrong token, or none where one is required)."""


class StorageMismatch(HandshakeFailed):
    """The replica serves another storage than the one the controller uses."""


class VersionMismatch(HandshakeFailed):
    """The two sides speak different versions of the twofold wire protocol."""


class ConnectionLost(TransportError):
    """An established connection broke: reset by the peer, or ended in the middle of a frame."""


class ConnectionClosed(TransportError):
    """The connection was used after this side closed it."""


class MessageTooLarge(ValueError):
    """A message to send is larger than the frame limit; nothing was sent and the connection
    is still usable."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} of {size} bytes exceeds the frame limit of {limit} bytes")
        self.size = size
        self.limit = limit


class EndpointEnded(RuntimeError):
    """The replica's compute endpoint ended on its own (its `recv` returned `None`), so the
    server serving it ended too (shared fate, `spec/runtime.md`)."""
