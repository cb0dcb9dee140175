"""PostgreSQL's escape string constants, `E'...'`.

Contract: `decode(token)` is the value of the whole token `E'...'` (or `e'...'`) as PostgreSQL
reads it: `''` and `\\'` are a quote; `\\b \\f \\n \\r \\t`; `\\ooo` (one to three octal
digits) and `\\xh`/`\\xhh` are one byte each; `\\uXXXX` and `\\UXXXXXXXX` a code point (a UTF-16
surrogate pair in two `\\u` escapes is one); any other `\\c` is `c`. The bytes must be UTF-8
without NUL (`22021` otherwise, as PostgreSQL's "invalid byte sequence for encoding"); a bad
Unicode escape is `22025` (no hex digits) or `42601` (no character, a broken surrogate pair),
as PostgreSQL reports them.
"""

from __future__ import annotations

import re
from typing import Final

from twofold.sql.errors import SqlError, SqlSyntaxError


class CharacterNotInRepertoire(SqlError):
    """Bytes that are not UTF-8, or a NUL, in a string constant (`22021`)."""

    sqlstate = "22021"


class InvalidEscapeSequence(SqlError):
    """`\\u` or `\\U` without its hex digits (`22025`)."""

    sqlstate = "22025"


_ESCAPE: Final = re.compile(r"''|\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{4})|"
                            r"U([0-9A-Fa-f]{8})|([uU])|(.))", re.S)
_SIMPLE: Final = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def decode(token: str) -> str:
    body = token[2:-1]
    out = bytearray()
    pos = 0
    high: int | None = None  # the first half of a surrogate pair, waiting for its second
    for m in _ESCAPE.finditer(body):
        out += body[pos:m.start()].encode("utf-8")
        octal, hexa, u4, u8, bad_u, other = m.groups()
        code = int(u4 or u8, 16) if (u4 or u8) else None
        if high is not None and (code is None or not 0xDC00 <= code <= 0xDFFF or u8 or
                                 m.start() != pos):
            raise SqlSyntaxError("invalid Unicode surrogate pair")
        if m.group(0) == "''":
            out += b"'"
        elif octal is not None:
            out.append(int(octal, 8) & 0xFF)
        elif hexa is not None:
            out.append(int(hexa, 16))
        elif code is not None:
            if high is not None:
                code, high = 0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00), None
            elif 0xD800 <= code <= 0xDBFF:
                high = code
                pos = m.end()
                continue
            elif 0xDC00 <= code <= 0xDFFF:
                raise SqlSyntaxError("invalid Unicode surrogate pair")
            if code == 0 or code > 0x10FFFF:
                raise SqlSyntaxError("invalid Unicode escape value")
            out += chr(code).encode("utf-8")
        elif bad_u is not None:
            raise InvalidEscapeSequence("invalid Unicode escape: \\u must be followed by 4 "
                                        "hex digits, \\U by 8")
        else:
            out += _SIMPLE.get(other, other).encode("utf-8")
        pos = m.end()
    if high is not None:
        raise SqlSyntaxError("invalid Unicode surrogate pair")
    out += body[pos:].encode("utf-8")
    if 0 in out:
        raise CharacterNotInRepertoire('invalid byte sequence for encoding "UTF8": 0x00')
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CharacterNotInRepertoire(
            f'invalid byte sequence for encoding "UTF8": 0x{out[e.start]:02x}') from None
