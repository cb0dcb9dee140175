"""`Subscription`: the caller's side of one subscribe.

Contract: an async iterator over batches `[lower, upper)` that the controller's merger already
made contiguous and exactly-once. It ends when the subscribe completes, raises `SubscribeFailed`
on an error batch or an external drop (`ControllerClosed` when the controller closes), and
`aclose()` drops the subscribe if it is still running.

Backlog: batches wait here until the reader takes them. Unbounded by default (an in-process
reader); `bound_backlog(n)` bounds the updates waiting beyond the one batch the reader may be
working through: past it the queue is dropped with the subscribe, and the reader's next read
raises `SubscribeBacklogExceeded` — never a gap it is not told of.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING

from twofold.controller.errors import SubscribeBacklogExceeded
from twofold.protocol import GlobalId, SubscribeBatch

if TYPE_CHECKING:
    from twofold.controller.controller import Controller


class Subscription:
    """An async iterator over one subscribe's batches, `[lower, upper)`, contiguous and exactly
    once. Ends when the subscribe completes; raises `SubscribeFailed` on an error batch or an
    external drop. `aclose()` (or leaving `async with`) drops the subscribe."""

    def __init__(self, controller: Controller, id: GlobalId) -> None:
        self.id = id
        self._controller = controller
        self._items: deque[SubscribeBatch | BaseException | None] = deque()
        self._wake = asyncio.Event()
        self._done = False
        self._limit: int | None = None
        self._queued = 0  # updates in the queued batches
        self._overflowed = False
        self._dropping: asyncio.Task[None] | None = None

    def bound_backlog(self, updates: int) -> None:
        """Bound the updates queued for the reader (module docstring): past `updates` waiting
        beyond the first queued batch, the subscribe ends with `SubscribeBacklogExceeded`."""
        self._limit = updates
        self._check_backlog()

    def _push(self, item: SubscribeBatch | BaseException | None) -> None:
        if self._overflowed:
            return  # ended: what arrives after the overflow is not delivered
        self._items.append(item)
        if isinstance(item, SubscribeBatch):
            self._queued += len(item.updates or ())
            self._check_backlog()
        self._wake.set()

    def _check_backlog(self) -> None:
        limit = self._limit
        if limit is None or self._overflowed or not self._items:
            return
        head = self._items[0]
        beyond = self._queued - (len(head.updates or ()) if isinstance(head, SubscribeBatch)
                                 else 0)
        if beyond <= limit:
            return
        self._overflowed = True
        self._items.clear()
        self._queued = 0
        self._items.append(SubscribeBacklogExceeded(self.id, limit))
        self._wake.set()
        ctl = self._controller
        ctl.deliveries.subscriptions.pop(self.id, None)
        if self.id in ctl.state.collections:
            self._dropping = asyncio.ensure_future(self._drop())

    async def _drop(self) -> None:
        ctl = self._controller
        if self.id in ctl.state.collections and not ctl._closed:
            await ctl.drop(self.id)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> SubscribeBatch:
        while not self._items:
            if self._done:
                raise StopAsyncIteration
            self._wake.clear()
            await self._wake.wait()
        item = self._items.popleft()
        if isinstance(item, SubscribeBatch):
            self._queued -= len(item.updates or ())
            return item
        self._done = True
        if item is None:
            raise StopAsyncIteration
        raise item

    async def aclose(self) -> None:
        self._done = True
        if self._dropping is not None:
            await self._dropping
            return
        self._controller.deliveries.subscriptions.pop(self.id, None)
        if self.id in self._controller.state.collections:
            await self._controller.drop(self.id)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
