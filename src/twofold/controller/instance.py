"""The controller's decision core for one compute instance: collections, frontiers, read holds,
scheduling, peeks, subscribes and copy-tos. Sans-IO: methods take values and return `Effects`
(commands to broadcast to every replica, in order, and events for waiting callers).

Contract (`spec/controller.md`, `reference/mz-compute-protocol.md` §9):
- every emitted command is first recorded in `history`; `connect_replica` reduces it and returns
  the replay for a new connection;
- holds, compaction, scheduling and cleanup follow the rules of `tracking.py`; responses are
  applied as `responses.py` says;
- `create_dataflow` validates the description, chooses an `as_of` if missing (the earliest time
  every input is readable) and holds the inputs there; transient dataflows are scheduled at
  once;
- a peek holds its target at its timestamp until it finishes; its first response is delivered
  once; finishing a peek sends `CancelPeek` *before* its read hold is released.

Invariant protected: no `AllowCompaction` ever passes a time an outstanding peek or a live
dataflow still needs.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

import msgspec

from twofold.controller.errors import (
    CollectionExists,
    InvalidDataflow,
    InvalidRead,
    SinceViolation,
)
from twofold.controller.frontiers import ReplicaId
from twofold.controller.holds import (
    DEFAULT_READ_POLICY,
    ReadPolicy,
)
from twofold.controller.responses import ResponseAbsorber
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
    AllowWrites,
    ComputeCommand,
    ComputeParameters,
    CopyToSink,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    GlobalId,
    Hello,
    InitializationComplete,
    InstanceConfig,
    MapFilterProject,
    Peek,
    PeekTarget,
    RelationDesc,
    Row,
    RowSetFinishing,
    Schedule,
    StorageTarget,
    SubscribeSink,
    UpdateConfiguration,
)

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


class InstanceState(ResponseAbsorber):
    """Collections, read holds, peeks, subscribes and the command history of one instance.

    Layered by responsibility: `CollectionTracker` (`tracking.py`: collections, holds,
    compaction, scheduling, cleanup), `ResponseAbsorber` (`responses.py`: replica responses),
    and this class: the instance's lifecycle, replicas, dataflows and peeks."""

    def __init__(
        self,
        config: InstanceConfig | None = None,
        read_policy: ReadPolicy = DEFAULT_READ_POLICY,
        source_upper: Callable[[str], Frontier | None] | None = None,
    ) -> None:
        super().__init__(read_policy)
        self.config = InstanceConfig() if config is None else config
        self.source_upper = source_upper
        """Storage's current upper of a source shard (`None`: unknown); refreshes replays."""

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

    def cancel_peek(self, uuid: UUID) -> Effects:
        """Finish a pending peek without an answer (cancelled or timed out). Unknown: no-op."""
        p = self.peeks.pop(uuid, None)
        if p is not None:
            self._finish_peek(p)
        return self._take()
