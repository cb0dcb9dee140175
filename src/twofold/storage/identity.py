"""The identity of a storage location: a random id stored in the storage itself.

Two URLs may name one storage (`sqlite:///a/x.db` and `sqlite:///b/../a/x.db`, a symlink, two
host names of one database), and one URL may name different storages on two machines, so a
URL cannot tell whether a controller and a replica share storage. The id can: `storage_id()`
returns the id stored in the shard `_twofold/identity`, creating it on first use.

Invariant: every process that opens one storage gets the same id, even when several create it
at once — the id is written by a compare-and-append from upper 0 to 1, which exactly one writer
wins; everyone then reads the winner's row at time 0 (the shard's since never moves).
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Final

from twofold.protocol import ColumnType, RelationDesc
from twofold.storage.errors import UpperMismatch
from twofold.storage.storage import Storage

IDENTITY_SHARD: Final = "_twofold/identity"
_DESC: Final = RelationDesc(names=["storage_id"], types=[ColumnType("str", nullable=False)])


def storage_id(storage: Storage) -> str:
    """The id of `storage` (a UUID string), the same for every process that opens it."""
    shard = storage.create_shard(IDENTITY_SHARD, _DESC)
    if shard.upper.time == 0:
        # Losing the race is fine: the winner's id is the storage's.
        with contextlib.suppress(UpperMismatch):
            shard.compare_and_append([([uuid.uuid4().hex], 0, 1)], 0, 1)
    rows = shard.snapshot(0).column(0).to_pylist()
    if len(rows) != 1 or not isinstance(rows[0], str):
        raise ValueError(f"storage {storage.url!r}: its identity shard holds {rows!r}")
    return rows[0]
