"""Crossing between the asyncio side and a runtime's worker thread.

A runtime's worker loop runs on its own thread; the controller side speaks `ComputeClient` on an
asyncio loop. Two one-way mailboxes connect them:

- `Activator` + `Inbox` (asyncio → worker): `put` appends and sets the worker's activator; the
  worker clears the activator *before* draining, so a put that races with a drain is either taken
  by that drain or leaves the activator set for the next turn — a wakeup is never lost.
- `Outbox` (worker → asyncio): the worker appends responses and wakes a waiting consumer with one
  `call_soon_threadsafe` per flush, not per response. `get` is cancel-safe: an item leaves the
  deque only in the `get` that returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class Activator:
    """Wakes a worker thread. `wait` returns when `activate` was called since the last `clear`."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def activate(self) -> None:
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def clear(self) -> None:
        self._event.clear()


class Inbox(Generic[T]):
    """Items for a worker thread; any thread may `put`, only the worker `drain`s."""

    __slots__ = ("_activator", "_items")

    def __init__(self, activator: Activator) -> None:
        self._items: deque[T] = deque()
        self._activator = activator

    def put(self, item: T) -> None:
        self._items.append(item)  # deque.append is atomic under the GIL
        self._activator.activate()

    def drain(self) -> list[T]:
        out: list[T] = []
        items = self._items
        while items:
            out.append(items.popleft())
        return out

    def __len__(self) -> int:
        return len(self._items)


class OutboxClosed(Exception):
    """Marker for a closed outbox; not raised to users."""


class Outbox(Generic[T]):
    """Items from a worker thread to one asyncio consumer. See the module docstring."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: deque[T] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._error: BaseException | None = None

    def _wake_locked(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            # A closed loop raises RuntimeError: then nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_resolve, w)

    def put_many(self, items: Iterable[T]) -> None:
        with self._lock:
            if self._closed:
                return
            before = len(self._items)
            self._items.extend(items)
            if len(self._items) != before:
                self._wake_locked()

    def put(self, item: T) -> None:
        self.put_many((item,))

    def put_from_loop(self, item: T) -> None:
        """`put`, called on the consumer's event-loop thread."""
        self.put_many_from_loop((item,))

    def put_many_from_loop(self, items: Iterable[T]) -> None:
        """`put_many`, called on the consumer's event-loop thread: the waiter is woken
        directly, without `call_soon_threadsafe`'s write to the loop's self-pipe and the loop
        turn it costs before the consumer runs."""
        with self._lock:
            if self._closed:
                return
            before = len(self._items)
            self._items.extend(items)
            if len(self._items) == before:
                return
            w, self._waiter = self._waiter, None
        if w is not None and not w.done():
            w.set_result(None)

    def close(self, error: BaseException | None = None) -> None:
        """End the stream; after draining, `get` returns `None` (or raises `error`)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._error = error
            self._wake_locked()

    def get_nowait(self) -> T | None:
        with self._lock:
            return self._items.popleft() if self._items else None

    async def get(self) -> T | None:
        while True:
            with self._lock:
                if self._items:
                    return self._items.popleft()
                if self._closed:
                    if self._error is not None:
                        raise self._error
                    return None
                waiter = self._loop.create_future()
                self._waiter = waiter
            try:
                await waiter
            finally:
                with self._lock:
                    if self._waiter is waiter:
                        self._waiter = None

    def __len__(self) -> int:
        return len(self._items)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
