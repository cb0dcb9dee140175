"""The collections an instance tracks, and their read holds, compaction, scheduling and cleanup.

Sans-IO. `CollectionTracker` is the bottom layer of `InstanceState` (see `instance.py`): it owns
the collections, the command history every emitted command is first recorded in, and the
`Effects` being accumulated for the current call. Its rules (`spec/controller.md`):

- a collection's `since` is the meet of its read holds: its implied hold (placed by its read
  policy from the global write frontier), the holds of dataflows reading it (at their `as_of`,
  then following their own since), and the holds of pending peeks (at their timestamp). Each
  change of the since emits `AllowCompaction(id, since)`;
- `drop` releases the implied hold; `AllowCompaction(id, empty)` follows once no other hold
  remains; the collection is forgotten once every replica reported all frontiers empty, and only
  then are its holds on its inputs released;
- `Schedule(id)` is sent once the dataflow's compute dependencies are scheduled and their write
  frontiers lie beyond its `as_of`;
- finishing a peek sends `CancelPeek` *before* its read hold is released.

Invariant protected: no `AllowCompaction` ever passes a time an outstanding peek or a live
dataflow still needs.
"""

from __future__ import annotations

from uuid import UUID

from twofold.controller.errors import UnknownCollection
from twofold.controller.frontiers import CollectionFrontiers, ReplicaId
from twofold.controller.history import CommandHistory
from twofold.controller.holds import NoCompaction, ReadHolds, ReadPolicy, WriteOnly
from twofold.controller.state import (
    CollectionForgotten,
    CollectionKind,
    CollectionState,
    Effects,
    PendingPeek,
)
from twofold.protocol import (
    AllowCompaction,
    CancelPeek,
    ComputeCommand,
    Frontier,
    GlobalId,
    Schedule,
)


class CollectionTracker:
    """Collections, their holds and scheduling, and the history of one instance."""

    def __init__(self, read_policy: ReadPolicy) -> None:
        self.read_policy = read_policy
        self.history = CommandHistory()
        self.collections: dict[GlobalId, CollectionState] = {}
        self.peeks: dict[UUID, PendingPeek] = {}
        self._unscheduled: dict[GlobalId, None] = {}  # an ordered set: creation order
        self.replicas: set[ReplicaId] = set()
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

    def acquire_hold(self, id: GlobalId, frontier: Frontier) -> Effects:
        """Hold `id` readable at `frontier` until `release_hold` (a session's transaction
        reading at one time); `HoldError` if its since is already beyond it."""
        c = self.collection(id, "hold")
        if c.dropped:
            raise UnknownCollection(id, "hold")
        self._since_changed(c, c.holds.acquire(frontier))
        return self._take()

    def release_hold(self, id: GlobalId, frontier: Frontier) -> Effects:
        """Release one hold `acquire_hold` took (a forgotten collection: nothing to do)."""
        c = self.collections.get(id)
        if c is not None:
            self._since_changed(c, c.holds.release(frontier))
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

    def drop(self, id: GlobalId) -> Effects:
        """Drop `id`: release its implied hold (compaction to empty follows once no peek or
        dataflow holds it any more)."""
        c = self.collection(id, "drop")
        if c.dropped:
            return self._take()
        c.dropped = True
        self._since_changed(c, c.holds.release(c.implied))
        return self._take()

    def _finish_peek(self, p: PendingPeek) -> None:
        # CancelPeek goes out *before* the hold is released: a replica must never see the
        # compaction that invalidates a peek it might still be serving.
        self._send(CancelPeek(uuid=p.uuid))
        if p.held:
            c = self.collections[p.target]
            self._since_changed(c, c.holds.release(Frontier.at(p.timestamp)))
