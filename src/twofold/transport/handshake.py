"""The connection handshake, sans-IO: the bytes of both hello frames and the decisions on them.

Before any command is read, the client's first frame is a **client hello** and the server's
first frame a **server hello**, both ordinary length-prefixed frames (`spec/protocol.md` §6):

```
client hello:  MAGIC (8 bytes) | version (u16, big-endian) | token (the rest, UTF-8; empty = none)
server hello:  MAGIC (8 bytes) | version (u16, big-endian) | status (u8) | reason (the rest, UTF-8)
```

The handshake runs even without a token, so a peer that is not twofold, or speaks another wire
version, is refused by name instead of failing later on an undecodable command. After an `OK` the
connection carries commands and responses; after any other status the server closes it.

Invariant: a token is accepted iff it equals the configured one, and the comparison takes the
same time wherever the two differ (`hmac.compare_digest` over SHA-256 digests, so not even the
token's length leaks). Nothing here does I/O; `server.py` and `client.py` move the bytes.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Final

from twofold.transport.errors import (
    AuthenticationFailed,
    HandshakeFailed,
    TransportError,
    VersionMismatch,
)

MAGIC: Final = b"TWOFOLD\x00"
PROTOCOL_VERSION: Final = 1
HANDSHAKE_MAX_FRAME: Final = 64 * 1024
"""Limit on a hello frame: an unauthenticated peer never makes us allocate more than this."""

_HEAD: Final = struct.Struct(">8sH")
_STATUS: Final = struct.Struct(">B")


class HelloStatus(enum.IntEnum):
    """The server's verdict on a client hello."""

    OK = 0
    AUTHENTICATION_FAILED = 1
    VERSION_MISMATCH = 2
    MALFORMED = 3


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decision on a hello: `status`, and for a refusal a `reason` fit for a log line."""

    status: HelloStatus
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status is HelloStatus.OK


def token_bytes(token: str | bytes | None) -> bytes:
    """The wire form of a token; `None` is the empty token. An empty configured token is a
    mistake (it would authenticate nobody or everybody), so it is refused."""
    if token is None:
        return b""
    data = token.encode("utf-8") if isinstance(token, str) else bytes(token)
    if not data:
        raise ValueError("an empty token is not a token: pass None for no authentication")
    return data


def client_hello(token: str | bytes | None, version: int = PROTOCOL_VERSION) -> bytes:
    """The payload of the client's first frame."""
    return _HEAD.pack(MAGIC, version) + token_bytes(token)


def server_hello(verdict: Verdict, version: int = PROTOCOL_VERSION) -> bytes:
    """The payload of the server's answer to a client hello."""
    return _HEAD.pack(MAGIC, version) + _STATUS.pack(verdict.status) + verdict.reason.encode()


class Authenticator:
    """The server's side of the handshake: judges one client hello against the configured token.

    With no token configured any token is accepted (there is nothing to check); the version and
    magic are always checked.
    """

    __slots__ = ("_digest",)

    def __init__(self, token: str | bytes | None) -> None:
        expected = token_bytes(token)
        self._digest = hashlib.sha256(expected).digest() if expected else None

    @property
    def requires_token(self) -> bool:
        return self._digest is not None

    def judge(self, payload: bytes) -> Verdict:
        if len(payload) < _HEAD.size or payload[: len(MAGIC)] != MAGIC:
            return Verdict(HelloStatus.MALFORMED, "not a twofold client hello (bad magic)")
        _, version = _HEAD.unpack_from(payload)
        if version != PROTOCOL_VERSION:
            return Verdict(
                HelloStatus.VERSION_MISMATCH,
                f"client speaks wire version {version}, this replica speaks {PROTOCOL_VERSION}",
            )
        if self._digest is None:
            return Verdict(HelloStatus.OK)
        token = payload[_HEAD.size :]
        if not token:
            return Verdict(HelloStatus.AUTHENTICATION_FAILED, "a token is required, none was sent")
        if not hmac.compare_digest(hashlib.sha256(token).digest(), self._digest):
            return Verdict(HelloStatus.AUTHENTICATION_FAILED, "wrong token")
        return Verdict(HelloStatus.OK)


def parse_server_hello(payload: bytes) -> Verdict:
    """The client's reading of the server's answer; raises `HandshakeFailed` if it is not one."""
    if len(payload) < _HEAD.size + _STATUS.size or payload[: len(MAGIC)] != MAGIC:
        raise HandshakeFailed("the server's answer is not a twofold server hello")
    _, version = _HEAD.unpack_from(payload)
    (code,) = _STATUS.unpack_from(payload, _HEAD.size)
    reason = payload[_HEAD.size + _STATUS.size :].decode("utf-8", "replace")
    try:
        status = HelloStatus(code)
    except ValueError:
        raise HandshakeFailed(f"the server answered unknown status {code}: {reason}") from None
    if status is HelloStatus.OK and version != PROTOCOL_VERSION:
        # A server must refuse a version it does not speak; accepting one is a broken server.
        raise VersionMismatch(
            f"server accepted wire version {PROTOCOL_VERSION} but speaks {version}"
        )
    return Verdict(status, reason)


def raise_for(verdict: Verdict) -> None:
    """Raise the client-side error for a refusal; return for `OK`."""
    errors: dict[HelloStatus, type[TransportError]] = {
        HelloStatus.AUTHENTICATION_FAILED: AuthenticationFailed,
        HelloStatus.VERSION_MISMATCH: VersionMismatch,
        HelloStatus.MALFORMED: HandshakeFailed,
    }
    if verdict.ok:
        return
    raise errors[verdict.status](f"the replica refused the connection: {verdict.reason}")
