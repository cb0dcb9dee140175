"""Collection identity: `GlobalId`.

A `GlobalId` names a collection for the lifetime of a protocol iteration. Four kinds, ordered by
kind first (system < introspection < user < transient), then by number. Only the transient kind
is short-lived (peek dataflows, subscribes, copy-tos); the multiplexer keys its frontier filter on
exactly that property. On the wire a `GlobalId` is its string form (`s7`, `si7`, `u7`, `t7`).
"""

from __future__ import annotations

import enum
from typing import Any, Final


class IdKind(enum.IntEnum):
    """The kind of a `GlobalId`; the integer value is its rank in the total order."""

    SYSTEM = 0
    INTROSPECTION = 1
    USER = 2
    TRANSIENT = 3


_PREFIX: Final[dict[IdKind, str]] = {
    IdKind.SYSTEM: "s",
    IdKind.INTROSPECTION: "si",
    IdKind.USER: "u",
    IdKind.TRANSIENT: "t",
}
# Longest prefix first, so that "si7" is not read as system id "i7".
_PARSE_ORDER: Final = sorted(_PREFIX.items(), key=lambda kv: -len(kv[1]))
MAX_ID: Final = 2**64 - 1


class GlobalId:
    """An immutable, hashable, totally ordered collection identifier."""

    __slots__ = ("_hash", "_kind", "_n")
    _hash: int
    _kind: IdKind
    _n: int

    def __init__(self, kind: IdKind, n: int) -> None:
        if not isinstance(kind, IdKind):
            raise TypeError(f"GlobalId kind must be an IdKind, got {kind!r}")
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_ID:
            raise ValueError(f"GlobalId number must be an int in [0, 2**64), got {n!r}")
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_n", n)
        # Ids key the controller's and the runtimes' tables, several lookups per read: hashed
        # once (from ints only, so the same in every process).
        object.__setattr__(self, "_hash", hash((int(kind), n)))

    @classmethod
    def system(cls, n: int) -> GlobalId:
        return cls(IdKind.SYSTEM, n)

    @classmethod
    def introspection(cls, n: int) -> GlobalId:
        return cls(IdKind.INTROSPECTION, n)

    @classmethod
    def user(cls, n: int) -> GlobalId:
        return cls(IdKind.USER, n)

    @classmethod
    def transient(cls, n: int) -> GlobalId:
        return cls(IdKind.TRANSIENT, n)

    @classmethod
    def parse(cls, text: str) -> GlobalId:
        """Inverse of `str()`: `GlobalId.parse("u7") == GlobalId.user(7)`."""
        if not isinstance(text, str):
            raise TypeError(f"GlobalId.parse expects a str, got {type(text).__name__}")
        for kind, prefix in _PARSE_ORDER:
            if text.startswith(prefix):
                digits = text[len(prefix) :]
                # Reject signs, whitespace, underscores and leading zeros: one spelling per id.
                # 2**64 - 1 has 20 digits; the length check also keeps int() away from
                # arbitrarily long input.
                if (
                    0 < len(digits) <= 20
                    and digits.isascii()
                    and digits.isdigit()
                    and (digits == "0" or digits[0] != "0")
                ):
                    return cls(kind, int(digits))
                break
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise ValueError(f"not a GlobalId: {shown!r} (expected s<n>, si<n>, u<n> or t<n>)")

    @property
    def kind(self) -> IdKind:
        return self._kind

    @property
    def n(self) -> int:
        return self._n

    @property
    def is_transient(self) -> bool:
        return self._kind is IdKind.TRANSIENT

    def _key(self) -> tuple[int, int]:
        return (int(self._kind), self._n)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("GlobalId is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("GlobalId is immutable")

    def __str__(self) -> str:
        return f"{_PREFIX[self._kind]}{self._n}"

    def __repr__(self) -> str:
        return f"GlobalId.{self._kind.name.lower()}({self._n})"

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GlobalId):
            return NotImplemented
        return self._n == other._n and self._kind is other._kind

    def __lt__(self, other: GlobalId) -> bool:
        if not isinstance(other, GlobalId):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: GlobalId) -> bool:
        if not isinstance(other, GlobalId):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: GlobalId) -> bool:
        if not isinstance(other, GlobalId):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: GlobalId) -> bool:
        if not isinstance(other, GlobalId):
            return NotImplemented
        return self._key() >= other._key()

    def __reduce__(self) -> tuple[Any, ...]:
        return (GlobalId, (self._kind, self._n))
