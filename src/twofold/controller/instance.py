"""The controller's decision core for one compute instance: collections, frontiers, read holds,
scheduling, peeks, subscribes and copy-tos. Sans-IO: methods take values and return `Effects`
(commands to broadcast to every replica, in order, and events for waiting callers).

Contract (`spec/controller.md`, `reference/mz-compute-protocol.md` §9):
- every emitted command is first recorded in `history`; `connect_replica` reduces it and returns
  the replay for a new connection;
- a collection's `since` is the meet of its read holds: its implied hold (placed by its read
  policy from the global write frontier), the holds of dataflows reading it (at their `as_of`,
  then following their own since), and the holds of pending peeks (at their timestamp). Each
  change of the since emits `AllowCompaction(id, since)`;
- `drop` releases the implied hold; `AllowCompaction(id, empty)` follows once no other hold
  remains; the collection is forgotten once every replica reported all frontiers empty, and only
  then are its holds on its inputs released;
- `Schedule(id)` is sent once the dataflow's compute dependencies are scheduled and their write
  frontiers lie beyond its `as_of` (transient dataflows are scheduled at once);
- a peek's first response is delivered once; finishing a peek sends `CancelPeek` *before* its
  read hold is released.

Invariant protected: no `AllowCompaction` ever passes a time an outstanding peek or a live
dataflow still needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from uuid import UUID

import msgspec

from twofold.controller.errors import (
    CollectionExists,
    InvalidDataflow,
    InvalidRead,
    SinceViolation,
    UnknownCollection,
)
from twofold.controller.frontiers import CollectionFrontiers, ReplicaId
from twofold.controller.history import CommandHistory
from twofold.controller.holds import (
    DEFAULT_READ_POLICY,
    NoCompaction,
    ReadHolds,
    ReadPolicy,
    WriteOnly,
)
from twofold.controller.state import (
    CollectionForgotten,
    CollectionKind,
    CollectionState,
    CopyToDone,
    Effects,
    Event,
    FrontierAdvanced,
    PeekAnswered,
    PendingPeek,
    SubscribeDelivered,
)
from twofold.controller.subscribes import SubscribeMerger
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeParameters,
    ComputeResponse,
    CopyToResponse,
    CopyToSink,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    InitializationComplete,
    InstanceConfig,
    MapFilterProject,
    Peek,
    PeekResponse,
    PeekTarget,
    RelationDesc,
    Row,
    RowSetFinishing,
    Schedule,
    StorageTarget,
    SubscribeBatch,
    SubscribeDroppedAt,
    SubscribeResponse,
    SubscribeSink,
    UpdateConfiguration,
)

log = logging.getLogger(__name__)

__all__ = [
    "CollectionForgotten",
    "CollectionKind",
    "CollectionState",
    "CopyToDone",
    "Effects",
    "Event",
    "FrontierAdvanced",
    "InstanceState",
    "PeekAnswered",
    "PendingPeek",
    "SubscribeDelivered",
]


class InstanceState:
    """Collections, read holds, peeks, subscribes and the command history of one instance."""

    def __init__(
        self,
        config: InstanceConfig | None = None,
        read_policy: ReadPolicy = DEFAULT_READ_POLICY,
        source_upper: Callable[[str], Frontier | None] | None = None,
    ) -> None:
        self.config = InstanceConfig() if config is None else config
        self.source_upper = source_upper
        """Storage's current upper of a source shard (`None`: unknown); refreshes replays."""
        self.read_policy = read_policy
        self.history = CommandHistory()
        self.collections: dict[GlobalId, CollectionState] = {}
        self.peeks: dict[UUID, PendingPeek] = {}
        self._unscheduled: dict[GlobalId, None] = {}  # an ordered set: creation order
        self.replicas: set[ReplicaId] = set()
        self.regression_count = 0
        """Frontier reports that would have moved a frontier backwards (logged, not applied)."""
        self.unknown_reports = 0
        """Responses naming a collection the controller does not know (logged, ignored)."""
        self.ignored_peek_responses = 0
        """Responses to peeks already finished: every later replica's answer lands here."""
        self._fx = Effects()

    # -- plumbing ---------------------------------------------------------------------------

    def _send(self, command: ComputeCommand) -> None:
        self.history.push(command)
        self._fx.commands.append(command)

    def _take(self) -> Effects:
        fx, self._fx = self._fx, Effects()
        return fx

    def collection(self, id: GlobalId, what: str = "lookup") -> CollectionState:
        c = self.collections.get(id)
        if c is None:
            raise UnknownCollection(id, what)
        return c

    # -- instance lifecycle -----------------------------------------------------------------

    def start(self) -> Effects:
        """`Hello`, `CreateInstance` (registering its introspection indexes), then
        `InitializationComplete`: the controller has no earlier state to replay."""
        self._send(Hello(nonce=UUID(int=0)))
        self._send(CreateInstance(config=self.config))
        for id in self.config.logging.index_logs.values():
            # The replica chooses the as-of of its logs itself: track from the minimum.
            self._add_collection(id, CollectionKind.INTROSPECTION, Frontier.minimum(), [])
            self.collections[id].scheduled = True
        self._send(InitializationComplete())
        return self._take()

    def update_configuration(self, params: ComputeParameters) -> Effects:
        self._send(UpdateConfiguration(params=params))
        return self._take()

    def connect_replica(self, replica: ReplicaId) -> tuple[list[ComputeCommand], Effects]:
        """A (re)connection of `replica`: the reduced history to replay, then effects (to send
        to every replica *after* the replay). Per-replica frontiers restart from scratch; the
        collections the replay will not create count as reported empty."""
        self.replicas.add(replica)
        self.history.reduce()
        if self.source_upper is not None:
            self.history.update_source_uppers(self.source_upper)
        replay = self.history.commands()
        live = self.history.dataflow_exports()
        for c in list(self.collections.values()):
            if c.id in live or c.kind is CollectionKind.INTROSPECTION:
                c.frontiers.add_replica(replica)
            else:
                c.frontiers.add_replica(replica, Frontier.empty())
        for c in list(self.collections.values()):
            self._maybe_cleanup(c)
        return replay, self._take()

    def remove_replica(self, replica: ReplicaId) -> Effects:
        """Forget `replica` for good (not for a reconnect): cleanup no longer waits for it."""
        self.replicas.discard(replica)
        for c in list(self.collections.values()):
            c.frontiers.remove_replica(replica)
        for c in list(self.collections.values()):
            self._maybe_cleanup(c)
        return self._take()

    # -- collections and holds --------------------------------------------------------------

    def _add_collection(
        self,
        id: GlobalId,
        kind: CollectionKind,
        as_of: Frontier,
        dependencies: list[GlobalId],
        policy: ReadPolicy | None = None,
    ) -> CollectionState:
        if policy is None:
            if kind in (CollectionKind.INDEX, CollectionKind.INTROSPECTION):
                policy = self.read_policy
            elif kind is CollectionKind.COPY_TO:
                policy = NoCompaction()
            else:
                policy = WriteOnly()
        frontiers = CollectionFrontiers(id, as_of)
        for r in self.replicas:
            frontiers.add_replica(r, as_of)
        c = CollectionState(
            id=id,
            kind=kind,
            as_of=as_of,
            frontiers=frontiers,
            holds=ReadHolds(as_of),
            policy=policy,
            implied=as_of,
            dependencies=dependencies,
        )
        self.collections[id] = c
        for dep in dependencies:
            self.collections[dep].holds.acquire(as_of)
            c.input_holds[dep] = as_of
        return c

    def _since_changed(self, c: CollectionState, new: Frontier | None) -> None:
        if new is None:
            return
        self._send(AllowCompaction(id=c.id, frontier=new))
        if not new.is_empty:
            # The collection no longer reads its inputs before its own since.
            for dep, held in list(c.input_holds.items()):
                if held != new:
                    c.input_holds[dep] = new
                    d = self.collections[dep]
                    self._since_changed(d, d.holds.downgrade(held, new))
        self._maybe_cleanup(c)

    def _maybe_cleanup(self, c: CollectionState) -> None:
        if not (c.dropped and c.since.is_empty and c.frontiers.all_replicas_empty()):
            return
        if self.collections.get(c.id) is not c:
            return
        del self.collections[c.id]
        self._fx.events.append(CollectionForgotten(c.id))
        for dep, held in c.input_holds.items():
            d = self.collections[dep]
            self._since_changed(d, d.holds.release(held))
        c.input_holds.clear()

    def _advance_implied(self, c: CollectionState) -> None:
        if c.dropped:
            return
        # A subscribe's progress is what was delivered, not what any replica claims: a replay
        # must restart no later than one step behind the delivered upper.
        write = c.write_frontier
        if c.subscribe is not None:
            write = c.subscribe.upper or c.as_of
        new = c.policy.implied_hold(write, c.implied)
        if new != c.implied:
            old, c.implied = c.implied, new
            self._since_changed(c, c.holds.downgrade(old, new))

    def set_read_policy(self, id: GlobalId, policy: ReadPolicy) -> Effects:
        """Change `id`'s read policy; the implied hold only ever moves forward."""
        c = self.collection(id, "set_read_policy")
        c.policy = policy
        self._advance_implied(c)
        return self._take()

    def _ready(self, c: CollectionState) -> bool:
        t = c.as_of.time
        for dep in c.dependencies:
            d = self.collections[dep]
            if not d.scheduled or (t is not None and d.write_frontier.contains(t)):
                return False
        return True

    def _schedule_ready(self) -> None:
        # Only unscheduled collections are looked at, so a frontier report costs nothing once
        # everything is running.
        progress = True
        while progress and self._unscheduled:  # scheduling one can make its dependents ready
            progress = False
            for id in list(self._unscheduled):
                c = self.collections.get(id)
                if c is None or c.dropped:
                    del self._unscheduled[id]
                elif self._ready(c):
                    del self._unscheduled[id]
                    c.scheduled = True
                    progress = True
                    self._send(Schedule(id=c.id))

    # -- dataflows --------------------------------------------------------------------------

    def create_dataflow(
        self, desc: DataflowDescription, read_policy: ReadPolicy | None = None
    ) -> tuple[DataflowDescription, Effects]:
        """Validate, choose an `as_of` if missing (the earliest time every input is readable),
        hold inputs there, send `CreateDataflow`, then `Schedule`s and `AllowWrites` as due."""
        exports = desc.export_ids()
        if not exports:
            raise InvalidDataflow(f"dataflow {desc.debug_name!r} exports nothing")
        for e in exports:
            if e in self.collections:
                raise CollectionExists(e)
        deps = [i for i in desc.index_imports if i not in exports]
        for dep in deps:
            d = self.collections.get(dep)
            if d is None or d.dropped:
                raise InvalidDataflow(
                    f"dataflow {desc.debug_name!r} imports index {dep}, which does not exist"
                    + (" (it was dropped)" if d is not None else "")
                )
        as_of = desc.as_of
        if as_of is None:
            as_of = Frontier.minimum()
            for dep in deps:
                as_of = as_of.join(self.collections[dep].since)
        if as_of.is_empty:
            raise InvalidDataflow(f"dataflow {desc.debug_name!r} has an empty as_of")
        t = as_of.time
        assert t is not None
        for dep in deps:
            d = self.collections[dep]
            if not d.since.contains(t):
                raise SinceViolation(dep, t, d.since)
        if as_of != desc.as_of:
            desc = msgspec.structs.replace(desc, as_of=as_of)

        self._send(CreateDataflow(dataflow=desc))
        for e in desc.index_exports:
            self._add_collection(e, CollectionKind.INDEX, as_of, deps, read_policy)
        for e, sink in desc.sink_exports.items():
            if isinstance(sink.connection, SubscribeSink):
                kind = CollectionKind.SUBSCRIBE
            elif isinstance(sink.connection, CopyToSink):
                kind = CollectionKind.COPY_TO
            else:
                kind = CollectionKind.MATERIALIZED_VIEW
            c = self._add_collection(e, kind, as_of, deps)
            if kind is CollectionKind.SUBSCRIBE:
                c.subscribe = SubscribeMerger(e)
        if desc.is_transient():
            for e in exports:
                self.collections[e].scheduled = True
                self._send(Schedule(id=e))
        else:
            self._unscheduled.update(dict.fromkeys(exports))
            self._schedule_ready()
        for e in desc.persist_sink_ids():
            self._send(AllowWrites(id=e))
        return desc, self._take()

    def drop(self, id: GlobalId) -> Effects:
        """Drop `id`: release its implied hold (compaction to empty follows once no peek or
        dataflow holds it any more)."""
        c = self.collection(id, "drop")
        if c.dropped:
            return self._take()
        c.dropped = True
        self._since_changed(c, c.holds.release(c.implied))
        return self._take()

    # -- peeks ------------------------------------------------------------------------------

    def choose_timestamp(self, id: GlobalId, timestamp: int | None = None) -> int:
        """`timestamp` if `id` is readable there, else raise `SinceViolation`; by default the
        latest readable time: the write frontier minus one, but not before the since."""
        c = self.collection(id, "peek")
        since = c.since
        if c.dropped or since.is_empty:
            raise SinceViolation(id, timestamp, since)
        s = since.time
        assert s is not None
        if timestamp is not None:
            if timestamp < s:
                raise SinceViolation(id, timestamp, since)
            return timestamp
        latest = c.write_frontier.step_back()
        return s if latest is None else max(latest, s)

    def begin_peek(
        self,
        uuid: UUID,
        target: PeekTarget,
        timestamp: int | None = None,
        *,
        literal_constraints: list[Row] | None = None,
        mfp: MapFilterProject | None = None,
        finishing: RowSetFinishing | None = None,
        result_desc: RelationDesc | None = None,
    ) -> tuple[Peek, Effects]:
        """Choose the timestamp, hold the target there until the peek finishes, send `Peek`."""
        if uuid in self.peeks:
            raise InvalidRead(f"peek uuid {uuid} is already in use")
        if isinstance(target, StorageTarget):
            if timestamp is None:
                raise InvalidRead(
                    f"a peek of storage collection {target.id} needs an explicit timestamp"
                )
            ts, held = timestamp, False
        else:
            ts, held = self.choose_timestamp(target.id, timestamp), True
            c = self.collections[target.id]
            if c.kind not in (CollectionKind.INDEX, CollectionKind.INTROSPECTION):
                raise InvalidRead(
                    f"cannot peek {target.id}: it is a {c.kind.value}, not an index "
                    "(peek its storage shard with a StorageTarget, or use a peek dataflow)"
                )
            c.holds.acquire(Frontier.at(ts))
        peek = Peek(
            uuid=uuid,
            target=target,
            timestamp=ts,
            literal_constraints=literal_constraints,
            mfp=MapFilterProject() if mfp is None else mfp,
            finishing=RowSetFinishing() if finishing is None else finishing,
            result_desc=result_desc,
        )
        self.peeks[uuid] = PendingPeek(uuid, target.id, ts, held)
        self._send(peek)
        return peek, self._take()

    def _finish_peek(self, p: PendingPeek) -> None:
        # CancelPeek goes out *before* the hold is released: a replica must never see the
        # compaction that invalidates a peek it might still be serving.
        self._send(CancelPeek(uuid=p.uuid))
        if p.held:
            c = self.collections[p.target]
            self._since_changed(c, c.holds.release(Frontier.at(p.timestamp)))

    def cancel_peek(self, uuid: UUID) -> Effects:
        """Finish a pending peek without an answer (cancelled or timed out). Unknown: no-op."""
        p = self.peeks.pop(uuid, None)
        if p is not None:
            self._finish_peek(p)
        return self._take()

    # -- responses --------------------------------------------------------------------------

    def absorb(self, replica: ReplicaId, response: ComputeResponse) -> Effects:
        """Apply one response from `replica` (of its current epoch)."""
        if isinstance(response, Frontiers):
            self._absorb_frontiers(replica, response)
        elif isinstance(response, PeekResponse):
            p = self.peeks.pop(response.uuid, None)
            if p is None:
                self.ignored_peek_responses += 1
            else:
                self._fx.events.append(PeekAnswered(response.uuid, response.result))
                self._finish_peek(p)
        elif isinstance(response, SubscribeResponse):
            self._absorb_subscribe(replica, response)
        elif isinstance(response, CopyToResponse):
            self._absorb_copy_to(replica, response)
        return self._take()

    def _known(self, id: GlobalId, what: str) -> CollectionState | None:
        c = self.collections.get(id)
        if c is None:
            # Expected after a drop: replicas report until they have processed it (and every
            # replica's final empty report may trail the one that let us forget the id).
            self.unknown_reports += 1
            log.debug("%s for unknown collection %s ignored", what, id)
        return c

    def _after_write_advance(self, c: CollectionState, advanced: Frontier | None) -> None:
        if advanced is None:
            return
        self._fx.events.append(FrontierAdvanced(c.id, advanced))
        self._advance_implied(c)
        self._schedule_ready()

    def _absorb_frontiers(self, replica: ReplicaId, r: Frontiers) -> None:
        c = self._known(r.id, "Frontiers")
        if c is None:
            return
        before = len(c.frontiers.regressions)
        advanced = c.frontiers.observe(
            replica, r.write_frontier, r.input_frontier, r.output_frontier
        )
        self.regression_count += len(c.frontiers.regressions) - before
        self._after_write_advance(c, advanced)
        self._maybe_cleanup(c)

    def _absorb_subscribe(self, replica: ReplicaId, r: SubscribeResponse) -> None:
        c = self._known(r.id, "SubscribeResponse")
        if c is None or c.subscribe is None:
            return
        ev = r.event
        upper = ev.upper if isinstance(ev, SubscribeBatch) else Frontier.empty()
        before = len(c.frontiers.regressions)
        advanced = c.frontiers.observe(replica, upper, upper, upper)
        self.regression_count += len(c.frontiers.regressions) - before
        merger = c.subscribe
        was_finished = merger.finished
        batch = merger.absorb(ev)
        if merger.finished and not was_finished:
            self._fx.events.append(
                SubscribeDelivered(c.id, batch, True, merger.error, merger.dropped_at)
            )
        elif batch is not None:
            self._fx.events.append(SubscribeDelivered(c.id, batch, False))
        self._after_write_advance(c, advanced)
        if merger.finished and not c.dropped:
            # A finished subscribe has nothing left to compute: drop it.
            c.dropped = True
            self._since_changed(c, c.holds.release(c.implied))
        self._maybe_cleanup(c)
        if isinstance(ev, SubscribeDroppedAt) and not was_finished:
            log.info("subscribe %s dropped at %r", c.id, ev.frontier)

    def _absorb_copy_to(self, replica: ReplicaId, r: CopyToResponse) -> None:
        c = self._known(r.id, "CopyToResponse")
        if c is None:
            return
        empty = Frontier.empty()
        c.frontiers.observe(replica, empty, empty, empty)
        if not c.copy_to_done:
            c.copy_to_done = True
            self._fx.events.append(CopyToDone(c.id, r.result))
            if not c.dropped:
                c.dropped = True
                self._since_changed(c, c.holds.release(c.implied))
        self._maybe_cleanup(c)
