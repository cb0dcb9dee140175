"""Delivering the instance's events to the callers waiting for them.

`Deliveries` holds what async callers wait on — one future per pending peek and copy-to, one
`Subscription` per running subscribe, the frontier waiters — and turns each `Event` the sans-IO
`InstanceState` emits into the result (or the typed error) of the right one. It never decides
anything: the instance core already said what happened.

Contract: every future is resolved at most once (a caller that gave up already popped its
entry); `fail_all(error)` fails everything still waiting (the controller closed, or no replica
can serve); a forgotten collection fails its frontier waiters with `UnknownCollection`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from uuid import UUID

from twofold.controller.errors import CopyToFailed, SubscribeFailed, UnknownCollection
from twofold.controller.state import (
    CollectionForgotten,
    CopyToDone,
    Event,
    FrontierAdvanced,
    PeekAnswered,
    SubscribeDelivered,
)
from twofold.controller.subscription import Subscription
from twofold.protocol import CopyToError, CopyToRowCount, Frontier, GlobalId, PeekResult


class Deliveries:
    """The callers waiting on one controller. See the module docstring."""

    def __init__(self) -> None:
        self.peeks: dict[UUID, asyncio.Future[PeekResult]] = {}
        self.copy_tos: dict[GlobalId, asyncio.Future[int]] = {}
        self.subscriptions: dict[GlobalId, Subscription] = {}
        self.frontier_waiters: dict[GlobalId, list[tuple[Frontier, asyncio.Future[None]]]] = {}

    def deliver(self, events: Iterable[Event]) -> None:
        for ev in events:
            if isinstance(ev, PeekAnswered):
                fut = self.peeks.pop(ev.uuid, None)
                if fut is not None and not fut.done():
                    fut.set_result(ev.result)
            elif isinstance(ev, SubscribeDelivered):
                self._deliver_subscribe(ev)
            elif isinstance(ev, CopyToDone):
                self._deliver_copy_to(ev)
            elif isinstance(ev, FrontierAdvanced):
                self.wake_frontier(ev.id, ev.frontier)
            elif isinstance(ev, CollectionForgotten):
                for _, wfut in self.frontier_waiters.pop(ev.id, []):
                    if not wfut.done():
                        wfut.set_exception(UnknownCollection(ev.id, "wait_for_frontier"))

    def _deliver_subscribe(self, ev: SubscribeDelivered) -> None:
        sub = self.subscriptions.get(ev.id)
        if sub is None:
            return
        if ev.batch is not None and ev.error is None:
            sub._push(ev.batch)
        if ev.ended:
            self.subscriptions.pop(ev.id, None)
            if ev.error is not None:
                sub._push(SubscribeFailed(ev.id, ev.error))
            elif ev.dropped_at is not None:
                sub._push(SubscribeFailed(ev.id, f"dropped at {ev.dropped_at!r}"))
            else:
                sub._push(None)

    def _deliver_copy_to(self, ev: CopyToDone) -> None:
        cfut = self.copy_tos.pop(ev.id, None)
        if cfut is None or cfut.done():
            return
        r = ev.result
        if isinstance(r, CopyToRowCount):
            cfut.set_result(r.count)
        elif isinstance(r, CopyToError):
            cfut.set_exception(CopyToFailed(ev.id, r.message))
        else:
            cfut.set_exception(CopyToFailed(ev.id, "dropped before it completed"))

    def wake_frontier(self, id: GlobalId, frontier: Frontier) -> None:
        waiters = self.frontier_waiters.get(id)
        if not waiters:
            return
        keep = []
        for target, fut in waiters:
            if target <= frontier:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((target, fut))
        if keep:
            self.frontier_waiters[id] = keep
        else:
            del self.frontier_waiters[id]

    def fail_reads(self, error: Callable[[], BaseException]) -> None:
        """Fail every pending peek and copy-to with a fresh `error()`; their entries go."""
        for pfut in self.peeks.values():
            if not pfut.done():
                pfut.set_exception(error())
        for cfut in self.copy_tos.values():
            if not cfut.done():
                cfut.set_exception(error())

    def fail_all(self, error: Callable[[], BaseException]) -> None:
        """Fail everything still waiting (reads, frontier waiters, subscriptions)."""
        self.fail_reads(error)
        for waiters in self.frontier_waiters.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.set_exception(error())
        for sub in self.subscriptions.values():
            sub._push(error())
        self.subscriptions.clear()
