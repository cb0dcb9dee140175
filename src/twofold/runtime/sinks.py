"""Sink exports: subscribes, materialized views and copy-tos, fed by a dataflow's `SinkChunk`s.

Each sink is a small state machine over the contiguous chunks its dataflow produces:

- `SubscribeState` turns chunks into contiguous, increasing `SubscribeBatch`es and ends exactly
  once: a batch whose upper is empty (the input closed or `up_to` was reached), or
  `SubscribeDroppedAt` when the controller drops it. Nothing follows the end.
- `MaterializedViewState` self-corrects: it holds the difference between what its shard (and
  the shard's error part, which holds the view's evaluation errors) holds and what the view
  should hold, and from `AllowWrites` on writes that difference by compare-and-append, errors
  first, so a restart, a second replica (another writer of the shard) or a re-created view
  never duplicates or loses rows or errors.
- `CopyToState` collects the collection at the dataflow's `as_of` and writes the file once, giving
  exactly one `CopyToResponse` (a count, an error, or `CopyToDropped`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from twofold.engine import SinkChunk
from twofold.engine.consolidation import consolidate as consolidate_frame
from twofold.engine.frames import DIFF, ERROR, TIME, to_arrow
from twofold.engine.ordering import order_frame
from twofold.protocol import (
    CopyToDropped,
    CopyToError,
    CopyToResponse,
    CopyToRowCount,
    CopyToSink,
    Frontier,
    GlobalId,
    RelationDesc,
    SubscribeBatch,
    SubscribeDroppedAt,
    SubscribeResponse,
)
from twofold.storage import Shard, Storage, UnknownShard, UpperMismatch, consolidate
from twofold.storage.updates import advance_times, empty_updates
from twofold.storage.view_errors import ERRORS_DESC, ensure_error_shard

log = logging.getLogger(__name__)


def _first_error(chunk_errors: pl.DataFrame) -> str | None:
    """The smallest error message with a positive net count, if any."""
    if chunk_errors.height == 0:
        return None
    net = chunk_errors.group_by("error").agg(pl.col(DIFF).sum()).filter(pl.col(DIFF) != 0)
    if net.height == 0:
        return None
    return str(net["error"].min())


class SubscribeState:
    """A running subscribe. See the module docstring."""

    def __init__(self, id: GlobalId, as_of: Frontier, up_to: Frontier | None = None) -> None:
        self.id = id
        self.lower = as_of
        """Every update before this has been delivered."""
        self.up_to = Frontier.empty() if up_to is None else up_to
        """The subscribe ends once `lower` reaches this (`empty`: it never ends by itself)."""
        self.ended = False

    def on_chunks(self, chunks: list[SinkChunk]) -> list[SubscribeResponse]:
        out: list[SubscribeResponse] = []
        for chunk in chunks:
            if self.ended or not self.lower < chunk.upper:
                continue
            error = _first_error(chunk.errors)
            if error is not None:
                batch = SubscribeBatch(self.lower, chunk.upper, error=error)
            else:
                data = chunk.updates
                cols = [c for c in data.columns if c not in (TIME, DIFF)]
                # Consolidated as the engine's arrangements are, by stored identity (floats
                # by bits): a retraction of -0.0 and an insertion of 0.0 are two updates.
                data = order_frame(consolidate_frame(data, [TIME, *cols]), (), len(cols),
                                   first=[TIME])
                updates = [(int(r[0]), list(r[1:-1]), int(r[-1])) for r in data.iter_rows()]
                batch = SubscribeBatch(self.lower, chunk.upper, updates=updates)
            out.append(SubscribeResponse(self.id, batch))
            self.lower = chunk.upper
            if chunk.upper.is_empty:
                self.ended = True
        # `up_to` reached: only once every update before it has been delivered (`lower` is the
        # upper of the chunks seen, not the dataflow's frontier, which starts at `as_of` and may
        # sit there — unscheduled, or waiting for its inputs — before any chunk arrives).
        if not self.ended and not self.up_to.is_empty and self.up_to.less_equal(self.lower):
            self.ended = True
            out.append(SubscribeResponse(self.id, SubscribeBatch(self.lower, Frontier.empty(),
                                                                 updates=[])))
        return out

    def drop(self) -> list[SubscribeResponse]:
        if self.ended:
            return []
        self.ended = True
        return [SubscribeResponse(self.id, SubscribeDroppedAt(self.lower))]


class _CorrectedShard:
    """One self-correcting shard of a materialized view (its rows, or its error part).

    Theory of operation (Materialize's persist sink "correction"). It holds `correction`: the
    updates by which the shard differs from what it should hold — the dataflow's output
    (desired) minus what the shard holds (persisted). At the first write it subtracts the
    shard's contents at its upper; whenever the shard's upper moved without this sink (another
    replica, another process, an earlier life of this view) it subtracts what that writer
    appended. A write at `[u, w)` appends every correction update before `w`, times before `u`
    advanced to `u`, so after it the shard holds exactly the desired contents at every time
    from `max(u, as_of)` on, whatever it held before (a dataflow starting after the shard's
    upper leaves the times in between at the contents last written): a restart, a second
    replica or a shard written by a previous definition never duplicates or loses rows.
    """

    def __init__(self, shard: Shard, desc: RelationDesc, as_of: int) -> None:
        self.shard = shard
        self.as_of = as_of
        self.correction: pa.Table = empty_updates(desc)
        self.persisted_upper: Frontier | None = None
        """The shard's upper `correction` accounts for (`None`: not read yet)."""
        self._compacted_rows = 0

    def add(self, updates: pa.Table) -> None:
        schema = self.correction.schema
        if updates.schema != schema:
            updates = updates.select(schema.names).cast(schema)
        self.correction = pa.concat_tables([self.correction, updates])

    def _subtract(self, persisted: pa.Table) -> None:
        if persisted.num_rows:
            self.add(persisted.set_column(
                persisted.schema.get_field_index(DIFF), persisted.schema.field(DIFF),
                pc.negate(persisted.column(DIFF))))

    def _observe_shard(self) -> Frontier:
        """Account in `correction` for whatever the shard gained since last seen; its upper."""
        actual = self.shard.upper
        seen = self.persisted_upper
        if seen == actual:
            return actual
        if actual.time is not None and actual.time > 0:
            if seen is None or seen.time in (None, 0):
                # Placed at the as_of: if the dataflow starts after the shard's upper, the
                # times in between keep the contents last written (the view was not maintained
                # then), rather than reading as empty.
                self._subtract(advance_times(self.shard.snapshot(actual.time - 1), self.as_of))
            else:
                assert seen.time is not None
                for batch in self.shard.listen(seen.time - 1).poll():
                    if not actual.less_equal(batch.lower):
                        self._subtract(batch.updates)
        self.persisted_upper = actual
        return actual

    def flush(self, desired_upper: Frontier) -> None:
        """Write the correction before `desired_upper`; afterwards the shard's upper is at or
        past it (this sink wrote it, or another writer got further)."""
        while True:
            current = self._observe_shard()
            if current.time is None or desired_upper.less_equal(current):
                # Behind another writer: what both wrote cancels out once consolidated.
                if self.correction.num_rows > 2 * self._compacted_rows + 4096:
                    self.correction = consolidate(self.correction)
                    self._compacted_rows = self.correction.num_rows
                return
            lower = current.time
            target = desired_upper
            corr = self.correction
            if target.time is None:
                now, rest = corr, corr.slice(0, 0)
            else:
                before = pc.less(corr.column(TIME), pa.scalar(target.time, pa.uint64()))
                now, rest = corr.filter(before), corr.filter(pc.invert(before))
            write = advance_times(now, lower)
            try:
                self.shard.compare_and_append(write, current, target)
            except UpperMismatch:
                continue  # another writer got there first: account for it and retry
            self.correction = consolidate(rest) if rest.num_rows else rest
            self._compacted_rows = self.correction.num_rows
            self.persisted_upper = target


class MaterializedViewState:
    """A materialized-view sink writing its rows into `shard` and its evaluation errors into the
    shard's error part (`storage.view_errors`), each self-correcting (`_CorrectedShard`).

    An error does not stop the sink: it is written at its time, with its multiplicity, and
    retracted when its rows retract, so a reader of the view fails at exactly the times the
    view's query fails and recovers with it. From `AllowWrites` on, every flush writes the error
    part first and the rows second, both to the dataflow's frontier: the error part is never
    behind the rows, and a reader (which reads the meet of their uppers) never sees rows at a
    time whose errors it has not seen.
    """

    def __init__(self, id: GlobalId, storage: Storage, shard_id: str, desc: RelationDesc,
                 as_of: int = 0) -> None:
        self.id = id
        self.desc = desc
        self.as_of = as_of
        """The dataflow's as_of: its output says nothing about earlier times."""
        self.allowed = False
        try:
            shard: Shard = storage.shard(shard_id)
        except UnknownShard:
            shard = storage.create_shard(shard_id, desc)
        self.rows = _CorrectedShard(shard, desc, as_of)
        self.errors = _CorrectedShard(ensure_error_shard(storage, shard_id), ERRORS_DESC, as_of)
        self.desired_upper = Frontier.minimum()
        """The dataflow's output is complete before this."""
        self.failed = False
        """`fail` wrote the dataflow's failure as the view's error."""

    @property
    def shard(self) -> Shard:
        return self.rows.shard

    def fail(self, reason: str, upper: Frontier) -> None:
        """The view's dataflow cannot run here: from its `as_of` on the view holds no rows and
        the error `reason`, written (after `AllowWrites`) as far as its inputs are complete
        (`upper`), so its readers fail with it at once instead of waiting for rows that never
        come. A replica that does build the view corrects it away like any other error."""
        if not self.failed:
            self.failed = True
            self.errors.add(pa.table({ERROR: pa.array([reason], pa.string()),
                                      TIME: pa.array([self.as_of], pa.uint64()),
                                      DIFF: pa.array([1], pa.int64())}))
        self.desired_upper = self.desired_upper.join(upper)
        self.flush()

    @property
    def upper(self) -> Frontier:
        """How far the view is readable: the meet of its rows' and its errors' uppers."""
        return self.rows.shard.upper.meet(self.errors.shard.upper)

    def on_chunks(self, chunks: list[SinkChunk]) -> None:
        for chunk in chunks:
            if chunk.updates.height:
                self.rows.add(to_arrow(chunk.updates, self.desc))
            if chunk.errors.height:
                self.errors.add(chunk.errors.select(ERROR, TIME, DIFF).to_arrow())
            self.desired_upper = chunk.upper
        if self.allowed:
            self.flush()

    def allow_writes(self) -> None:
        self.allowed = True
        self.flush()

    def flush(self) -> None:
        if not self.allowed:
            return
        self.errors.flush(self.desired_upper)  # errors first: see the class docstring
        self.rows.flush(self.desired_upper)


class CopyToState:
    """A one-shot copy-to sink. See the module docstring."""

    def __init__(self, id: GlobalId, sink: CopyToSink, desc: RelationDesc, as_of: int) -> None:
        self.id = id
        self.sink = sink
        self.desc = desc
        self.as_of = as_of
        self.frames: list[pl.DataFrame] = []
        self.done = False

    def on_chunks(self, chunks: list[SinkChunk]) -> list[CopyToResponse]:
        if self.done:
            return []
        for chunk in chunks:
            error = _first_error(chunk.errors.filter(pl.col(TIME) <= self.as_of))
            if error is not None:
                return self._finish(CopyToError(error))
            self.frames.append(chunk.updates.filter(pl.col(TIME) <= self.as_of))
            if not chunk.upper.less_equal(Frontier.at(self.as_of)):
                return self._write()
        return []

    def _write(self) -> list[CopyToResponse]:
        cols = [f"c{i}" for i in range(self.desc.arity)]
        if self.frames:
            data = pl.concat(self.frames, how="vertical")
        else:
            data = pl.DataFrame({c: [] for c in [*cols, TIME, DIFF]})
        # By stored identity, as the engine consolidates: -0.0 and 0.0 are written as they are.
        net = consolidate_frame(data, cols) if cols else data.select(pl.col(DIFF).sum())
        if (net[DIFF] < 0).any():
            return self._finish(CopyToError("copy-to: collection has negative multiplicities"))
        rows = net.filter(pl.col(DIFF) > 0)
        expanded = rows.select(pl.all().repeat_by(pl.col(DIFF)).explode()).drop(DIFF) if cols \
            else pl.DataFrame()
        table: pa.Table = to_arrow(expanded, self.desc) if cols else pa.table({})
        try:
            path = Path(self.sink.path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if self.sink.format == "csv":
                pacsv.write_csv(table, path)
            else:
                pq.write_table(table, path)
        except Exception as e:  # an unwritable path is the user's error, not the replica's
            return self._finish(CopyToError(f"copy-to {self.sink.path}: {e}"))
        return self._finish(CopyToRowCount(int(table.num_rows)))

    def drop(self) -> list[CopyToResponse]:
        return [] if self.done else self._finish(CopyToDropped())

    def _finish(self, result: CopyToError | CopyToRowCount | CopyToDropped) -> list[
            CopyToResponse]:
        self.done = True
        self.frames.clear()
        return [CopyToResponse(self.id, result)]
