"""Schemas: column names with their types, and parsing what users write for them.

Contract: `parse_schema` turns `{"id": int, "note": str}` (Python types, type names, or full
`ColumnType`s) plus a `nullable` choice into a `Schema`, refusing unknown types, empty schemas and
nullable lists naming absent columns with `InvalidSchema`. A `Schema` is immutable and converts
exactly to and from the protocol's `RelationDesc`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias, TypeVar, get_args

from twofold.api.errors import ColumnNotFound, DuplicateColumn, InvalidSchema
from twofold.protocol import ColumnType, RelationDesc, ScalarType

_PY_TYPES: Final[dict[object, ScalarType]] = {
    bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes",
}
_NAMES: Final[frozenset[str]] = frozenset(get_args(ScalarType))

DType: TypeAlias = "type | str | ColumnType"
"""What a user may write for a column type: `int`, `"int"`, or `ColumnType("int", False)`."""


def scalar_of(dtype: object, what: str) -> ScalarType:
    """The scalar type named by a Python type or a type name; `InvalidSchema` otherwise."""
    if isinstance(dtype, str) and dtype in _NAMES:
        return dtype  # type: ignore[return-value]
    scalar = _PY_TYPES.get(dtype) if isinstance(dtype, type) else None
    if scalar is None:
        raise InvalidSchema(
            f"{what}: unsupported type {dtype!r}; use one of bool, int, float, str, bytes"
        )
    return scalar


@dataclass(frozen=True)
class Schema:
    """Column names and types of a relation, in order."""

    names: tuple[str, ...]
    types: tuple[ColumnType, ...]

    @classmethod
    def of(cls, desc: RelationDesc) -> Schema:
        return cls(tuple(desc.names), tuple(desc.types))

    def desc(self) -> RelationDesc:
        return RelationDesc(list(self.names), list(self.types))

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[tuple[str, ColumnType]]:
        return iter(zip(self.names, self.types, strict=True))

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def index(self, name: str, operation: str) -> int:
        """The position of column `name`; `ColumnNotFound` naming `operation` if absent."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ColumnNotFound(name, operation, list(self.names)) from None

    def type_of(self, name: str, operation: str) -> ColumnType:
        return self.types[self.index(name, operation)]

    def as_dict(self) -> dict[str, str]:
        """`{"id": "int", "note": "str?"}`: `?` marks nullable columns."""
        return {n: t.scalar + ("?" if t.nullable else "") for n, t in self}

    def __repr__(self) -> str:
        return f"Schema({self.as_dict()})"


def parse_schema(
    schema: Mapping[str, DType] | Schema | RelationDesc,
    *,
    nullable: bool | str | Iterable[str] = True,
    what: str = "schema",
) -> Schema:
    """A `Schema` from a mapping of column name to type.

    `nullable=True` makes every column nullable, `False` none, and a collection of names exactly
    those. A `ColumnType` value keeps its own nullability whatever `nullable` says.
    """
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, RelationDesc):
        return Schema.of(schema)
    if not isinstance(schema, Mapping) or not schema:
        raise InvalidSchema(f"{what}: expected a non-empty mapping of column name to type, "
                            f"got {schema!r}")
    if isinstance(nullable, bool):
        nullable_set = set(schema) if nullable else set()
    elif isinstance(nullable, str):
        nullable_set = {nullable}  # one name, not its characters
    else:
        nullable_set = set(nullable)
        missing = sorted(nullable_set - set(schema))
        if missing:
            raise InvalidSchema(f"{what}: nullable names unknown columns {missing}; "
                                f"columns are {list(schema)}")
    names: list[str] = []
    types: list[ColumnType] = []
    for name, dtype in schema.items():
        if not isinstance(name, str) or not name:
            raise InvalidSchema(f"{what}: column names must be non-empty strings, got {name!r}")
        if isinstance(dtype, ColumnType):
            types.append(dtype)
        else:
            types.append(ColumnType(scalar_of(dtype, f"{what} column {name!r}"),
                                    name in nullable_set))
        names.append(name)
    return Schema(tuple(names), tuple(types))


def _unique(names: Sequence[str], operation: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise DuplicateColumn(n, operation)
        seen.add(n)


T = TypeVar("T")


def flat_args(args: Iterable[T | Sequence[T]]) -> list[T]:
    """Arguments given as `f("a", "b")` or `f(["a", "b"])`, like polars: one level of lists
    and tuples unpacked, in order."""
    flat: list[T] = []
    for a in args:
        if isinstance(a, list | tuple):
            flat.extend(a)
        else:
            flat.append(a)  # type: ignore[arg-type]
    return flat
