"""How an instance applies the responses of its replicas. Sans-IO.

`ResponseAbsorber.absorb(replica, response)` applies one response of a replica's current epoch:
frontier reports advance the collection's frontiers (regressions are counted and never applied)
and with them its implied hold and the scheduling of its dependents; a peek's first answer is
delivered once (later ones are counted and ignored) and finishes the peek; subscribe batches are
merged across replicas into contiguous batches delivered exactly once, and a finished subscribe
is dropped; a copy-to's first result is delivered once and finishes it. Reports about
collections the instance no longer knows are expected after a drop: counted, logged, ignored.
"""

from __future__ import annotations

import logging

from twofold.controller.frontiers import ReplicaId
from twofold.controller.holds import ReadPolicy
from twofold.controller.state import (
    CollectionState,
    CopyToDone,
    Effects,
    FrontierAdvanced,
    PeekAnswered,
    SubscribeDelivered,
)
from twofold.controller.tracking import CollectionTracker
from twofold.protocol import (
    ComputeResponse,
    CopyToResponse,
    Frontier,
    Frontiers,
    GlobalId,
    PeekResponse,
    SubscribeBatch,
    SubscribeDroppedAt,
    SubscribeResponse,
)

log = logging.getLogger(__name__)


class ResponseAbsorber(CollectionTracker):
    """The response side of `InstanceState`."""

    def __init__(self, read_policy: ReadPolicy) -> None:
        super().__init__(read_policy)
        self.regression_count = 0
        """Frontier reports that would have moved a frontier backwards (logged, not applied)."""
        self.unknown_reports = 0
        """Responses naming a collection the controller does not know (logged, ignored)."""
        self.ignored_peek_responses = 0
        """Responses to peeks already finished: every later replica's answer lands here."""

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
