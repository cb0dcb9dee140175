"""PostgreSQL v3 protocol messages: frontend messages as frozen structs, backend encoders.

Contract: `parse_startup(body)` and `parse_message(kind, body)` turn one framed message into a
frozen `msgspec.Struct` or raise `ProtocolViolation` naming what is wrong (a truncated field, a
missing terminator, an unknown message type). The `encode_*` functions build backend messages
(type byte, length, body) ready to write. Nothing here does I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import msgspec

PROTOCOL_3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102


class ProtocolViolation(Exception):
    """A message that breaks the protocol; the connection is closed after an error (08P01)."""


# -- frontend messages --------------------------------------------------------------------------


class Startup(msgspec.Struct, frozen=True):
    params: dict[str, str]


class SslRequest(msgspec.Struct, frozen=True):
    pass


class GssEncRequest(msgspec.Struct, frozen=True):
    pass


class CancelRequest(msgspec.Struct, frozen=True):
    pid: int
    secret: int


class Password(msgspec.Struct, frozen=True):
    """PasswordMessage, SASLInitialResponse or SASLResponse (all type 'p')."""

    data: bytes


class Query(msgspec.Struct, frozen=True):
    sql: str


class Parse(msgspec.Struct, frozen=True):
    name: str
    sql: str
    param_oids: tuple[int, ...]


class Bind(msgspec.Struct, frozen=True):
    portal: str
    statement: str
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


class Describe(msgspec.Struct, frozen=True):
    kind: str  # 'S' statement, 'P' portal
    name: str


class Execute(msgspec.Struct, frozen=True):
    portal: str
    max_rows: int


class Close(msgspec.Struct, frozen=True):
    kind: str
    name: str


class Sync(msgspec.Struct, frozen=True):
    pass


class Flush(msgspec.Struct, frozen=True):
    pass


class Terminate(msgspec.Struct, frozen=True):
    pass


class CopyData(msgspec.Struct, frozen=True):
    data: bytes


class CopyDone(msgspec.Struct, frozen=True):
    pass


class CopyFail(msgspec.Struct, frozen=True):
    message: str


_SYNC_MSG = Sync()

Frontend = (Startup | SslRequest | GssEncRequest | CancelRequest | Password | Query | Parse
            | Bind | Describe | Execute | Close | Sync | Flush | Terminate | CopyData | CopyDone
            | CopyFail)


_I16, _I32, _U32 = struct.Struct("!h"), struct.Struct("!i"), struct.Struct("!I")


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def cstr(self) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolViolation("a string field has no terminating NUL byte")
        raw = self.data[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolViolation("a string field is not valid UTF-8") from None

    def take(self, n: int) -> bytes:
        pos = self.pos
        if n < 0 or pos + n > len(self.data):
            raise ProtocolViolation("the message is shorter than its fields")
        self.pos = pos + n
        return self.data[pos:pos + n]

    def _fixed(self, fmt: struct.Struct) -> int:
        pos = self.pos
        if pos + fmt.size > len(self.data):
            raise ProtocolViolation("the message is shorter than its fields")
        self.pos = pos + fmt.size
        return int(fmt.unpack_from(self.data, pos)[0])

    def i16(self) -> int:
        return self._fixed(_I16)

    def i32(self) -> int:
        return self._fixed(_I32)

    def u32(self) -> int:
        return self._fixed(_U32)

    def count(self) -> int:
        n = self.i16()
        if n < 0:
            raise ProtocolViolation("a negative count")
        return n

    def done(self) -> None:
        if self.pos != len(self.data):
            raise ProtocolViolation("the message is longer than its fields")


def parse_startup(body: bytes) -> Startup | SslRequest | GssEncRequest | CancelRequest:
    r = _Reader(body)
    code = r.i32()
    if code == SSL_REQUEST:
        r.done()
        return SslRequest()
    if code == GSSENC_REQUEST:
        r.done()
        return GssEncRequest()
    if code == CANCEL_REQUEST:
        pid, secret = r.i32(), r.i32()
        r.done()
        return CancelRequest(pid, secret)
    if code != PROTOCOL_3:
        raise ProtocolViolation(f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}: "
                                "the server supports 3.0")
    params: dict[str, str] = {}
    while True:
        key = r.cstr()
        if not key:
            break
        params[key] = r.cstr()
    r.done()
    return Startup(params)


def parse_message(kind: bytes, body: bytes) -> Frontend:
    if kind == b"S" and not body:
        return _SYNC_MSG
    r = _Reader(body)
    msg: Frontend
    if kind == b"Q":
        msg = Query(r.cstr())
    elif kind == b"P":
        name, sql = r.cstr(), r.cstr()
        msg = Parse(name, sql, tuple(r.u32() for _ in range(r.count())))
    elif kind == b"B":
        portal, stmt = r.cstr(), r.cstr()
        formats = tuple(r.i16() for _ in range(r.count()))
        params: list[bytes | None] = []
        for _ in range(r.count()):
            n = r.i32()
            params.append(None if n == -1 else r.take(n))
        results = tuple(r.i16() for _ in range(r.count()))
        if any(f not in (0, 1) for f in formats + results):
            raise ProtocolViolation("a format code other than 0 (text) or 1 (binary)")
        msg = Bind(portal, stmt, formats, tuple(params), results)
    elif kind in (b"D", b"C"):
        which = r.take(1).decode("latin-1")
        if which not in ("S", "P"):
            raise ProtocolViolation(f"Describe/Close of {which!r}: expected 'S' or 'P'")
        name = r.cstr()
        msg = Describe(which, name) if kind == b"D" else Close(which, name)
    elif kind == b"E":
        msg = Execute(r.cstr(), r.i32())
    elif kind == b"S":
        msg = Sync()
    elif kind == b"H":
        msg = Flush()
    elif kind == b"X":
        msg = Terminate()
    elif kind == b"p":
        return Password(body)
    elif kind == b"d":
        return CopyData(body)
    elif kind == b"c":
        msg = CopyDone()
    elif kind == b"f":
        msg = CopyFail(r.cstr())
    else:
        raise ProtocolViolation(f"unknown frontend message type {kind!r}")
    r.done()
    return msg


# -- backend messages ---------------------------------------------------------------------------


def _msg(kind: bytes, body: bytes) -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def _cstr(s: str) -> bytes:
    return s.encode("utf-8") + b"\0"


def encode_auth(code: int, extra: bytes = b"") -> bytes:
    """Authentication*: 0 ok, 3 cleartext, 5 md5 (extra = salt), 10 SASL (extra = mechanisms),
    11 SASL continue, 12 SASL final."""
    return _msg(b"R", struct.pack("!i", code) + extra)


def encode_parameter_status(name: str, value: str) -> bytes:
    return _msg(b"S", _cstr(name) + _cstr(value))


def encode_backend_key(pid: int, secret: int) -> bytes:
    return _msg(b"K", struct.pack("!ii", pid, secret))


def encode_ready(status: str) -> bytes:
    ready = _READY.get(status)
    return _msg(b"Z", status.encode("ascii")) if ready is None else ready


Field = tuple[str, int, int, int, int, int, int]
"""A RowDescription field: name, type OID, type size, format code, type modifier, and the
table OID and attribute number it was read from (0, 0 for a computed column)."""


def encode_row_description(fields: Sequence[Field]) -> bytes:
    body = [struct.pack("!h", len(fields))]
    for name, oid, size, fmt, typmod, table, attnum in fields:
        body.append(_cstr(name) + struct.pack("!ihihih", table, attnum, oid, size, typmod,
                                              fmt))
    return _msg(b"T", b"".join(body))


def encode_data_row(values: Sequence[bytes | None]) -> bytes:
    body = [_I16.pack(len(values))]
    for v in values:
        if v is None:
            body.append(b"\xff\xff\xff\xff")
        else:
            body.append(_I32.pack(len(v)))
            body.append(v)
    data = b"".join(body)
    return b"D" + _I32.pack(len(data) + 4) + data


def encode_parameter_description(oids: Sequence[int]) -> bytes:
    return _msg(b"t", struct.pack(f"!h{len(oids)}I", len(oids), *oids))


def encode_command_complete(tag: str) -> bytes:
    return _msg(b"C", _cstr(tag))


def encode_error(code: str, message: str, severity: str = "ERROR",
                 notice: bool = False, routine: str | None = None,
                 hint: str | None = None) -> bytes:
    """An ErrorResponse (NoticeResponse with `notice`); `routine` is PostgreSQL's R field (the
    server function that raised it), which some drivers dispatch on; `hint` its H field."""
    body = (b"S" + _cstr(severity) + b"V" + _cstr(severity) + b"C" + _cstr(code)
            + b"M" + _cstr(message) + (b"H" + _cstr(hint) if hint else b"")
            + (b"R" + _cstr(routine) if routine else b"") + b"\0")
    return _msg(b"N" if notice else b"E", body)


def encode_copy_response(kind: bytes, ncols: int, binary: bool = False) -> bytes:
    """CopyInResponse (`G`) or CopyOutResponse (`H`), text (or binary) format."""
    f = int(binary)
    return _msg(kind, struct.pack(f"!bh{ncols}h", f, ncols, *([f] * ncols)))


def encode_copy_data(data: bytes) -> bytes:
    return _msg(b"d", data)


_READY = {status: _msg(b"Z", status.encode("ascii")) for status in "ITE"}
PARSE_COMPLETE = _msg(b"1", b"")
BIND_COMPLETE = _msg(b"2", b"")
CLOSE_COMPLETE = _msg(b"3", b"")
NO_DATA = _msg(b"n", b"")
PORTAL_SUSPENDED = _msg(b"s", b"")
EMPTY_QUERY = _msg(b"I", b"")
COPY_DONE = _msg(b"c", b"")
SSL_NO = b"N"
SSL_YES = b"S"
