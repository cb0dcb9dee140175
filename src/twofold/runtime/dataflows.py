"""A dataflow as a runtime hosts it: the engine's `Dataflow` plus its inputs, sinks and state.

`HostedDataflow` owns the rendered engine dataflow, a `SourceFeed` per source import, the
resolver it uses for index imports (this runtime's own arrangements, or the publication registry
for the interactive runtime), its sink states, and the per-export compaction the controller has
allowed. A dataflow that cannot run — its plan does not type-check, an input was compacted past
its `as_of`, an imported index was dropped — is kept, marked `failed` with the reason, so reads
of its exports fail clearly and its drop still completes; it never takes the runtime down.
An error the engine did not expect in a step (a bug, not the data) is different: it raises
`DataflowFailure` naming the dataflow's exports, and the runtime fails with it (shared fate).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from twofold.engine import Arrangement, ArrangementSnapshot, Dataflow, EngineError
from twofold.protocol import (
    CopyToSink,
    DataflowDescription,
    Frontier,
    GlobalId,
    MaterializedViewSink,
    SubscribeSink,
)
from twofold.protocol.errors import DataflowFailure
from twofold.runtime.registry import PublicationClosed
from twofold.runtime.sinks import CopyToState, MaterializedViewState, SubscribeState
from twofold.runtime.sources import SourceFeed
from twofold.storage import Storage, StorageError
from twofold.storage.view_errors import error_part

log = logging.getLogger(__name__)

IndexResolver = Callable[[GlobalId], ArrangementSnapshot | None]
"""Current snapshot of an index this dataflow imports; `None` if not available yet; raises
`PublicationClosed` if it was dropped."""


def choose_as_of(desc: DataflowDescription, storage: Storage | None) -> int:
    """The dataflow's `as_of` time (the controller's, or the latest input `since` when absent)."""
    if desc.as_of is not None and desc.as_of.time is not None:
        return desc.as_of.time
    t = 0
    if storage is not None:
        for imp in desc.source_imports.values():
            errors = error_part(storage, imp.shard)  # read at the same as_of as the rows
            for shard in (storage.shard(imp.shard), *([errors] if errors else [])):
                t = max(t, shard.since.time or 0)
    return t


class HostedDataflow:
    """See the module docstring."""

    def __init__(
        self, desc: DataflowDescription, storage: Storage | None, resolve: IndexResolver,
    ) -> None:
        self.desc = desc
        self.resolve = resolve
        self.scheduled = False
        self.failed: str | None = None
        self.live_exports: set[GlobalId] = set(desc.export_ids())
        self.allowed: dict[GlobalId, Frontier] = {}
        self.subscribes: dict[GlobalId, SubscribeState] = {}
        self.mvs: dict[GlobalId, MaterializedViewState] = {}
        self.copy_tos: dict[GlobalId, CopyToState] = {}
        self.feeds: dict[GlobalId, SourceFeed] = {}
        self.df: Dataflow | None = None
        self.as_of = 0
        try:
            self.as_of = choose_as_of(desc, storage)
            self.df = Dataflow(desc, as_of=self.as_of)
            for arrangement in self.df.index_exports.values():
                # The runtime merges after it has reported a step's frontiers (`maintain`).
                arrangement.defer_merges()
            if desc.source_imports:
                if storage is None:
                    raise StorageError("no storage configured for source imports")
                for gid, imp in desc.source_imports.items():
                    self.feeds[gid] = SourceFeed(storage.shard(imp.shard), self.as_of,
                                                 error_part(storage, imp.shard))
            as_of = Frontier.at(self.as_of)
            for gid, sink in desc.sink_exports.items():
                conn = sink.connection
                if isinstance(conn, SubscribeSink):
                    self.subscribes[gid] = SubscribeState(gid, as_of, sink.up_to)
                elif isinstance(conn, MaterializedViewSink):
                    assert storage is not None, "materialized views need storage"
                    self.mvs[gid] = MaterializedViewState(gid, storage, conn.shard,
                                                          sink.from_desc, self.as_of)
                elif isinstance(conn, CopyToSink):
                    self.copy_tos[gid] = CopyToState(gid, conn, sink.from_desc, self.as_of)
        except (EngineError, StorageError, AssertionError) as e:
            self.fail(f"dataflow {desc.debug_name!r} cannot run: {e}")
        except Exception as e:  # building it raised (a bug): this dataflow fails, not the runtime
            log.exception("building dataflow %r raised", desc.debug_name)
            self.fail(f"dataflow {desc.debug_name!r} cannot be built: {type(e).__name__}: {e}")
        self._storage = storage
        if self.failed is not None:
            self._failed_sinks()

    def fail_built(self, reason: str) -> None:
        """Fail this dataflow before it ran (an input of it failed): its sinks answer too."""
        self.fail(reason)
        self._failed_sinks()

    def _failed_sinks(self) -> None:
        """The sink states a failed build did not get to: each sink answers with the failure
        (the worker's `_fail_sinks`), so none of their readers waits."""
        as_of = Frontier.at(self.as_of)
        for gid, sink in self.desc.sink_exports.items():
            conn = sink.connection
            if gid in self.subscribes or gid in self.mvs or gid in self.copy_tos:
                continue
            if isinstance(conn, SubscribeSink):
                self.subscribes[gid] = SubscribeState(gid, as_of, sink.up_to)
            elif isinstance(conn, CopyToSink):
                self.copy_tos[gid] = CopyToState(gid, conn, sink.from_desc, self.as_of)
            elif isinstance(conn, MaterializedViewSink) and self._storage is not None:
                try:
                    self.mvs[gid] = MaterializedViewState(gid, self._storage, conn.shard,
                                                          sink.from_desc, self.as_of)
                except (StorageError, ValueError) as e:
                    log.error("dataflow %r: view %s cannot hold its failure: %s",
                              self.desc.debug_name, gid, e)

    def fail(self, reason: str) -> None:
        if self.failed is None:
            log.error("%s", reason)
            self.failed = reason

    def inputs_upper(self) -> Frontier:
        """How far the source shards are complete (the meet of their uppers; just past the
        `as_of` with none to read), never before `as_of + 1`: how far a failed dataflow's
        views hold its failure."""
        upper = Frontier.empty()
        storage = self._storage
        if storage is not None:
            for imp in self.desc.source_imports.values():
                try:
                    upper = upper.meet(storage.shard(imp.shard).upper)
                except StorageError:
                    continue
        if upper.is_empty and not self.desc.source_imports:
            upper = Frontier.at(self.as_of + 1)
        return upper.join(Frontier.at(self.as_of + 1))

    # -- progress -------------------------------------------------------------------------------

    @property
    def frontier(self) -> Frontier:
        """How far every export is complete (`as_of` until the first step)."""
        if self.df is None or self.failed is not None:
            return Frontier.at(self.as_of)
        return self.df.frontier

    def input_frontier(self) -> Frontier:
        """The meet of the inputs' uppers, never reported below `as_of`."""
        if self.df is None or self.failed is not None:
            return Frontier.at(self.as_of)
        return self.df.input_frontier().join(Frontier.at(self.as_of))

    @property
    def finished(self) -> bool:
        """Reached its `until`: it will never read its inputs again."""
        return self.desc.until.less_equal(self.frontier)

    def feed(self) -> None:
        """Hand the engine everything its inputs have now (never waits)."""
        df = self.df
        if df is None or self.failed is not None or not self.scheduled or self.finished:
            return
        try:
            for gid, feed in self.feeds.items():
                tables, errors, upper = feed.poll()
                for table in tables:
                    df.push(gid, table)
                for frame in errors:
                    df.push_errors(gid, frame)
                if upper is not None:
                    df.advance_source(gid, upper)
            for gid in self.desc.index_imports:
                snap = self.resolve(gid)
                if snap is not None:
                    df.update_index(gid, snap)
        except PublicationClosed as e:
            self.fail(f"dataflow {self.desc.debug_name!r}: imported {e}")
        except (EngineError, StorageError) as e:
            self.fail(f"dataflow {self.desc.debug_name!r}: {e}")
        except Exception as e:
            raise self.unexpected(e) from e

    def step(self) -> bool:
        """Run every complete time; True if the frontier advanced."""
        if self.df is None or self.failed is not None or not self.scheduled:
            return False
        try:
            return self.df.step()
        except EngineError as e:
            self.fail(f"dataflow {self.desc.debug_name!r}: {e}")
            return False
        except Exception as e:
            raise self.unexpected(e) from e

    def unexpected(self, e: Exception) -> DataflowFailure:
        """An error the engine did not expect (a bug, not the data): the runtime fails with it
        (shared fate), naming this dataflow so the controller can tell a failure that repeats."""
        return DataflowFailure(self.desc.export_ids(), self.desc.debug_name,
                               f"{type(e).__name__}: {e}")

    def maintain(self) -> list[GlobalId]:
        """Do the merges the index exports deferred; the exports whose batches changed."""
        if self.df is None or self.failed is not None:
            return []
        try:
            return [gid for gid, arr in self.df.index_exports.items()
                    if gid in self.live_exports and arr.maintain()]
        except Exception as e:
            raise self.unexpected(e) from e

    def export(self, gid: GlobalId) -> Arrangement | None:
        if self.df is None or gid not in self.desc.index_exports:
            return None
        return self.df.export(gid)

    def import_holds(self) -> dict[GlobalId, Frontier]:
        if self.df is None or self.failed is not None:
            return {gid: Frontier.at(self.as_of) for gid in self.desc.index_imports}
        return self.df.import_holds()
