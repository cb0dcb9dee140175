"""Feeding a dataflow's source imports from storage shards.

A `SourceFeed` waits until its shard is complete past the dataflow's `as_of`, then hands the
dataflow the shard's snapshot at `as_of` followed by every later batch (`Shard.listen`), so the
dataflow sees exactly the shard's history from `as_of` on, in order, with the shard's upper as
the import's upper. It never waits: `poll` returns what is available now.

A materialized view's shard has an error part (`storage.view_errors`): the feed reads it the same
way, at the same `as_of`, and the import's upper is the meet of the two uppers, so the dataflow
never runs a time whose rows it has without that time's errors.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from twofold.engine.frames import DIFF, ERROR, TIME, error_schema
from twofold.protocol import Frontier
from twofold.storage import Listener, Shard


def error_frame(table: pa.Table) -> pl.DataFrame:
    """An error part's update table as the engine's error frame (`error`, `time`, `diff`)."""
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame.select(ERROR, TIME, DIFF).cast(error_schema())  # type: ignore[arg-type]


class SourceFeed:
    """Snapshot-then-listen over one shard (and its error part). See the module docstring."""

    def __init__(self, shard: Shard, as_of: int, errors: Shard | None = None) -> None:
        self.shard = shard
        self.errors = errors
        self.as_of = as_of
        self._listener: Listener | None = None
        self._error_listener: Listener | None = None

    @property
    def started(self) -> bool:
        return self._listener is not None

    def poll(self) -> tuple[list[pa.Table], list[pl.DataFrame], Frontier | None]:
        """New update tables, new error frames (`error`, `time`, `diff`) and the import's new
        upper (`None`: nothing complete yet).

        Raises the storage's `SinceViolation` if the shard was compacted past `as_of`.
        """
        tables: list[pa.Table] = []
        errors: list[pl.DataFrame] = []
        if self._listener is None:
            if self.shard.upper.contains(self.as_of) or (
                    self.errors is not None and self.errors.upper.contains(self.as_of)):
                return tables, errors, None
            # Listen first: on storage whose listeners hold leases (PostgreSQL) the listener
            # holds since at `as_of` before the snapshot reads there.
            listener = self.shard.listen(self.as_of)
            if self.errors is not None:
                error_listener = self.errors.listen(self.as_of)
                errors.append(error_frame(self.errors.snapshot(self.as_of)))
                self._error_listener = error_listener
            tables.append(self.shard.snapshot(self.as_of))
            self._listener = listener
        if self._error_listener is not None:
            # Errors first: their upper is never behind the rows' (see storage.view_errors).
            for batch in self._error_listener.poll():
                if batch.updates.num_rows:
                    errors.append(error_frame(batch.updates))
        for batch in self._listener.poll():
            if batch.updates.num_rows:
                tables.append(batch.updates)
        upper = self._listener.frontier
        if self._error_listener is not None:
            upper = upper.meet(self._error_listener.frontier)
        return tables, errors, upper
