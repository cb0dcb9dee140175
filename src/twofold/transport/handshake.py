"""The connection handshake, sans-IO: the bytes of both hello frames and the decisions on them.

Before any command is read, the client's first frame is a **client hello** and the server's
first frame a **server hello**, both ordinary length-prefixed frames (`spec/protocol.md` §6):

```
client hello:  MAGIC (8 bytes) | version (u16, big-endian) | token length (u16) | token (UTF-8;
               empty = none) | storage id (the rest, UTF-8; empty = not checked)
server hello:  MAGIC (8 bytes) | version (u16, big-endian) | status (u8) | reason (the rest, UTF-8)
```

The handshake runs even without a token, so a peer that is not twofold, or speaks another wire
version, is refused by name instead of failing later on an undecodable command. After an `OK` the
connection carries commands and responses; after any other status the server closes it, and the
reason tells the client why (a wrong or missing token, another wire version, another storage).

The **storage id** is the identity of the storage the controller uses (`twofold.storage.identity`,
an id stored in the storage itself, so two URLs naming one file agree). A replica that knows
its own storage's id refuses a controller naming another one (`STORAGE_MISMATCH`), so the two
never silently work on different data. Either side may leave it empty: nothing is checked.

Invariant: a token is accepted iff it equals the configured one, and the comparison takes the
same time wherever the two differ (`hmac.compare_digest` over SHA-256 digests, so not even the
token's length leaks); the storage is judged only after the token, so an unauthenticated peer
learns nothing about it. Nothing here does I/O; `server.py` and `client.py` move the bytes.
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
    StorageMismatch,
    TransportError,
    VersionMismatch,
)

MAGIC: Final = b"TWOFOLD\x00"
PROTOCOL_VERSION: Final = 2
HANDSHAKE_MAX_FRAME: Final = 64 * 1024
"""Limit on a hello frame: an unauthenticated peer never makes us allocate more than this."""

_HEAD: Final = struct.Struct(">8sH")
_STATUS: Final = struct.Struct(">B")
_LENGTH: Final = struct.Struct(">H")
MAX_TOKEN: Final = 0xFFFF


class HelloStatus(enum.IntEnum):
    """The server's verdict on a client hello."""

    OK = 0
    AUTHENTICATION_FAILED = 1
    VERSION_MISMATCH = 2
    MALFORMED = 3
    STORAGE_MISMATCH = 4


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
    if len(data) > MAX_TOKEN:
        raise ValueError(f"a token is at most {MAX_TOKEN} bytes, got {len(data)}")
    return data


def client_hello(
    token: str | bytes | None, version: int = PROTOCOL_VERSION, *, storage_id: str | None = None
) -> bytes:
    """The payload of the client's first frame; `storage_id` names the controller's storage."""
    data = token_bytes(token)
    return _HEAD.pack(MAGIC, version) + _LENGTH.pack(len(data)) + data + (storage_id or "").encode()


def server_hello(verdict: Verdict, version: int = PROTOCOL_VERSION) -> bytes:
    """The payload of the server's answer to a client hello."""
    return _HEAD.pack(MAGIC, version) + _STATUS.pack(verdict.status) + verdict.reason.encode()


class Authenticator:
    """The server's side of the handshake: judges one client hello against the configured token.

    With no token configured any token is accepted (there is nothing to check); the version and
    magic are always checked. With a `storage_id` (the replica's own storage) a client naming
    another storage is refused; `storage` (the replica's storage URL) names it in the reason.
    """

    __slots__ = ("_digest", "storage", "storage_id")

    def __init__(
        self, token: str | bytes | None, *, storage_id: str | None = None, storage: str = ""
    ) -> None:
        expected = token_bytes(token)
        self._digest = hashlib.sha256(expected).digest() if expected else None
        self.storage_id = storage_id or None
        self.storage = storage

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
        if len(payload) < _HEAD.size + _LENGTH.size:
            return Verdict(HelloStatus.MALFORMED, "not a twofold client hello (no token length)")
        (length,) = _LENGTH.unpack_from(payload, _HEAD.size)
        start = _HEAD.size + _LENGTH.size
        if len(payload) < start + length:
            return Verdict(HelloStatus.MALFORMED, "not a twofold client hello (token cut short)")
        token, storage = payload[start : start + length], payload[start + length :]
        if self._digest is not None:
            if not token:
                return Verdict(
                    HelloStatus.AUTHENTICATION_FAILED, "a token is required, none was sent"
                )
            if not hmac.compare_digest(hashlib.sha256(token).digest(), self._digest):
                return Verdict(HelloStatus.AUTHENTICATION_FAILED, "wrong token")
        theirs = storage.decode("utf-8", "replace")
        if self.storage_id is not None and theirs and theirs != self.storage_id:
            where = f" {self.storage}" if self.storage else ""
            return Verdict(
                HelloStatus.STORAGE_MISMATCH,
                f"the replica serves storage{where} (id {self.storage_id}), "
                f"the controller uses another storage (id {theirs}); point both at one storage",
            )
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


def raise_for(verdict: Verdict, peer: str = "") -> None:
    """Raise the client-side error for a refusal (naming `peer`); return for `OK`."""
    errors: dict[HelloStatus, type[TransportError]] = {
        HelloStatus.AUTHENTICATION_FAILED: AuthenticationFailed,
        HelloStatus.VERSION_MISMATCH: VersionMismatch,
        HelloStatus.MALFORMED: HandshakeFailed,
        HelloStatus.STORAGE_MISMATCH: StorageMismatch,
    }
    if verdict.ok:
        return
    at = f" at {peer}" if peer else ""
    raise errors[verdict.status](f"the replica{at} refused the connection: {verdict.reason}")
