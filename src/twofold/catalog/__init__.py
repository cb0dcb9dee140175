"""The durable catalog (`spec/catalog.md`): every table, index and materialized view a user
creates, stored as entries in a storage shard written by compare-and-append.

`Catalog(storage)` opens (or creates) the catalog of a storage location; `state()` reads it,
`transact(fn)` changes it atomically, retrying `fn` when another process won the race. `Entry`
is one object's record (`entries`); `differences` names how two definitions differ. Layer: uses
`twofold.protocol` and `twofold.storage` only.
"""

from twofold.catalog.entries import (
    KINDS,
    Entry,
    InputRef,
    ObjectKind,
    decode_entry,
    describe_columns,
    differences,
    encode_entry,
)
from twofold.catalog.errors import (
    CatalogConflict,
    CatalogError,
    CorruptCatalog,
    EntryExists,
    HasDependents,
    MissingDependency,
    UnknownEntry,
)
from twofold.catalog.store import CATALOG_SHARD, Catalog, CatalogState, Change

__all__ = [
    "CATALOG_SHARD", "KINDS", "Catalog", "CatalogConflict", "CatalogError", "CatalogState",
    "Change", "CorruptCatalog", "Entry", "EntryExists", "HasDependents", "InputRef",
    "MissingDependency", "ObjectKind", "UnknownEntry", "decode_entry", "describe_columns",
    "differences", "encode_entry",
]  # fmt: skip
