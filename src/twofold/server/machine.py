"""The pgwire session as a sans-IO state machine (bytes in, messages out), like `h11`.

Contract: `Machine.receive_data(data)` buffers bytes from the client; `next_message()` returns
the next frontend message the current phase accepts, `None` when more bytes are needed, and
raises `ProtocolViolation` for a malformed, oversized or out-of-phase message (the server then
sends an 08P01 error and closes that connection). The server tells the machine what it sent
(`sent_auth_ok`, `sent_ready`, `sent_error`, `sent_copy_in`, ...) and the machine moves phase:

| phase    | accepts                                          | moves to                       |
|----------|--------------------------------------------------|--------------------------------|
| STARTUP  | Startup, SslRequest, GssEncRequest, CancelRequest| AUTH (startup), CLOSED (cancel)|
| AUTH     | Password                                         | READY (auth ok)                |
| READY    | Query, Parse..Sync, Flush, Terminate             | EXTENDED, COPY_IN, CLOSED      |
|          | CopyData, CopyDone, CopyFail (dropped: a failed COPY's rest; here and below) |      |
| EXTENDED | Parse, Bind, Describe, Execute, Close, Flush, Sync | READY (Sync), FAILED (error) |
|          | Query (as PostgreSQL: it runs, like any simple query) | READY                     |
| FAILED   | everything is read and dropped until Sync        | READY (Sync)                   |
| COPY_IN  | CopyData, CopyDone, CopyFail, Flush, Sync        | the phase COPY began in        |

Messages of a COPY_IN that the protocol says to ignore (Flush, Sync) are dropped.
"""

from __future__ import annotations

import enum
import struct

from twofold.server.messages import (
    Bind,
    CancelRequest,
    Close,
    CopyData,
    CopyDone,
    CopyFail,
    Describe,
    Execute,
    Flush,
    Frontend,
    GssEncRequest,
    Parse,
    Password,
    ProtocolViolation,
    Query,
    SslRequest,
    Startup,
    Sync,
    Terminate,
    parse_message,
    parse_startup,
)

MAX_STARTUP = 10_000
MAX_MESSAGE = 64 * 1024 * 1024
_LENGTH = struct.Struct("!i")
_KINDS = [bytes([b]) for b in range(256)]  # a message's type byte, without a slice per message


class Phase(enum.Enum):
    STARTUP = "startup"
    AUTH = "authentication"
    READY = "ready"
    EXTENDED = "extended query"
    FAILED = "failed (skipping to Sync)"
    COPY_IN = "copy in"
    CLOSED = "closed"


_EXTENDED = (Parse, Bind, Describe, Execute, Close)
_COPY = (CopyData, CopyDone, CopyFail)  # outside COPY_IN: read and dropped, as PostgreSQL
_ACCEPTS: dict[Phase, tuple[type, ...]] = {
    Phase.STARTUP: (Startup, SslRequest, GssEncRequest, CancelRequest),
    Phase.AUTH: (Password, Terminate),
    Phase.READY: (Query, *_EXTENDED, Sync, Flush, Terminate, *_COPY),
    Phase.EXTENDED: (*_EXTENDED, Sync, Flush, Terminate, Query, *_COPY),
    Phase.FAILED: (*_EXTENDED, Sync, Flush, Terminate, Query, *_COPY),
    Phase.COPY_IN: (CopyData, CopyDone, CopyFail, Flush, Sync, Terminate),
    Phase.CLOSED: (),
}


class Machine:
    """One client connection's protocol state. See the module docstring."""

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self.phase = Phase.STARTUP
        self.max_message = max_message
        self._buf = bytearray()
        self._pos = 0  # where the next message starts in `_buf` (taken bytes are dropped late)
        self._before_copy = Phase.READY

    def receive_data(self, data: bytes) -> None:
        if self._pos:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += data

    def has_message(self) -> bool:
        """Whether a whole message is received and not yet taken (the client pipelines)."""
        buf, pos = self._buf, self._pos
        if self.phase is Phase.STARTUP or len(buf) - pos < 5:
            return False
        return len(buf) - pos >= int(_LENGTH.unpack_from(buf, pos + 1)[0]) + 1

    def between_requests(self) -> bool:
        """Whether the last request is answered (READY) and no byte of the next one is
        buffered: what a reply computed straight from newly received bytes needs."""
        return self.phase is Phase.READY and self._pos == len(self._buf)

    def alone_until_sync(self, portal: str) -> bool:
        """Whether the messages received up to the next Sync run no statement but `portal`'s:
        a Sync is buffered, and before it no Bind or Query, and every Execute or portal
        Describe names `portal` (a write there is then the only statement of its implicit
        transaction). False when no Sync has arrived yet."""
        buf, at, n = self._buf, self._pos, len(self._buf)
        name = portal.encode()
        while at + 5 <= n:
            kind = bytes(buf[at:at + 1])
            (size,) = struct.unpack_from("!i", buf, at + 1)
            end = at + 1 + size
            if size < 4 or end > n:
                return False
            if kind == b"S":
                return True
            if kind in (b"B", b"Q"):
                return False
            if kind == b"E" and bytes(buf[at + 5:end]).split(b"\0", 1)[0] != name:
                return False
            if kind == b"D" and buf[at + 5:at + 6] == b"P" and \
                    bytes(buf[at + 6:end]).split(b"\0", 1)[0] != name:
                return False
            at = end
        return False

    def next_message(self) -> Frontend | None:
        while True:
            msg = self._frame()
            if msg is None:
                return None
            kept = self._accept(msg)
            if kept is not None:
                return kept

    def _frame(self) -> Frontend | None:
        buf, pos = self._buf, self._pos
        if self.phase is Phase.CLOSED:
            raise ProtocolViolation("the connection is closed")
        if self.phase is Phase.STARTUP:
            if len(buf) - pos < 4:
                return None
            (n,) = _LENGTH.unpack_from(buf, pos)
            if n < 8 or n > MAX_STARTUP:
                raise ProtocolViolation(f"invalid startup packet length {n}")
            if len(buf) - pos < n:
                return None
            body = bytes(buf[pos + 4:pos + n])
            self._pos = pos + n
            return parse_startup(body)
        if len(buf) - pos < 5:
            return None
        (n,) = _LENGTH.unpack_from(buf, pos + 1)
        if n < 4:
            raise ProtocolViolation(f"invalid message length {n}")
        if n > self.max_message:
            raise ProtocolViolation(f"message of {n} bytes exceeds the limit of "
                                    f"{self.max_message}")
        if len(buf) - pos < n + 1:
            return None
        kind = _KINDS[buf[pos]]
        body = bytes(buf[pos + 5:pos + n + 1])
        self._pos = pos + n + 1
        return parse_message(kind, body)

    def _accept(self, msg: Frontend) -> Frontend | None:
        phase = self.phase
        if not isinstance(msg, _ACCEPTS[phase]):
            raise ProtocolViolation(f"unexpected {type(msg).__name__} message in the "
                                    f"{phase.value} phase")
        if isinstance(msg, Terminate):
            self.phase = Phase.CLOSED
            return msg
        if phase is Phase.FAILED:
            if isinstance(msg, Sync):
                return msg
            return None  # skipped until Sync after an error
        if phase is Phase.COPY_IN and isinstance(msg, Flush | Sync):
            return None
        if phase is not Phase.COPY_IN and isinstance(msg, CopyData | CopyDone | CopyFail):
            # PostgreSQL accepts and ignores them: the rest of a COPY FROM STDIN that failed
            # before CopyInResponse, which a client (asyncpg) sends without waiting for it
            return None
        if phase is Phase.READY and isinstance(msg, _EXTENDED):
            self.phase = Phase.EXTENDED
        elif phase is Phase.EXTENDED and isinstance(msg, Query):
            # asyncpg's prepare() ends with a Flush, not a Sync, and its next message may be a
            # simple query; PostgreSQL runs it (ReadyForQuery follows), and so do we.
            self.phase = Phase.READY
        if isinstance(msg, CancelRequest):
            self.phase = Phase.CLOSED
        elif isinstance(msg, Startup):
            self.phase = Phase.AUTH
        return msg

    # -- what the server sent ---------------------------------------------------------------

    def sent_auth_ok(self) -> None:
        self.phase = Phase.READY

    def sent_ready(self) -> None:
        self.phase = Phase.READY

    def sent_error(self) -> None:
        """After an error: an extended-query exchange skips to Sync; a COPY ends."""
        if self.phase is Phase.EXTENDED:
            self.phase = Phase.FAILED
        elif self.phase is Phase.COPY_IN:
            self.phase = Phase.FAILED if self._before_copy is Phase.EXTENDED else Phase.READY

    def sent_copy_in(self) -> None:
        self._before_copy = self.phase
        self.phase = Phase.COPY_IN

    def copy_finished(self) -> None:
        self.phase = self._before_copy

    def close(self) -> None:
        self.phase = Phase.CLOSED
