"""Catalog entries: what the catalog records about one object, and how two definitions differ.

Contract: an `Entry` is a frozen protocol-style value holding everything needed to re-create an
object in a new process — its name, kind, id (and auxiliary ids), schema, definition (the plan
and the inputs it reads, by name and id), index key, retention, a table's primary key, a
materialized view's shard and first time; for a (non-materialized) view, the views a definition
was written over (`views`: their plans are inlined in `plan`, but it depends on them) and the SQL
text it was created from. It is stored as protocol-codec MessagePack, so any
process decodes it the same way. `differences(old, new)` says in words how a requested
definition differs from the stored one (empty when they match), never dumping a struct.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from twofold.protocol import GlobalId, Plan, RelationDesc
from twofold.protocol.codec import encode, value_decoder

ObjectKind = Literal["table", "index", "materialized view", "view"]
KINDS: Final[tuple[ObjectKind, ...]] = ("table", "index", "materialized view", "view")


class InputRef(msgspec.Struct, frozen=True):
    """An object a definition reads: its name, and the id its plan `Get`s."""

    name: str
    id: GlobalId


class Entry(msgspec.Struct, frozen=True):
    """One catalog object. See the module docstring."""

    name: str
    kind: ObjectKind
    id: GlobalId
    """The object's id: a table's, an index's export, a materialized view's sink."""
    desc: RelationDesc
    plan: Plan | None = None
    """The definition of an index or view: the relation's plan over `inputs`."""
    inputs: list[InputRef] = msgspec.field(default_factory=list)
    build_id: GlobalId | None = None
    """The id of the dataflow's built collection (index, view)."""
    read_id: GlobalId | None = None
    """The id a view is read by as a storage collection."""
    shard: str | None = None
    """A materialized view's shard; a table's when it is not `table/<name>` (a table created
    again after one of that name was dropped gets a fresh shard)."""
    key: list[str] = msgspec.field(default_factory=list)
    retain_history: float | None = None
    primary_key: list[str] = msgspec.field(default_factory=list)
    as_of: int | None = None
    """The first time a materialized view is defined at."""
    views: list[InputRef] = msgspec.field(default_factory=list)
    """The views (kind "view", by name and id) the definition reads: their plans are inlined
    in `plan`, so they are not `inputs`, but dropping one drops (or is refused by) this."""
    sql: str | None = None
    """The SQL statement a view was created by, if any (`SHOW CREATE VIEW`)."""
    pg_types: list[str] = msgspec.field(default_factory=list)
    """A table's columns' declared PostgreSQL types (`int4`, `float4`, `varchar(5)`, ...; see
    `twofold.sql.types.declared_type`), one per column, when it was created by SQL `CREATE
    TABLE`; for a view, materialized view or index SQL created, its query's columns' declared
    types (an expression's column: its engine scalar's type, `int8`, `float8`, `text`); empty
    for objects made by the Python API and for catalogs written before the field existed —
    their columns are the engine scalars' types (`int8`, `float8`, `text`, ...)."""

    @property
    def dependencies(self) -> list[str]:
        names = [i.name for i in self.inputs]
        return names + [v.name for v in self.views if v.name not in names]

    def label(self) -> str:
        return f"{self.kind} {self.name!r}"


_decoder: Final = value_decoder(Entry)


def encode_entry(entry: Entry) -> bytes:
    return encode(entry)


def decode_entry(data: bytes) -> Entry:
    """The entry stored as `data`; `msgspec.DecodeError`/`ValidationError` if malformed."""
    return _decoder.decode(data)


def describe_columns(desc: RelationDesc) -> str:
    """`(id int, note str null)`: a schema as a reader writes it."""
    cols = [f"{n} {t.scalar}{'' if not t.nullable else ' null'}"
            for n, t in zip(desc.names, desc.types, strict=True)]
    return "(" + ", ".join(cols) + ")"


def _a(kind: str) -> str:
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def differences(old: Entry, new: Entry) -> list[str]:
    """How `new` (a definition asked for) differs from `old` (the stored entry), in words."""
    if old.kind != new.kind:
        return [f"it is {_a(old.kind)}, not {_a(new.kind)}"]
    out: list[str] = []
    if old.desc != new.desc:
        out.append(f"its columns are {describe_columns(old.desc)}, the new definition's "
                   f"{describe_columns(new.desc)}")
    if old.pg_types and new.pg_types and old.pg_types != new.pg_types:
        out.append(f"its columns are declared {old.pg_types}, not {new.pg_types}")
    if old.key != new.key:
        out.append(f"it is keyed by {old.key}, not {new.key}")
    if old.primary_key != new.primary_key:
        out.append(f"its primary key is {old.primary_key or 'none'}, not "
                   f"{new.primary_key or 'none'}")
    if sorted(old.dependencies) != sorted(new.dependencies):
        out.append(f"it reads {sorted(old.dependencies)}, not {sorted(new.dependencies)}")
    elif old.plan != new.plan or old.inputs != new.inputs or old.views != new.views:
        out.append("its definition (the query it maintains) is different")
    if old.retain_history != new.retain_history:
        out.append(f"it retains {old.retain_history} s of history, not {new.retain_history}")
    return out
