"""`SessionCore`: the state every part of a session shares, and the checks around it.

Contract: a session is one `AsyncDatabase`, assembled from this core, `Inputs` (a relation's
inputs and the time to read them at), `CatalogSync` (following the durable catalog),
`Definitions` (creating, listing and dropping catalog objects) and `Queries` (reads). The core
declares the state they share (set by `AsyncDatabase.__init__`), refuses work on a closed
database (`DatabaseClosed`), runs coroutines on the database's loop for the sync API, and tracks
this session's latest write for read-your-writes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

from twofold.api.errors import DatabaseClosed, TwofoldError
from twofold.api.objects import Index, MaterializedView, Table, View
from twofold.api.portal import run_blocking
from twofold.controller import Controller
from twofold.storage import Storage

T = TypeVar("T")
Consistency = Literal["read-your-writes", "latest"]
DEFAULT_TIMEOUT = 60.0



class SessionCore:
    """The shared state of a session; see the module docstring."""

    url: str
    consistency: Consistency
    timeout: float
    retain_history: float
    storage: Storage | None
    controller: Controller | None
    _catalog: dict[str, Table | Index | MaterializedView | View]
    _last_write: int
    _write_lock: threading.Lock
    _portal: asyncio.AbstractEventLoop | None
    _closed: bool

    def _check_open(self) -> None:
        if self._closed:
            raise DatabaseClosed("the database is closed")
        if self.controller is None:
            raise DatabaseClosed("the database is not open (use `with twofold.open()` or "
                                 "`async with twofold.open_async()`)")

    @property
    def _ctl(self) -> Controller:
        self._check_open()
        assert self.controller is not None
        return self.controller

    @property
    def _storage(self) -> Storage:
        self._check_open()
        assert self.storage is not None
        return self.storage

    def _run_sync(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        """Run `coro` on this database's loop from another thread (the sync API)."""
        if self._closed:
            coro.close()
            raise DatabaseClosed(f"{what}: the database is closed")
        if self._portal is None:
            coro.close()
            raise TwofoldError(f"{what}: this relation belongs to an async database; "
                               f"use `await db.query(rel)` / `await db.lookup(index, ...)`")
        return run_blocking(coro, self._portal)

    def _observe_write(self, ts: int) -> None:
        with self._write_lock:
            self._last_write = max(self._last_write, ts)

