"""Feeding a dataflow's source imports from storage shards.

A `SourceFeed` waits until its shard is complete past the dataflow's `as_of`, then hands the
dataflow the shard's snapshot at `as_of` followed by every later batch (`Shard.listen`), so the
dataflow sees exactly the shard's history from `as_of` on, in order, with the shard's upper as
the import's upper. It never waits: `poll` returns what is available now.
"""

from __future__ import annotations

import pyarrow as pa

from twofold.protocol import Frontier
from twofold.storage import Listener, Shard


class SourceFeed:
    """Snapshot-then-listen over one shard. See the module docstring."""

    def __init__(self, shard: Shard, as_of: int) -> None:
        self.shard = shard
        self.as_of = as_of
        self._listener: Listener | None = None

    @property
    def started(self) -> bool:
        return self._listener is not None

    def poll(self) -> tuple[list[pa.Table], Frontier | None]:
        """New update tables and the import's new upper (`None`: nothing complete yet).

        Raises the storage's `SinceViolation` if the shard was compacted past `as_of`.
        """
        tables: list[pa.Table] = []
        if self._listener is None:
            upper = self.shard.upper
            if upper.contains(self.as_of):
                return tables, None
            # Listen first: on storage whose listeners hold leases (PostgreSQL) the listener
            # holds since at `as_of` before the snapshot reads there.
            listener = self.shard.listen(self.as_of)
            tables.append(self.shard.snapshot(self.as_of))
            self._listener = listener
        for batch in self._listener.poll():
            if batch.updates.num_rows:
                tables.append(batch.updates)
        return tables, self._listener.frontier
