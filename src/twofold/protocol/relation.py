"""Relation types: `ColumnType` and `RelationDesc`."""

from __future__ import annotations

from typing import Literal as TypeLiteral

from twofold.protocol.base import Value

ScalarType = TypeLiteral["bool", "int", "float", "str", "bytes"]
SCALAR_TYPES: tuple[ScalarType, ...] = ("bool", "int", "float", "str", "bytes")


class ColumnType(Value, frozen=True):
    """The type of one column: a scalar type and whether it may be NULL."""

    scalar: ScalarType
    nullable: bool = True


class RelationDesc(Value, frozen=True):
    """Column names and types of a relation; `names` and `types` have equal length."""

    names: list[str]
    types: list[ColumnType]

    def __post_init__(self) -> None:
        if len(self.names) != len(self.types):
            raise ValueError(
                f"RelationDesc has {len(self.names)} names but {len(self.types)} types"
            )

    @property
    def arity(self) -> int:
        return len(self.types)

    def index_of(self, name: str) -> int:
        """The index of the column called `name`; `KeyError` naming the known columns if absent."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"no column {name!r}; columns are {self.names}") from None
