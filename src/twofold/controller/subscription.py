"""`Subscription`: the caller's side of one subscribe.

Contract: an async iterator over batches `[lower, upper)` that the controller's merger already
made contiguous and exactly-once. It ends when the subscribe completes, raises `SubscribeFailed`
on an error batch or an external drop (`ControllerClosed` when the controller closes), and
`aclose()` drops the subscribe if it is still running.
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING

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

    def _push(self, item: SubscribeBatch | BaseException | None) -> None:
        self._items.append(item)
        self._wake.set()

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
            return item
        self._done = True
        if item is None:
            raise StopAsyncIteration
        raise item

    async def aclose(self) -> None:
        self._done = True
        self._controller.deliveries.subscriptions.pop(self.id, None)
        if self.id in self._controller.state.collections:
            await self._controller.drop(self.id)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
