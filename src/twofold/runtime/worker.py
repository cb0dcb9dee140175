"""The compute runtime's state machine, in three roles (`spec/runtime.md`).

`ComputeWorker` applies commands and does one round of work per `step`, on its runtime's thread
(`thread.RuntimeClient` drives it). It meets every obligation of `spec/protocol.md` §5:

- dataflows over source shards and index imports, started by `Schedule`; index exports report
  frontiers that never regress, start at `as_of`, and end with `empty()` after a drop;
- peeks wait for `upper`, fail before `since`, get exactly one response (`PeekBook`);
- subscribes, materialized views (written only after `AllowWrites`), copy-tos (`sinks.py`);
- `UpdateConfiguration` applies globally; introspection indexes from `CreateInstance`.

Roles:
- `solo` does all of it alone, on one ordered command stream.
- `maintenance` hosts what the multiplexer routes to it and **publishes** every index it maintains
  into the registry; it compacts a published index to the meet of the controller's frontier, the
  interactive runtime's standing hold (I1c) and its own local importers' needs.
- `interactive` hosts peek dataflows and serves every peek, reading maintained indexes only
  through the registry (waiting, woken, for ids not yet published; `PeekError` for dropped ones).
  An `AllowCompaction` for an id it does not host is a standing-hold update and nothing else.

Bad input never crashes the worker: an unrenderable dataflow is kept as failed (reads of it
error), a peek that cannot be evaluated is answered with `PeekError`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Literal

from twofold.engine import Arrangement, ArrangementSnapshot
from twofold.engine import peek as engine_peek
from twofold.engine.peek import peek_each
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeResponse,
    CopyToError,
    CopyToResponse,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    GlobalId,
    Hello,
    IndexTarget,
    InitializationComplete,
    MapFilterProject,
    Peek,
    PeekError,
    PeekResponse,
    Row,
    RowSetFinishing,
    Schedule,
    StorageTarget,
    SubscribeBatch,
    SubscribeResponse,
    UpdateConfiguration,
)
from twofold.protocol.errors import DataflowFailure
from twofold.protocol.responses import engine_peek_rows
from twofold.runtime.dataflows import HostedDataflow
from twofold.runtime.frontiers import FrontierReporter
from twofold.runtime.introspection import Introspection, ReplicaMetrics
from twofold.runtime.peeks import (
    PeekBook,
    PendingPeek,
    Waiting,
    answer_from_snapshot,
    storage_snapshot,
)
from twofold.runtime.registry import PublicationClosed, PublicationRegistry
from twofold.storage import Storage, StorageError

log = logging.getLogger(__name__)

Role = Literal["solo", "maintenance", "interactive"]
StorageOpener = Callable[[str | None], Storage]

POLL_INTERVAL = 0.005
"""How often a runtime with live source imports re-reads its shards' uppers (seconds)."""

IDLE_SKIP_MAX = 0.1
"""The longest a runtime skips steps for (`ComputeWorker.skip_idle_step`): past it, it steps
anyway. Only a bound on a skip that should not have been (a step's inputs the skip check does
not see); nothing known needs it."""

INLINE_LOOKUP_KEYS = 64
"""`answer_now` answers index lookups of at most this many keys (cheap enough to answer on the
thread that received them); anything larger goes to the runtime's thread."""


class ComputeWorker:
    """One compute runtime's state. See the module docstring."""

    def __init__(
        self, role: Role, *, open_storage: StorageOpener,
        registry: PublicationRegistry[ArrangementSnapshot] | None = None,
        metrics: ReplicaMetrics | None = None, poll_interval: float = POLL_INTERVAL,
    ) -> None:
        if role != "solo" and registry is None:
            raise ValueError(f"role {role!r} needs a publication registry")
        self.role: Role = role
        self.open_storage = open_storage
        self.registry = registry
        self.metrics = metrics or ReplicaMetrics()
        self.poll_interval = poll_interval
        self.storage: Storage | None = None
        self._token_of: Callable[[], Hashable] | None = None  # the storage's change token
        self.max_result_size: int | None = None
        self.dyncfg: dict[str, bool | int | float | str] = {}
        self.dataflows: dict[GlobalId, HostedDataflow] = {}  # by every export id
        self.order: list[HostedDataflow] = []  # creation order = dependency order
        self.introspection: Introspection | None = None
        self.intro_allowed: dict[GlobalId, Frontier] = {}
        self.peeks = PeekBook()
        self.reporter = FrontierReporter()
        self.published: dict[GlobalId, tuple[Frontier, Frontier]] = {}
        self.failed_published: set[GlobalId] = set()
        self.out: list[ComputeResponse] = []
        self.step_count = 0
        self.last_step_seconds = 0.0
        self.polled_at = -float("inf")  # time.monotonic() at the last step's start (its poll)
        self._dirty: deque[GlobalId] = deque()
        # `skip_idle_step`: the storage's change token taken before the last step, if that step
        # changed nothing (else None), and when that step started.
        self._quiet_token: Hashable | None = None
        self._stepped_at = 0.0
        self._publishes = 0  # publications and tombstones made, ever
        self._activate: Callable[[], None] = lambda: None
        if registry is not None and role == "interactive":
            registry.add_reader_waker(self._on_published)
        if registry is not None and role == "maintenance":
            registry.add_hold_waker(self._on_published)

    def set_activator(self, activate: Callable[[], None]) -> None:
        """How the registry's wakers reach this worker's loop."""
        self._activate = activate

    def _on_published(self, gid: GlobalId) -> None:
        # Runs on the other runtime's thread: record and wake, nothing else.
        if self.role == "interactive" and not self.peeks and not self.order:
            # Nothing here waits for a publication: no pending peek, no peek dataflow. (A peek
            # joins the book before its first attempt reads the registry, and a dataflow joins
            # `order` before it steps, so one that arrives meanwhile sees this publication.)
            # Waking anyway would cost the publisher's thread an interpreter-lock handoff per
            # publication — on the front's event loop, the read path.
            return
        self._dirty.append(gid)
        self._activate()

    # -- commands ----------------------------------------------------------------------------------

    def handle(self, command: ComputeCommand) -> None:
        self._quiet_token = None  # any command may give the next step work
        match command:
            case Hello():
                self._reset()
            case CreateInstance(config=config):
                self.storage = self.open_storage(config.storage)
                backend = getattr(self.storage, "backend", None)
                self._token_of = getattr(backend, "change_token", None)
                if config.max_result_size is not None:
                    self.max_result_size = config.max_result_size
                if self.role != "interactive" and config.logging.index_logs:
                    self.introspection = Introspection(config.logging, self.metrics)
            case InitializationComplete():
                pass
            case UpdateConfiguration(params=params):
                if params.max_result_size is not None:
                    self.max_result_size = params.max_result_size
                self.dyncfg.update(params.dyncfg)
            case CreateDataflow(dataflow=desc):
                self._create(desc)
            case Schedule(id=gid):
                hosted = self.dataflows.get(gid)
                if hosted is not None:
                    hosted.scheduled = True
            case AllowWrites(id=gid):
                hosted = self.dataflows.get(gid)
                if hosted is not None and gid in hosted.mvs:
                    hosted.mvs[gid].allow_writes()
            case AllowCompaction(id=gid, frontier=frontier):
                self._allow_compaction(gid, frontier)
            case Peek():
                self._peek(command)
            case CancelPeek(uuid=uuid):
                response = self.peeks.cancel(uuid)
                if response is not None:
                    self.out.append(response)
            case _:
                log.warning("runtime %s: ignoring unknown command %r", self.role, command)

    def _reset(self) -> None:
        """A new protocol iteration: forget per-connection state (standing holds stay)."""
        self.out.clear()
        self.dataflows.clear()
        self.order.clear()
        self.peeks.clear()
        self.reporter.reset()
        self.published.clear()
        self.failed_published.clear()
        self.intro_allowed.clear()
        self.introspection = None
        if self.role == "maintenance" and self.registry is not None:
            self.registry.reset()

    def _create(self, desc: DataflowDescription) -> None:
        hosted = HostedDataflow(desc, self.storage, self._resolve_index)
        if hosted.failed is None:
            for gid in desc.index_imports:
                imported = self.dataflows.get(gid)
                if imported is not None and imported.failed is not None:
                    # It would wait for good: the failed index never advances, so the
                    # controller never schedules what reads it.
                    hosted.fail_built(f"dataflow {desc.debug_name!r}: imported index {gid} "
                                      f"failed: {imported.failed}")
                    break
        for gid in desc.export_ids():
            self.dataflows[gid] = hosted
        self.order.append(hosted)

    def _allow_compaction(self, gid: GlobalId, frontier: Frontier) -> None:
        hosted = self.dataflows.get(gid)
        intro = self.introspection
        if hosted is None and intro is not None and gid in intro.arrangements:
            self.intro_allowed[gid] = frontier
            if frontier.is_empty:
                del intro.arrangements[gid]
                del intro.ids[gid]
                self._dropped(gid)
            return
        if hosted is None:
            if self.role == "interactive" and self.registry is not None:
                # Broadcast compaction of a maintained collection: a standing-hold update only.
                self.registry.apply_standing_hold(gid, frontier)
            return
        hosted.allowed[gid] = hosted.allowed.get(gid, frontier).join(frontier)
        if frontier.is_empty:
            self._drop_export(hosted, gid)

    def _drop_export(self, hosted: HostedDataflow, gid: GlobalId) -> None:
        hosted.live_exports.discard(gid)
        if gid in hosted.subscribes:
            self.out.extend(hosted.subscribes[gid].drop())
        if gid in hosted.copy_tos:
            self.out.extend(hosted.copy_tos[gid].drop())
        del self.dataflows[gid]
        self._dropped(gid)
        if not hosted.live_exports:
            self.order.remove(hosted)

    def _dropped(self, gid: GlobalId) -> None:
        self.published.pop(gid, None)
        self.failed_published.discard(gid)
        if self.role == "maintenance" and self.registry is not None:
            self.registry.close(gid)
        closed = self.reporter.close(gid)
        if closed is not None and self._reports_frontiers(gid):
            self.out.append(closed)
        for pp in self.peeks.pending():
            target = pp.peek.target
            if isinstance(target, IndexTarget) and target.id == gid:
                self.peeks.try_answer(pp, lambda p: PeekResponse(p.uuid, PeekError(
                    f"collection {gid} was dropped")), self._peek_done)

    def _reports_frontiers(self, gid: GlobalId) -> bool:
        # Interactive reports only for its own (transient) collections; the multiplexer filters
        # on the same rule, and two reporters would regress the controller's frontier.
        return self.role != "interactive" or gid.is_transient

    # -- index resolution --------------------------------------------------------------------------

    def _local_arrangement(self, gid: GlobalId) -> Arrangement | None:
        hosted = self.dataflows.get(gid)
        if hosted is not None:
            return hosted.export(gid)
        if self.introspection is not None:
            return self.introspection.arrangements.get(gid)
        return None

    def _resolve_index(self, gid: GlobalId) -> ArrangementSnapshot | None:
        arr = self._local_arrangement(gid)
        if arr is not None:
            return arr.snapshot()
        if self.role == "interactive" and self.registry is not None:
            return self.registry.lookup(gid)  # None: wait; PublicationClosed: dropped
        raise PublicationClosed(gid)

    # -- peeks -------------------------------------------------------------------------------------

    def _peek(self, p: Peek) -> None:
        duplicate = self.peeks.add(p)
        if duplicate is not None:
            self.out.append(duplicate)
            return
        for pp in self.peeks.pending():
            if pp.peek.uuid == p.uuid:
                self._try_peek(pp)
                break

    def _attempt(self, p: Peek) -> PeekResponse:
        target = p.target
        if isinstance(target, StorageTarget):
            if self.storage is None:
                return PeekResponse(p.uuid, PeekError("no storage configured"))
            return answer_from_snapshot(p, storage_snapshot(p, target, self.storage),
                                        self.max_result_size)
        assert isinstance(target, IndexTarget)
        gid = target.id
        hosted = self.dataflows.get(gid)
        if hosted is not None and hosted.failed is not None:
            return PeekResponse(p.uuid, PeekError(hosted.failed))
        try:
            snap = self._resolve_index(gid)
        except PublicationClosed as e:
            return PeekResponse(p.uuid, PeekError(
                e.reason or f"collection {gid} was dropped or does not exist"))
        if snap is None:
            raise Waiting
        return answer_from_snapshot(p, snap, self.max_result_size,
                                    since=self._applied_since(gid, hosted))

    def _applied_since(self, gid: GlobalId, hosted: HostedDataflow | None) -> Frontier:
        """The compaction this runtime's own command stream has allowed for `gid`: a peek
        before it is refused even if the arrangement has not been compacted that far yet."""
        if hosted is not None:
            return hosted.allowed.get(gid, Frontier.minimum())
        if gid in self.intro_allowed:
            return self.intro_allowed[gid]
        if self.role == "interactive" and self.registry is not None:
            return self.registry.standing_hold(gid) or Frontier.minimum()
        return Frontier.minimum()

    def answer_now(self, command: ComputeCommand) -> PeekResponse | None:
        """Answer `command` at once, on the calling thread, if it is an interactive runtime's
        point lookup that is ready: a `Peek` of at most `INLINE_LOOKUP_KEYS` keys on a published
        index (not one of this runtime's own dataflows) whose snapshot is readable at the peek's
        time. Anything else — not ready, dropped, before its since, failing, or not a lookup —
        is `None`: the caller hands the command to the runtime's thread as usual, which waits
        or answers with the error. Only thread-safe state is read (the registry, this
        runtime's dataflow table by key, the pending-peek table), so the caller may run it
        while the runtime's thread steps; it must do so only when every command it sent before
        has been handled, so the answer is the one the runtime's thread would give.

        This is the read path of the replica's front process: a lookup decoded on the event
        loop is answered there, with no hop to the interactive thread and back (two wakeups
        and two interpreter-lock handoffs per read, `docs/architecture.md`)."""
        if self.role != "interactive" or self.registry is None or not isinstance(command, Peek):
            return None
        p = command
        target = p.target
        keys = p.literal_constraints
        if not isinstance(target, IndexTarget) or keys is None or len(keys) > INLINE_LOOKUP_KEYS:
            return None
        if p.uuid in self.peeks:
            return None
        rows = self.lookup_now(target.id, p.timestamp, keys, p.mfp, p.finishing)
        return None if rows is None else PeekResponse(p.uuid, engine_peek_rows(rows))

    def lookup_now(self, gid: GlobalId, t: int, keys: list[Row], mfp: MapFilterProject | None,
                   finishing: RowSetFinishing | None) -> list[tuple[Row, int]] | None:
        """`answer_now`'s rows for a lookup of `keys` on index `gid` at `t` (at most
        `INLINE_LOOKUP_KEYS` of them), or None when it is not ready or fails (the same
        conditions, and the same thread safety). What the front's controller reads at once
        (`Replica.answer_now`), with no `Peek` to build: nothing is sent."""
        registry = self.registry
        if (self.role != "interactive" or registry is None or len(keys) > INLINE_LOOKUP_KEYS
                or gid in self.dataflows):
            return None
        started = time.perf_counter()
        try:
            snap = self._readable_snapshot(registry, gid, t)
            if snap is None:
                return None
            rows = engine_peek(snap, t, literal_constraints=keys, mfp=mfp, finishing=finishing,
                               max_result_size=self.max_result_size)
        except Exception:  # the runtime's thread answers it, with the error
            return None
        self.metrics.peek_durations.record(self.role, time.perf_counter() - started)
        return rows

    @staticmethod
    def _readable_snapshot(registry: PublicationRegistry[ArrangementSnapshot], gid: GlobalId,
                           t: int) -> ArrangementSnapshot | None:
        """Index `gid`'s published snapshot if it is readable at `t` (its since, joined with
        a standing hold, at or before `t`, and its upper past `t`), else None."""
        snap, hold = registry.lookup_held(gid)
        if snap is None:
            return None
        since = snap.since if hold is None else snap.since.join(hold)
        if not since.contains(t) or snap.upper.contains(t):
            return None
        return snap

    def lookup_now_each(
        self, gid: GlobalId, t: int,
        lookups: Sequence[tuple[list[Row], MapFilterProject | None, RowSetFinishing | None]],
    ) -> list[list[tuple[Row, int]] | None] | None:
        """`[lookup_now(gid, t, *lookup) for lookup in lookups]` with the checks they share
        (the role, the index published and readable at `t`) made once, on one snapshot (any
        snapshot readable at `t` holds the index's contents there); None for all where those
        say None, None in a place whose own read fails. Each lookup's duration recorded is
        its share of the whole."""
        registry = self.registry
        if self.role != "interactive" or registry is None or gid in self.dataflows:
            return None
        started = time.perf_counter()
        try:
            snap = self._readable_snapshot(registry, gid, t)
            if snap is None:
                return None
        except Exception:
            return None
        out: list[list[tuple[Row, int]] | None] = []
        limit = self.max_result_size
        if all(len(keys) == 1 and (mfp is None or mfp.is_identity)
               and (finishing is None or finishing.is_trivial)
               for keys, mfp, finishing in lookups):
            # Plain point lookups (the common kept lookup): the snapshot's checks once.
            try:
                out = peek_each(snap, t, [keys[0] for keys, _, _ in lookups],
                                max_result_size=limit)
            except Exception:
                return None
        else:
            for keys, mfp, finishing in lookups:
                if len(keys) > INLINE_LOOKUP_KEYS:
                    out.append(None)
                    continue
                try:
                    out.append(engine_peek(snap, t, literal_constraints=keys, mfp=mfp,
                                           finishing=finishing, max_result_size=limit))
                except Exception:  # the runtime's thread answers it, with the error
                    out.append(None)
        share = (time.perf_counter() - started) / max(len(lookups), 1)
        record = self.metrics.peek_durations.record
        for rows in out:
            if rows is not None:
                record(self.role, share)
        return out

    def _peek_done(self, pp: PendingPeek, response: PeekResponse) -> None:
        self.out.append(response)
        self.metrics.peek_durations.record(self.role, time.perf_counter() - pp.received)

    def _try_peek(self, pp: PendingPeek) -> None:
        self.peeks.try_answer(pp, self._attempt, self._peek_done)

    # -- the work loop -----------------------------------------------------------------------------

    def _change_token(self) -> Hashable | None:
        """The storage's change token (`SqliteBackend.change_token`), if it has one (looked
        up once, when the storage opens: this runs before every step)."""
        token = self._token_of
        return None if token is None else token()

    def skip_idle_step(self) -> bool:
        """True if a `step` (and `maintain`) now would provably change nothing, in which case
        this counts as the poll `wait_timeout` schedules from; False: step.

        A step is a function of the commands handled, the registry's wakers, the clock (the
        introspection's deadline) and what the storage holds; the engine's steps run every
        complete time, so one that found nothing to do finds nothing again on the same inputs.
        So a step may be skipped when the last one changed nothing (no frontier advanced, no
        response, no publication, no merge), no command or waker came since, no peek is
        pending, the introspection is not due, no materialized view is hosted (its writes may
        retry), and the storage's change token equals the one taken before the last step's
        polls: no commit ended since, so every shard's upper, since and contents are what that
        step read (as `Listener` skips its reads). Storage without a token never skips."""
        token = self._quiet_token
        if token is None or self._dirty or len(self.peeks):
            return False
        if self.introspection is not None and self.introspection.due():
            return False
        if time.monotonic() - self._stepped_at >= IDLE_SKIP_MAX:
            return False
        if any(h.mvs for h in self.order):
            return False
        if self._change_token() != token:
            return False
        self.polled_at = time.monotonic()
        return True

    def step(self) -> None:
        started = time.perf_counter()
        self.polled_at = time.monotonic()  # `feed` below polls the shards
        token = self._change_token()  # before the polls: a commit during them moves the next
        responses, publishes = len(self.out), self._publishes
        while self._dirty:
            self._dirty.popleft()  # any change may unblock a peek or a compaction: re-check all
        did_work = False
        for hosted in list(self.order):
            try:
                hosted.feed()
                if hosted.step():
                    did_work = True
                self._drain_sinks(hosted)
                self._maintain_exports(hosted)
            except (DataflowFailure, StorageError, OSError):
                raise  # named already, or storage's (which a replay may well heal)
            except Exception as e:  # a bug in its sinks or arrangements: name the dataflow
                raise hosted.unexpected(e) from e
        if self.introspection is not None and self.introspection.due():
            self._update_introspection()
            did_work = True
        if len(self.peeks):
            for pp in self.peeks.pending():
                self._try_peek(pp)
        self.last_step_seconds = time.perf_counter() - started
        quiet = not did_work and len(self.out) == responses and self._publishes == publishes
        self._quiet_token = token if quiet else None
        self._stepped_at = self.polled_at
        if did_work:
            self.step_count += 1
            self.metrics.step_durations.record(self.role, self.last_step_seconds)

    def maintain(self) -> None:
        """The merges the index exports deferred in `step` (`Arrangement.defer_merges`), done
        once the step's responses have gone out, so a new upper is reported without waiting for
        them; a maintained index whose batches merged is published again (same since and
        upper, fewer batches). Recorded as a step of its own in `step_durations`."""
        started = time.perf_counter()
        merged = False
        for hosted in list(self.order):
            for gid in hosted.maintain():
                merged = True
                self._quiet_token = None
                arr = hosted.export(gid)
                if arr is not None:
                    self.published.pop(gid, None)  # same (since, upper), new batches
                    self._publish(gid, arr)
        if merged:
            self.metrics.step_durations.record(self.role, time.perf_counter() - started)

    def _drain_sinks(self, hosted: HostedDataflow) -> None:
        df = hosted.df
        if hosted.failed is not None:
            self._fail_sinks(hosted, hosted.failed)
            return
        if df is None:
            return
        for gid, sub in hosted.subscribes.items():
            self.out.extend(sub.on_chunks(df.drain_sink(gid)))
        for gid, mv in hosted.mvs.items():
            mv.on_chunks(df.drain_sink(gid))
            # A fresh shard's upper may lie below the view's as_of; reports start at as_of.
            written = mv.upper.join(Frontier.at(hosted.as_of))
            report = self.reporter.observe(gid, written, hosted.input_frontier())
            if report is not None and gid in hosted.live_exports:
                self.out.append(report)
        for gid, copy in hosted.copy_tos.items():
            self.out.extend(copy.on_chunks(df.drain_sink(gid)))

    def _fail_sinks(self, hosted: HostedDataflow, reason: str) -> None:
        """A failed dataflow's sinks answer with its failure, whether or not the engine's
        dataflow was ever built (`spec/protocol.md` §5): a subscribe ends with an error batch,
        a copy-to gets `CopyToError`, a view holds the failure as its error (`fail`) and
        reports how far it has written it, as a running view would."""
        for gid, sub in hosted.subscribes.items():
            if not sub.ended:
                sub.ended = True
                self.out.append(SubscribeResponse(gid, SubscribeBatch(
                    sub.lower, Frontier.empty(), error=reason)))
        for gid, copy in hosted.copy_tos.items():
            if not copy.done:
                copy.done = True
                self.out.append(CopyToResponse(gid, CopyToError(reason)))
        if hosted.mvs:
            upper = hosted.inputs_upper()
            for gid, mv in hosted.mvs.items():
                if gid not in hosted.live_exports:
                    continue  # dropped: its shard is no longer written
                try:
                    mv.fail(reason, upper)
                    written = mv.upper.join(Frontier.at(hosted.as_of))
                except StorageError as e:  # a replay heals storage's faults: try next step
                    log.warning("view %s: cannot write its failure: %s", gid, e)
                    continue
                report = self.reporter.observe(gid, written, upper)
                if report is not None:
                    self.out.append(report)

    def _compaction_target(self, gid: GlobalId, allowed: Frontier) -> Frontier:
        target = allowed
        if self.role == "maintenance" and self.registry is not None:
            target = self.registry.compaction_target(gid, target)
        for other in self.order:
            hold = other.import_holds().get(gid)
            if hold is not None:
                target = target.meet(hold)
        return target

    def _maintain_exports(self, hosted: HostedDataflow) -> None:
        for gid in list(hosted.desc.index_exports):
            if gid not in hosted.live_exports:
                continue
            if hosted.failed is not None:
                self._publish_failure(gid, hosted.failed)
                continue  # publishing its arrangement would replace the failure: readers wait
            arr = hosted.export(gid)
            if arr is None:
                continue
            allowed = hosted.allowed.get(gid)
            if allowed is not None:
                arr.compact(self._compaction_target(gid, allowed))
            self._publish(gid, arr)
            report = self.reporter.observe(gid, hosted.frontier, hosted.input_frontier())
            if report is not None and self._reports_frontiers(gid):
                self.out.append(report)

    def _publish_failure(self, gid: GlobalId, reason: str) -> None:
        # A failed maintained index is never published; readers waiting on it (interactive)
        # must get the failure instead of waiting forever.
        if self.role != "maintenance" or self.registry is None:
            return
        if gid not in self.failed_published:
            self.failed_published.add(gid)
            self._publishes += 1
            self.registry.close(gid, reason)

    def _publish(self, gid: GlobalId, arr: Arrangement) -> None:
        if self.role != "maintenance" or self.registry is None:
            return
        state = (arr.since, arr.upper)
        if self.published.get(gid) != state:
            self.published[gid] = state
            self._publishes += 1
            taken = arr.snapshot()
            published = self.registry.publish(gid, taken)
            if published is not taken:
                # The registry published a copy (in shared memory, `replica/shm.py`): keep
                # that one, so the batches exist once.
                arr.adopt(taken, published)

    def _update_introspection(self) -> None:
        intro = self.introspection
        assert intro is not None
        frontiers = {gid: h.frontier for gid, h in self.dataflows.items()}
        sizes: dict[GlobalId, tuple[int, int, int]] = {}
        for gid, h in self.dataflows.items():
            arr = h.export(gid)
            if arr is not None:
                sizes[gid] = (len(arr), arr.batch_count, arr.size_bytes)
        for gid in intro.update(frontiers, sizes):
            arr = intro.arrangements[gid]
            allowed = self.intro_allowed.get(gid)
            if allowed is not None:
                arr.compact(self._compaction_target(gid, allowed))
            self._publish(gid, arr)
            report = self.reporter.observe(gid, arr.upper)
            if report is not None:
                self.out.append(report)

    def take_responses(self) -> list[ComputeResponse]:
        out, self.out = self.out, []
        return out

    def wait_timeout(self) -> float | None:
        """How long the loop may wait for a command before the next `step`: with shards to
        poll, until the next poll is due — `poll_interval` after the last step *started* (a
        deadline, so the step and `maintain` count against the wait rather than adding to it;
        0 when they took longer), else the introspection's deadline, else forever."""
        timeouts: list[float] = []
        if any(h.feeds and h.scheduled and h.failed is None for h in self.order) or \
                self.peeks.has_storage_peeks() or any(h.mvs for h in self.order):
            timeouts.append(max(0.0, self.polled_at + self.poll_interval - time.monotonic()))
        if self.introspection is not None:
            t = self.introspection.wait_timeout()
            if t is not None:
                timeouts.append(t)
        return min(timeouts) if timeouts else None

    def shutdown(self) -> None:
        if self.registry is not None:
            self.registry.remove_waker(self._on_published)
