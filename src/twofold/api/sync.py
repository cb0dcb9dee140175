"""`Database`: the synchronous API, and the `open` / `open_async` entry points.

Contract: a `Database` runs an `AsyncDatabase` on a private event-loop thread that it owns: it
starts the thread and the database on creation (or `with`), runs every call there and blocks
for the answer, and `close()` stops the database, then the loop, then joins the thread. Errors
raised by the core reach the caller unchanged (the typed `TwofoldError`s). Relations built from
a `Database`'s tables read synchronously with `collect()`.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from twofold.api.errors import DatabaseClosed
from twofold.api.objects import Index, MaterializedView, Table, View
from twofold.api.portal import run_blocking
from twofold.api.reads import AsyncSubscription
from twofold.api.relation import Relation
from twofold.api.remote import DEFAULT_CONNECT_TIMEOUT
from twofold.api.results import Batch, Result
from twofold.api.schema import DType, Schema
from twofold.api.session import AsyncDatabase, Consistency
from twofold.protocol import Frontier
from twofold.replica import RuntimesMode

T = TypeVar("T")


class SyncSubscription:
    """Blocking iteration over a subscribed relation's `Batch`es; `close()` (or `with`) stops
    it."""

    def __init__(self, db: Database, inner: AsyncSubscription) -> None:
        self._db = db
        self._inner = inner
        self.schema = inner.schema
        self.as_of = inner.as_of

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        try:
            return self._db._call(self._inner.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def bound_backlog(self, updates: int) -> None:
        """`AsyncSubscription.bound_backlog`: past `updates` waiting beyond the batch being
        read, the subscription ends (`SubscribeBacklogFull` at the next read)."""
        async def bound() -> None:
            self._inner.bound_backlog(updates)

        self._db._call(bound())

    def next(self, timeout: float | None = None) -> Batch:
        """The next batch, waiting at most `timeout` seconds (`TimeoutError`)."""
        async def nxt() -> Batch:
            return await asyncio.wait_for(self._inner.__anext__(), timeout)

        return self._db._call(nxt())

    def close(self) -> None:
        if not self._db.closed:
            self._db._call(self._inner.aclose())

    def __enter__(self) -> SyncSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Database:
    """A twofold database with a blocking API. Create it with `twofold.open(...)`; the
    arguments are those of `AsyncDatabase`."""

    def __init__(self, storage: str | Path | None = None, **options: Any) -> None:
        self.core = AsyncDatabase(storage, **options)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="twofold-api",
                                        daemon=True)
        self._thread.start()
        self.core._portal = self._loop
        self.closed = False
        try:
            self._call(self.core.start())
        except BaseException:
            self.close()
            raise

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.closed:
            coro.close()
            raise DatabaseClosed("the database is closed")
        return run_blocking(coro, self._loop)

    def close(self) -> None:
        """Stop everything this database started (idempotent)."""
        if self.closed:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.core.close(), self._loop).result()
        finally:
            self.closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<Database {self.core.url!r} runtimes={self.core.runtimes} {state}>"

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API: see AsyncDatabase for each method's contract ------------------------------

    @property
    def replica(self) -> Any:
        """The in-process replica (embedded mode), with its `metrics`."""
        return self.core.replica

    @property
    def controller(self) -> Any:
        return self.core.controller

    def create_table(self, name: str, schema: dict[str, DType] | Schema, *,
                     nullable: bool | Sequence[str] = True, exist_ok: bool = False,
                     primary_key: str | Sequence[str] | None = None) -> Table:
        return self.core.create_table(name, schema, nullable=nullable, exist_ok=exist_ok,
                                      primary_key=primary_key)

    create_table.__doc__ = AsyncDatabase.create_table.__doc__

    def table(self, name: str) -> Table:
        return self.core.table(name)

    def tables(self) -> list[str]:
        return self.core.tables()

    def indexes(self) -> list[str]:
        return self.core.indexes()

    def views(self) -> list[str]:
        return self.core.views()

    def objects(self) -> list[tuple[str, str]]:
        return self.core.objects()

    objects.__doc__ = AsyncDatabase.objects.__doc__

    def get(self, name: str) -> Table | Index | MaterializedView | View:
        return self.core.get(name)

    def create_view(self, name: str, relation: Relation, *, exist_ok: bool = False,
                    sql: str | None = None) -> View:
        return self.core.create_view(name, relation, exist_ok=exist_ok, sql=sql)

    create_view.__doc__ = AsyncDatabase.create_view.__doc__

    def now(self) -> int:
        return self.core.now()

    def frontier(self, obj: Table | Index | MaterializedView | View | str) -> Frontier:
        result: Frontier = self._call(_sync_in_loop(self.core.frontier, obj))
        return result

    def create_index(self, name: str, relation: Relation, key: str | Sequence[str], *,
                     retain_history: float | None = None, exist_ok: bool = False) -> Index:
        return self._call(self.core.create_index(name, relation, key,
                                                 retain_history=retain_history,
                                                 exist_ok=exist_ok))

    create_index.__doc__ = AsyncDatabase.create_index.__doc__

    def create_materialized_view(self, name: str, relation: Relation, *,
                                 exist_ok: bool = False) -> MaterializedView:
        return self._call(self.core.create_materialized_view(name, relation,
                                                             exist_ok=exist_ok))

    create_materialized_view.__doc__ = AsyncDatabase.create_materialized_view.__doc__

    def drop(self, obj: Table | Index | MaterializedView | View | str, *,
             cascade: bool = False) -> None:
        self._call(self.core.drop(obj, cascade=cascade))

    drop.__doc__ = AsyncDatabase.drop.__doc__

    def query(self, relation: Relation, *, as_of: int | None = None,
              timeout: float | None = None) -> Result:
        return self._call(self.core.query(relation, as_of=as_of, timeout=timeout))

    query.__doc__ = AsyncDatabase.query.__doc__

    def lookup(self, index: Index, *keys: Any, as_of: int | None = None,
               timeout: float | None = None) -> Result:
        return self._call(self.core.lookup(index, *keys, as_of=as_of, timeout=timeout))

    lookup.__doc__ = AsyncDatabase.lookup.__doc__

    def subscribe(self, relation: Relation, *, as_of: int | None = None,
                  snapshot: bool = True, up_to: int | None = None) -> SyncSubscription:
        inner = self._call(self.core.subscribe(relation, as_of=as_of, snapshot=snapshot,
                                               up_to=up_to))
        return SyncSubscription(self, inner)

    subscribe.__doc__ = AsyncDatabase.subscribe.__doc__

    def copy_to(self, relation: Relation, path: str | Path, *,
                format: Literal["parquet", "csv"] | None = None, as_of: int | None = None,
                timeout: float | None = None) -> int:
        return self._call(self.core.copy_to(relation, path, format=format, as_of=as_of,
                                            timeout=timeout))

    copy_to.__doc__ = AsyncDatabase.copy_to.__doc__

    def sql(self, text: str, params: Sequence[Any] | None = None) -> Any:
        result = self._call(self.core.sql(text, params))
        if isinstance(result, AsyncSubscription):
            return SyncSubscription(self, result)
        return result

    sql.__doc__ = AsyncDatabase.sql.__doc__


async def _sync_in_loop(fn: Any, *args: Any) -> Any:
    # Controller state is owned by the loop thread; read it there.
    return fn(*args)


def open(
    storage: str | Path | None = None,
    *,
    replicas: Sequence[str] | None = None,
    token: str | None = None,
    runtimes: RuntimesMode = "two",
    tick_interval: float = 0.05,
    consistency: Consistency = "read-your-writes",
    timeout: float = 60.0,
    retain_history: float = 1.0,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    tls: ssl.SSLContext | None = None,
) -> Database:
    """Open a twofold database (blocking API); use it with `with`.

    `storage`: `None` (a scratch SQLite file, deleted on close), a file path (a SQLite file), or
    a URL (`sqlite:///...`, `memory://name`: in this process only, so both runtimes run on its
    threads instead of maintenance in a process of its own). `replicas`: addresses (`host:port`)
    of running `twofold replica` processes to drive instead of an in-process replica
    (`runtimes`: "two" or "one"), with the shared `token` if they require one. `timeout`:
    seconds a read waits for its answer (`QueryTimeout`). `connect_timeout`: seconds `open`
    waits for every replica to connect, and a read waits while every replica is unreachable,
    before `ConnectionFailed` (a refused token, `AuthenticationFailed`, and other refusals fail
    at once, naming the address).

    `tls`: an `ssl.SSLContext` for replicas serving TLS (`twofold replica --tls-cert ...`), e.g.
    `ssl.create_default_context(cafile="cert.pem")`; a mismatch either way is `ConnectionFailed`.

    >>> import twofold
    >>> with twofold.open() as db:
    ...     t = db.create_table("t", {"x": int})
    ...     _ = t.insert([(1,), (2,)])
    ...     t.filter(twofold.col("x") > 1).collect().rows
    [(2,)]
    """
    return Database(storage, replicas=replicas, token=token, runtimes=runtimes,
                    tick_interval=tick_interval, consistency=consistency, timeout=timeout,
                    retain_history=retain_history, connect_timeout=connect_timeout,
                    tls=tls)


def open_async(
    storage: str | Path | None = None,
    *,
    replicas: Sequence[str] | None = None,
    token: str | None = None,
    runtimes: RuntimesMode = "two",
    tick_interval: float = 0.05,
    consistency: Consistency = "read-your-writes",
    timeout: float = 60.0,
    retain_history: float = 1.0,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    tls: ssl.SSLContext | None = None,
) -> AsyncDatabase:
    """Like `open`, for asyncio: `async with twofold.open_async() as db: ...`."""
    return AsyncDatabase(storage, replicas=replicas, token=token, runtimes=runtimes,
                         tick_interval=tick_interval, consistency=consistency, timeout=timeout,
                         retain_history=retain_history, connect_timeout=connect_timeout,
                         tls=tls)
