"""A rendered dataflow, driven one frontier step at a time.

`Dataflow(desc, index_imports)` type-checks a `DataflowDescription` and renders its
`objects_to_build`. The driver feeds imports and steps it:

- source imports: `push(id, updates)` (times at or beyond the input's upper), `push_errors(id,
  errors)` (a source's error collection: a materialized view's persisted errors) and
  `advance_source(id, upper)`;
- index imports: `update_index(id, snapshot)` with ever newer immutable snapshots (from this
  runtime's arrangements or another runtime's publication). The dataflow first reads the
  snapshot at `as_of`, then only the updates in `[consumed, upper)`; `import_holds()` says how
  far each imported arrangement may be compacted meanwhile (to the last time consumed).
- `step()` takes the meet `U` of all input uppers; every update at a time in `[frontier, U)` is
  complete, so it runs the operators one time at a time, in time order, and advances every
  export to `U`. Updates before `as_of` are advanced to it; updates at times in `until` are
  suppressed.

Index exports are `Arrangement`s (data plus error collection); sink exports accumulate
`SinkChunk`s for the driver to drain. Invariant: an export's upper is exactly the dataflow's
frontier, which is exactly as far as every input allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from twofold.engine.arrangement import Arrangement, Updates, as_update_frame
from twofold.engine.consolidation import consolidate
from twofold.engine.errors import InputError, PlanError
from twofold.engine.frames import DIFF, ERROR, TIME, empty, error_schema, update_schema
from twofold.engine.operator import EMPTY_ERRORS, Delta, Operator, empty_delta
from twofold.engine.render import Renderer
from twofold.engine.snapshot import ArrangementSnapshot
from twofold.engine.typecheck import typecheck_dataflow
from twofold.protocol import DataflowDescription, Frontier, GlobalId, RelationDesc

_EMPTY_ERROR_UPDATES = empty(error_schema())


@dataclass(frozen=True, slots=True)
class SinkChunk:
    """A sink export's updates (`c*`, `time`, `diff`) and errors (`error`, `time`, `diff`) at
    times in `[lower, upper)`; chunks of one sink are contiguous."""

    lower: Frontier
    upper: Frontier
    updates: pl.DataFrame
    errors: pl.DataFrame


@dataclass
class _Source:
    desc: RelationDesc
    upper: Frontier = field(default_factory=Frontier.minimum)
    pending: list[pl.DataFrame] = field(default_factory=list)
    pending_errors: list[pl.DataFrame] = field(default_factory=list)


@dataclass
class _IndexInput:
    desc: RelationDesc
    snapshot: ArrangementSnapshot | None = None
    consumed: int | None = None  # every update before this time has been read


class Dataflow:
    """A rendered `DataflowDescription`; single-threaded, driven by a runtime."""

    def __init__(
        self,
        desc: DataflowDescription,
        index_imports: Mapping[GlobalId, ArrangementSnapshot] | None = None,
        *,
        as_of: int | None = None,
    ) -> None:
        """`as_of` overrides a description without one (`desc.as_of is None`: the driver
        chose it, e.g. from its inputs' sinces); otherwise it is `desc.as_of`, or 0."""
        snaps = dict(index_imports or {})
        unknown = set(snaps) - set(desc.index_imports)
        if unknown:
            raise PlanError(
                f"dataflow {desc.debug_name!r}: snapshots for ids it does not "
                f"import: {sorted(unknown)}"
            )
        self.desc = desc
        self.known = typecheck_dataflow(desc)
        if desc.as_of is not None:
            start = desc.as_of
        else:
            start = Frontier.at(as_of) if as_of is not None else Frontier.minimum()
        self.as_of = start.time if start.time is not None else 0
        self.until = desc.until
        self._frontier = start
        self._started = False
        self._sources = {gid: _Source(s.desc) for gid, s in desc.source_imports.items()}
        self._indexes = {gid: _IndexInput(i.relation) for gid, i in desc.index_imports.items()}
        for gid, snap in snaps.items():
            self.update_index(gid, snap)
        # One renderer per dataflow: subplans shared. A single-time dataflow (a peek's: until
        # is as_of + 1) steps as_of only, so its operators need no keyed state.
        renderer = Renderer(self.known, self.as_of,
                            single_time=self.until.time == self.as_of + 1)
        self._ops: list[tuple[GlobalId, Operator]] = [
            (b.id, renderer.top(b.plan)) for b in desc.objects_to_build
        ]
        self._exports = {
            gid: Arrangement(rel, idx.key, since=start)
            for gid, (idx, rel) in desc.index_exports.items()
        }
        self._sinks: dict[GlobalId, list[SinkChunk]] = {gid: [] for gid in desc.sink_exports}
        self._empties: dict[GlobalId, pl.DataFrame] = {}
        self._empty_deltas: dict[GlobalId, pl.DataFrame] = {}

    # --- inputs -------------------------------------------------------------------------------

    def push(self, source_id: GlobalId, updates: Updates) -> None:
        """Queue updates of a source import; their times must be at or beyond its upper."""
        src = self._source(source_id)
        frame = as_update_frame(src.desc, updates)
        if frame.height:
            _check_after(source_id, src, frame, "update")
            src.pending.append(frame)

    def push_errors(self, source_id: GlobalId, errors: pl.DataFrame) -> None:
        """Queue error updates (`error`, `time`, `diff`) of a source import; their times must be
        at or beyond its upper. They enter the dataflow's error collection at their times."""
        src = self._source(source_id)
        if errors.height == 0:
            return
        try:
            frame = errors.select(ERROR, TIME, DIFF).cast(error_schema())  # type: ignore[arg-type]
        except Exception as e:  # polars raises several types for mistyped columns
            raise InputError(f"{source_id}: error updates do not match {error_schema()}: {e}") \
                from None
        _check_after(source_id, src, frame, "error")
        src.pending_errors.append(frame)

    def advance_source(self, source_id: GlobalId, upper: Frontier) -> None:
        """Declare every update of the source at a time not in `upper` pushed."""
        src = self._source(source_id)
        if not src.upper.less_equal(upper):
            raise InputError(f"{source_id}: upper would regress from {src.upper} to {upper}")
        src.upper = upper

    def update_index(self, index_id: GlobalId, snapshot: ArrangementSnapshot) -> None:
        """Hand the dataflow a newer snapshot of an imported index."""
        if index_id not in self._indexes:
            raise InputError(f"{index_id} is not an index import of {self.desc.debug_name!r}")
        inp = self._indexes[index_id]
        if inp.snapshot is not None and not inp.snapshot.upper.less_equal(snapshot.upper):
            raise InputError(
                f"{index_id}: snapshot upper regresses from "
                f"{inp.snapshot.upper} to {snapshot.upper}"
            )
        if inp.consumed is None and not snapshot.since.less_equal(Frontier.at(self.as_of)):
            raise InputError(
                f"{index_id}: since {snapshot.since} is beyond the dataflow's as_of {self.as_of}"
            )
        inp.snapshot = snapshot

    def import_holds(self) -> dict[GlobalId, Frontier]:
        """Per index import, the frontier its arrangement may be compacted to (no further)."""
        return {
            gid: Frontier.at(
                self.as_of if inp.consumed is None else max(self.as_of, inp.consumed - 1)
            )
            for gid, inp in self._indexes.items()
        }

    def _source(self, gid: GlobalId) -> _Source:
        if gid not in self._sources:
            raise InputError(f"{gid} is not a source import of {self.desc.debug_name!r}")
        return self._sources[gid]

    # --- progress ------------------------------------------------------------------------------

    @property
    def frontier(self) -> Frontier:
        """Every export is complete for times not in this frontier."""
        return self._frontier

    def input_frontier(self) -> Frontier:
        """The meet of every input's upper (`empty` when there are no inputs)."""
        upper = Frontier.empty()
        for src in self._sources.values():
            upper = upper.meet(src.upper)
        for inp in self._indexes.values():
            # `is not None`: an empty snapshot has len 0, and an empty index still advances.
            snap = inp.snapshot
            upper = upper.meet(snap.upper if snap is not None else Frontier.minimum())
        return upper

    def step(self) -> bool:
        """Process every complete time; True if the frontier advanced."""
        upper = self.input_frontier()
        lower = self._frontier
        if not lower < upper:
            return False
        lo = lower.time
        assert lo is not None
        inputs = self._take_inputs(upper)
        times = sorted({t for d, e in inputs.values() for f in (d, e) for t in _times(f)})
        if not self._started:
            self._started = True
            if self.as_of not in times and not self.until.contains(self.as_of):
                times.insert(0, self.as_of)
        outputs: dict[GlobalId, list[tuple[pl.DataFrame, pl.DataFrame]]] = {}
        wanted = {idx.on_id for idx, _ in self.desc.index_exports.values()} | {
            s.from_id for s in self.desc.sink_exports.values()
        }
        parts = {gid: (_by_time(d), _by_time(e)) for gid, (d, e) in inputs.items()}
        for t in times:
            deltas: dict[GlobalId, Delta] = {}
            for gid, (dp, ep) in parts.items():
                d = dp.get(t)
                e = ep.get(t)
                deltas[gid] = (
                    d if d is not None else self._empty_delta(gid),
                    e if e is not None else EMPTY_ERRORS,
                )
            for gid, op in self._ops:
                deltas[gid] = op.step(t, deltas)
            for gid in wanted:
                d, e = deltas[gid]
                if d.height or e.height:
                    outputs.setdefault(gid, []).append((_at_time(d, t), _at_time(e, t)))
        for gid, (idx, rel) in self.desc.index_exports.items():
            data, errs = self._gather(outputs.get(idx.on_id, []), rel)
            self._exports[gid].insert(data, upper, errors=errs)
        for gid, sink in self.desc.sink_exports.items():
            data, errs = self._gather(outputs.get(sink.from_id, []), sink.from_desc)
            drop = [] if sink.with_snapshot else [pl.col(TIME) != self.as_of]
            if not sink.up_to.is_empty:
                drop.append(pl.col(TIME) < sink.up_to.time)
            if drop:
                data, errs = data.filter(*drop), errs.filter(*drop)
            # Subscribers expect consolidated updates; operator outputs need not be.
            data = consolidate(data, [*data.columns[:-2], TIME])
            errs = consolidate(errs, [ERROR, TIME])
            self._sinks[gid].append(SinkChunk(lower, upper, data, errs))
        self._frontier = upper
        return True

    def _gather(
        self, parts: list[tuple[pl.DataFrame, pl.DataFrame]], rel: RelationDesc
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        if not parts:
            return empty(update_schema(rel.types)), empty(error_schema())
        data = _concat([d for d, _ in parts])
        errs = _concat([e for _, e in parts])
        sch = update_schema(rel.types)
        if dict(data.schema) != sch:
            data = data.cast(sch)  # type: ignore[arg-type]
        return data, errs

    def _take_inputs(self, upper: Frontier) -> dict[GlobalId, tuple[pl.DataFrame, pl.DataFrame]]:
        """Remove and return every input update at a time before `upper`, advanced to `as_of`
        and with times in `until` dropped."""
        out: dict[GlobalId, tuple[pl.DataFrame, pl.DataFrame]] = {}
        ut = upper.time
        for gid, src in self._sources.items():
            frames = src.pending
            data = _concat(frames) if frames else self._empty_updates(gid, src.desc)
            if ut is not None and data.height and _tmax(data) >= ut:
                ready = data.filter(pl.col(TIME) < ut)
                rest = data.filter(pl.col(TIME) >= ut)
                src.pending = [rest] if rest.height else []
            else:
                ready, src.pending = data, []
            errs = _EMPTY_ERROR_UPDATES
            if src.pending_errors:
                errs = _concat(src.pending_errors)
                src.pending_errors = []
                if ut is not None and _tmax(errs) >= ut:
                    later = errs.filter(pl.col(TIME) >= ut)
                    errs = errs.filter(pl.col(TIME) < ut)
                    src.pending_errors = [later] if later.height else []
                errs = self._window(errs)
            out[gid] = (self._window(ready), errs)
        for gid, inp in self._indexes.items():
            snap = inp.snapshot
            assert snap is not None  # the input frontier is minimum until a snapshot arrives
            parts: list[tuple[pl.DataFrame, pl.DataFrame]] = []
            if inp.consumed is None:
                parts.append(snap.updates_through(self.as_of))
                inp.consumed = self.as_of + 1
            if ut is None or inp.consumed < ut:
                parts.append(snap.updates_between(inp.consumed, upper))
            inp.consumed = ut if ut is not None else inp.consumed
            data = pl.concat([d for d, _ in parts], how="vertical")
            errs = pl.concat([e for _, e in parts], how="vertical")
            out[gid] = (self._window(data), self._window(errs))
        return out

    def _empty_updates(self, gid: GlobalId, desc: RelationDesc) -> pl.DataFrame:
        # Frames are never mutated in place, so one empty frame per input serves every step
        # (building one costs tens of microseconds).
        if gid not in self._empties:
            self._empties[gid] = empty(update_schema(desc.types))
        return self._empties[gid]

    def _empty_delta(self, gid: GlobalId) -> pl.DataFrame:
        if gid not in self._empty_deltas:
            self._empty_deltas[gid] = empty_delta(self.known[gid].types)[0]
        return self._empty_deltas[gid]

    def _window(self, frame: pl.DataFrame) -> pl.DataFrame:
        if frame.height == 0:
            return frame
        times = frame.get_column(TIME).to_numpy()
        # Each polars pass costs far more than the numpy check that usually makes it moot.
        if int(times.min()) < self.as_of:
            frame = frame.with_columns(
                pl.when(pl.col(TIME) < self.as_of)
                .then(pl.lit(self.as_of, pl.UInt64))
                .otherwise(pl.col(TIME))
                .alias(TIME)
            )
        until = self.until.time
        if until is not None and int(times.max()) >= until:
            frame = frame.filter(pl.col(TIME) < until)
        return frame

    # --- exports -------------------------------------------------------------------------------

    def export(self, export_id: GlobalId) -> Arrangement:
        """The arrangement of an index export."""
        if export_id not in self._exports:
            raise KeyError(f"{export_id} is not an index export of {self.desc.debug_name!r}")
        return self._exports[export_id]

    @property
    def index_exports(self) -> dict[GlobalId, Arrangement]:
        return dict(self._exports)

    def drain_sink(self, sink_id: GlobalId) -> list[SinkChunk]:
        """Remove and return the chunks a sink export produced since the last drain."""
        if sink_id not in self._sinks:
            raise KeyError(f"{sink_id} is not a sink export of {self.desc.debug_name!r}")
        chunks, self._sinks[sink_id] = self._sinks[sink_id], []
        return chunks

    def allow_compaction(self, export_id: GlobalId, since: Frontier) -> None:
        """Compact an index export to `since` (never regresses)."""
        self.export(export_id).compact(since)


def _check_after(source_id: GlobalId, src: _Source, frame: pl.DataFrame, what: str) -> None:
    tmin = frame[TIME].min()
    assert isinstance(tmin, int)
    if not src.upper.contains(tmin):
        raise InputError(f"{source_id}: {what} at {tmin} is before the input's upper {src.upper}")


def _concat(frames: list[pl.DataFrame]) -> pl.DataFrame:
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


def _tmax(frame: pl.DataFrame) -> int:
    return int(frame.get_column(TIME).to_numpy().max())


def _times(frame: pl.DataFrame) -> list[int]:
    """The distinct times of an update frame."""
    if frame.height == 0:
        return []
    times = frame.get_column(TIME).to_numpy()
    lo, hi = int(times.min()), int(times.max())
    return [lo] if lo == hi else [int(t) for t in np.unique(times)]


def _by_time(frame: pl.DataFrame) -> dict[int, pl.DataFrame]:
    """An update frame's rows by time, without the `time` column."""
    times = _times(frame)
    if not times:
        return {}
    if len(times) == 1:
        return {times[0]: frame.drop(TIME)}
    return {
        int(t): part.drop(TIME) for (t,), part in frame.partition_by(TIME, as_dict=True).items()
    }


def _at_time(frame: pl.DataFrame, t: int) -> pl.DataFrame:
    """A collection or error frame as updates at `t` (`time` before `diff`)."""
    cols = [frame.get_column(c) for c in frame.columns if c != DIFF]
    times = pl.Series(TIME, np.full(frame.height, t, np.uint64))
    return pl.DataFrame([*cols, times, frame.get_column(DIFF)])
