"""`AsyncDatabase`: the async core of the API — storage, replicas, a controller and a catalog.

This module opens and closes a session (storage, replicas, controller, the catalog's restore,
ticker); the rest of `AsyncDatabase` comes from its parts: `core` (shared state and checks),
`inputs` (a relation's inputs and read times), `catalog_sync` (following the durable catalog),
`definitions` (creating, listing, dropping objects) and `queries` (reads).

Contract:
- `open_async()` with no arguments needs no setup: a scratch SQLite file deleted on close (or
  the SQLite file at a given path; `memory://` keeps everything in this process and both
  runtimes on its threads), one in-process replica with two runtimes (maintenance in a child
  process, `spec/placement.md`), a controller, and a ticker that keeps table uppers moving;
  `async with` starts all of it and stops it in reverse order. With
  `replicas=["host:port", ...]` it drives running `twofold replica` processes instead, which
  must share the storage (a SQLite file).
- Reads choose their timestamp: `as_of` if given (`ReadBeforeSince` if it is before any input's
  since), else the latest time every input is complete at — and, with the default
  `consistency="read-your-writes"`, never before this database's latest write, so a read sees
  every write that returned before it. `consistency="latest"` never waits for maintenance.
- Plain index reads and key lookups are peeks of the index; anything else is a peek dataflow.
- Every failure surfaces as a `TwofoldError` subclass (see `twofold.api.errors`).
- Table writes (`Table.insert`...) are short blocking storage calls usable from any thread; on a
  busy event loop, run them with `await asyncio.to_thread(table.insert, rows)`.

Example:

    async with twofold.open_async() as db:
        t = db.create_table("t", {"k": int, "v": float})
        t.insert([(1, 2.5)])
        idx = await db.create_index("by_k", t, key="k")
        rows = (await db.lookup(idx, 1)).rows          # [(1, 2.5)]
        async with await db.subscribe(idx) as sub:
            async for batch in sub: ...
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import threading
import uuid
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any

from twofold.api.core import DEFAULT_TIMEOUT, Consistency
from twofold.api.definitions import Definitions
from twofold.api.errors import ConnectError, InvalidArgument
from twofold.api.objects import Index, MaterializedView, Table, View
from twofold.api.queries import Queries
from twofold.api.remote import DEFAULT_CONNECT_TIMEOUT, connect_replicas, remote_factory
from twofold.api.results import Result, char_padded
from twofold.catalog import Catalog, Entry
from twofold.controller import ConnectFactory, Controller, LagWindow
from twofold.controller.storage_holds import storage_holds
from twofold.protocol import GlobalId, InstanceConfig, LoggingConfig
from twofold.replica import Replica, RuntimesMode, ScratchStorage, needs_shared_storage
from twofold.storage import Storage, StorageError, Ticker, open_storage
from twofold.storage.holds import ControllerHolds
from twofold.storage.identity import storage_id

log = logging.getLogger(__name__)
__all__ = ["DEFAULT_TIMEOUT", "INTROSPECTION_LOGS", "AsyncDatabase", "Consistency",
           "storage_url"]

SQL_SEEN = 256
"""`sql` texts remembered: one seen among the latest this many runs prepared."""
INTROSPECTION_LOGS = ("frontiers", "arrangement_sizes", "peek_durations", "step_durations")
"""The replicas' introspection log variants (`twofold.runtime.introspection`)."""


def storage_url(storage: str | Path | None) -> str:
    """`None` or `memory://` → a private in-memory store (named, so this session's storage and
    its replica share it); a URL passes through; a path → a SQLite file."""
    if storage is None or str(storage) == "memory://":
        return f"memory://twofold-{uuid.uuid4().hex[:12]}"
    text = str(storage)
    if "://" in text or text.startswith("sqlite:"):
        return text
    return f"sqlite:///{Path(text).expanduser().resolve()}"


def _parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise InvalidArgument(f"a replica address is HOST:PORT, got {address!r}")
    return (host or "127.0.0.1").strip("[]"), int(port)


async def _bounded(aw: Coroutine[Any, Any, None], what: str, timeout: float = 5.0) -> None:
    try:
        await asyncio.wait_for(aw, timeout)
    except TimeoutError:
        log.warning("closing the %s took more than %s s; abandoned", what, timeout)


class AsyncDatabase(Definitions, Queries):
    """A twofold database driven from asyncio. See the module docstring; build it with
    `twofold.open_async(...)`."""

    def __init__(
        self,
        storage: str | Path | None = None,
        *,
        replicas: Sequence[str] | None = None,
        token: str | None = None,
        runtimes: RuntimesMode = "two",
        tick_interval: float = 0.05,
        consistency: Consistency = "read-your-writes",
        timeout: float = DEFAULT_TIMEOUT,
        retain_history: float = 1.0,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        tls: ssl.SSLContext | None = None,
        introspection_interval: float | None = None,
    ) -> None:
        if consistency not in ("read-your-writes", "latest"):
            raise InvalidArgument(f"consistency must be 'read-your-writes' or 'latest', "
                                  f"got {consistency!r}")
        if runtimes not in ("one", "two"):
            raise InvalidArgument(f"runtimes must be 'one' or 'two', got {runtimes!r}")
        # No storage named: a scratch SQLite file (deleted on close), which the maintenance
        # process can open too (`spec/placement.md`); in memory when both runtimes are threads.
        self._scratch: ScratchStorage | None = None
        if storage is None and not replicas and needs_shared_storage(runtimes):
            self._scratch = ScratchStorage()
            storage = self._scratch.url
        self.url = storage_url(storage)
        if replicas and self.url.startswith("memory:"):
            raise InvalidArgument("remote replicas cannot share in-memory storage; pass a "
                                  "SQLite file (storage='path/to.db') that they also open")
        self.addresses = [_parse_address(a) for a in replicas or []]
        self.token = token
        self.runtimes: RuntimesMode = runtimes
        self.tick_interval = tick_interval
        self.consistency: Consistency = consistency
        self.timeout = timeout
        self.retain_history = retain_history
        self.connect_timeout = connect_timeout
        self.tls = tls
        self.introspection_logs: dict[str, GlobalId] = {} if introspection_interval is None \
            else {name: GlobalId.introspection(n) for n, name in enumerate(INTROSPECTION_LOGS, 1)}
        """The replicas' introspection indexes by log variant, kept when `introspection_interval`
        (seconds between updates) is given; peek them like any index (`twofold serve`'s
        monitoring relations do)."""
        self._logging = LoggingConfig() if introspection_interval is None else LoggingConfig(
            interval_ms=max(1, int(introspection_interval * 1000)), enable_logging=True,
            index_logs=self.introspection_logs)
        self.storage: Storage | None = None
        self.replica: Replica | None = None
        """The in-process replica (embedded mode), e.g. for its `metrics`."""
        self.controller: Controller | None = None
        self.ticker: Ticker | None = None
        self.holds: ControllerHolds | None = None
        self._catalog: dict[str, Table | Index | MaterializedView | View] = {}
        self._store: Catalog | None = None
        self._seen_version = -1
        self._sql_seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._entries: dict[str, Entry] = {}
        self._sync_lock = threading.RLock()
        self._to_install: list[Index | MaterializedView] = []
        self._to_drop: list[GlobalId] = []
        self._install_lock: asyncio.Lock | None = None
        self._last_write = 0
        self._write_lock = threading.Lock()
        self._portal: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def start(self) -> AsyncDatabase:
        try:
            self.storage = open_storage(self.url)
        except StorageError as e:
            raise ConnectError(f"cannot open storage {self.url!r}: {e}") from e
        factories: list[ConnectFactory] = []
        if self.addresses:
            sid = storage_id(self.storage)
            for host, port in self.addresses:
                factories.append(remote_factory(host, port, self.token, sid, self.tls))
        else:
            self.replica = Replica(self.url, self.runtimes)
            await self.replica.start()
            # A fresh in-process connection per (re)connect: the controller closes connections
            # it owns, and closing one must never close the replica's multiplexer.
            factories.append(self.replica.connect)
        # Remote replicas read their own storage (the handshake checked it is this one): the
        # URL they were started with, which need not be this process's spelling of it.
        remote = bool(self.addresses)
        self.controller = Controller(
            factories, config=InstanceConfig(storage=None if remote else self.url,
                                             logging=self._logging),
            read_policy=LagWindow(int(self.retain_history * 1000)),
            unavailable_after=self.connect_timeout if remote else None,
            names={i: f"{h}:{p}" for i, (h, p) in enumerate(self.addresses, 1)})
        if self.replica is not None:  # in this process: ready lookups answered at once
            self.controller.attach_local_reads(1, self.replica.lookup_now,
                                               self.replica.lookup_now_each)
        await self.controller.start()
        # The controller's critical reader of each shard (PostgreSQL storage): since follows
        # what its dataflows and its read window still need (`twofold.storage.holds`). Made
        # before the catalog is opened: every dataflow (restored ones too) chooses its as_of
        # under a hold of it (`CatalogSync._install`).
        state = self.controller.state
        self.holds = ControllerHolds(self.storage, lambda: storage_holds(state),
                                     window=int(self.retain_history * 1000))
        try:
            await connect_replicas(self.controller, self.connect_timeout)
            await self._open_catalog()
        except BaseException:
            await self.close()
            raise
        self.ticker = Ticker(self.storage, self.tick_interval, holds=self.holds).start()
        return self

    async def close(self) -> None:
        """Stop the ticker, the controller, the replica and the storage (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self.ticker is not None:
            self.ticker.stop()
        # Bounded: a shutdown that hangs in a lower layer must not hang the user's program
        # (seen rarely in testing; see notes/controller-requests.md). What is left is logged.
        if self.controller is not None:
            await _bounded(self.controller.close(), "controller")
        if self.replica is not None:
            await _bounded(self.replica.close(), "replica")
        if self.storage is not None:
            self.storage.close()
        if self._scratch is not None:
            self._scratch.remove()

    async def __aenter__(self) -> AsyncDatabase:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- SQL ------------------------------------------------------------------------------------

    async def sql(self, text: str, params: Sequence[Any] | None = None) -> Any:
        """Run one SQL statement (`twofold.sql`): a query returns a `Result`, `INSERT`/
        `UPDATE`/`DELETE` the row count, `CREATE` the object, `SUBSCRIBE` an
        `AsyncSubscription`; `$1, $2, ...` take `params`. Errors are `TwofoldError`s carrying
        a SQLSTATE (`twofold.sql.errors.sqlstate_of`)."""
        from twofold.sql import execute  # the SQL layer sits above the API
        from twofold.sql.prepared import statement

        # A text seen before runs as a prepared statement (parsed and planned once per
        # parameter types; a point query keeps its index lookup); a first one runs as is.
        seen = self._sql_seen
        if text in seen:
            seen.move_to_end(text)
            out = await statement(self, text).execute(params)
        else:
            seen[text] = None
            if len(seen) > SQL_SEEN:
                seen.popitem(last=False)
            out = await execute(self, text, params)
        # a char(n) column reads blank-padded, as PostgreSQL's (and the pgwire server's)
        return char_padded(out) if isinstance(out, Result) else out
