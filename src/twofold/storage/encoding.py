"""Storing times and schemas in SQL databases (SQLite, PostgreSQL).

Times are `[0, 2**64)` but SQL integers are signed 64-bit, so a time `t` is stored as
`t - 2**63` (order-preserving: comparisons in SQL agree with comparisons of times); an empty
frontier is NULL. Schemas are stored as the msgpack encoding of their `RelationDesc`.
"""

from __future__ import annotations

from typing import Final

import msgspec

from twofold.protocol import Frontier, RelationDesc
from twofold.storage.errors import CorruptStorage

_OFFSET: Final = 2**63


def enc_time(t: int) -> int:
    return t - _OFFSET


def dec_time(v: int) -> int:
    return v + _OFFSET


def enc_frontier(f: Frontier) -> int | None:
    return None if f.time is None else f.time - _OFFSET


def dec_frontier(v: int | None) -> Frontier:
    return Frontier.empty() if v is None else Frontier.at(v + _OFFSET)


def encode_desc(desc: RelationDesc) -> bytes:
    return msgspec.msgpack.encode(desc)


def decode_desc(data: bytes, shard_id: str) -> RelationDesc:
    """The stored schema of `shard_id`; `CorruptStorage` if it is not one."""
    try:
        return msgspec.msgpack.decode(data, type=RelationDesc)
    except (msgspec.DecodeError, ValueError, TypeError) as e:
        raise CorruptStorage(f"shard {shard_id!r}: stored schema is unreadable: {e}") from None
