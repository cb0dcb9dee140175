"""`AsyncDatabase`: the async core of the API — storage, replicas, a controller and a catalog.

Contract:
- `open_async()` with no arguments needs no setup: an in-memory storage (or a SQLite file when
  given a path), one in-process replica with two runtimes, a controller, and a ticker that keeps
  table uppers moving; `async with` starts all of it and stops it in reverse order. With
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
import itertools
import logging
import threading
import uuid
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from twofold.api.errors import (
    ConnectError,
    DatabaseClosed,
    DependencyError,
    InvalidArgument,
    ObjectExists,
    ReadBeforeSince,
    TwofoldError,
    TypeMismatch,
    UnknownObject,
)
from twofold.api.objects import Index, MaterializedView, Table
from twofold.api.reads import AsyncSubscription, index_mfp, translate
from twofold.api.relation import Input, Relation
from twofold.api.results import Result, expand
from twofold.api.schema import DType, Schema, parse_schema
from twofold.client import ComputeClient
from twofold.controller import (
    ConnectFactory,
    Controller,
    LagWindow,
    UnknownCollection,
    copy_to_dataflow,
    subscribe_dataflow,
)
from twofold.protocol import (
    BuildDesc,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    IndexImport,
    InstanceConfig,
    MaterializedViewSink,
    RowSetFinishing,
    SinkDesc,
    SourceImport,
    StorageTarget,
)
from twofold.replica import Replica, RuntimesMode
from twofold.storage import Storage, StorageError, Ticker, open_storage
from twofold.storage import TableExists as StorageTableExists

T = TypeVar("T")
log = logging.getLogger(__name__)
Consistency = Literal["read-your-writes", "latest"]
DEFAULT_TIMEOUT = 60.0


def storage_url(storage: str | Path | None) -> str:
    """`None` → a private in-memory store; a URL passes through; a path → a SQLite file."""
    if storage is None:
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


class AsyncDatabase:
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
    ) -> None:
        if consistency not in ("read-your-writes", "latest"):
            raise InvalidArgument(f"consistency must be 'read-your-writes' or 'latest', "
                                  f"got {consistency!r}")
        if runtimes not in ("one", "two"):
            raise InvalidArgument(f"runtimes must be 'one' or 'two', got {runtimes!r}")
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
        self.storage: Storage | None = None
        self.replica: Replica | None = None
        """The in-process replica (embedded mode), e.g. for its `metrics`."""
        self.controller: Controller | None = None
        self.ticker: Ticker | None = None
        self._catalog: dict[str, Table | Index | MaterializedView] = {}
        self._dependents: dict[str, set[str]] = {}
        self._ids = itertools.count(1)
        self._last_write = 0
        self._write_lock = threading.Lock()
        self._portal: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> AsyncDatabase:
        try:
            self.storage = open_storage(self.url)
        except StorageError as e:
            raise ConnectError(f"cannot open storage {self.url!r}: {e}") from e
        factories: list[ConnectFactory] = []
        if self.addresses:
            for host, port in self.addresses:
                factories.append(self._remote(host, port))
        else:
            self.replica = Replica(self.url, self.runtimes)
            await self.replica.start()
            # A fresh in-process connection per (re)connect: the controller closes connections
            # it owns, and closing one must never close the replica's multiplexer.
            factories.append(self.replica.connect)
        self.controller = Controller(factories, config=InstanceConfig(storage=self.url),
                                     read_policy=LagWindow(int(self.retain_history * 1000)))
        await self.controller.start()
        self.ticker = Ticker(self.storage, self.tick_interval).start()
        return self

    def _remote(self, host: str, port: int) -> ConnectFactory:
        from twofold.transport import connect

        async def factory() -> ComputeClient:
            return await connect(host, port, token=self.token)

        return factory

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

    async def __aenter__(self) -> AsyncDatabase:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
        return asyncio.run_coroutine_threadsafe(coro, self._portal).result()

    def _observe_write(self, ts: int) -> None:
        with self._write_lock:
            self._last_write = max(self._last_write, ts)

    def _new_id(self) -> GlobalId:
        return GlobalId.user(next(self._ids))

    # -- catalog ----------------------------------------------------------------------------

    def create_table(self, name: str, schema: dict[str, DType] | Schema, *,
                     nullable: bool | Sequence[str] = True, exist_ok: bool = False) -> Table:
        """Create a table: `create_table("orders", {"id": int, "amount": float},
        nullable=["amount"])`. `exist_ok=True` returns an existing table of the same schema."""
        self._check_name(name)
        parsed = parse_schema(schema, nullable=nullable, what=f"create_table {name!r}")
        if name in self._catalog and not exist_ok:
            raise ObjectExists(f"{name!r} already exists ({self._catalog[name]!r})")
        try:
            t = self._storage.create_table(name, parsed.desc(), exist_ok=exist_ok)
        except StorageTableExists as e:
            raise ObjectExists(f"create_table: {e}") from e
        except StorageError as e:
            raise InvalidArgument(f"create_table {name!r}: {e}") from e
        return self._register_table(name, t)

    def _register_table(self, name: str, t: Any) -> Table:
        existing = self._catalog.get(name)
        if isinstance(existing, Table):
            return existing
        table = Table(self, name, self._new_id(), t)
        self._catalog[name] = table
        return table

    def table(self, name: str) -> Table:
        """The table `name` (also one created earlier in the same storage file)."""
        obj = self._catalog.get(name)
        if isinstance(obj, Table):
            return obj
        if name in self._storage.list_tables():
            return self._register_table(name, self._storage.table(name))
        raise UnknownObject(name, "table", self.tables())

    def tables(self) -> list[str]:
        return sorted(set(self._storage.list_tables()))

    def get(self, name: str) -> Table | Index | MaterializedView:
        """The table, index or materialized view called `name`."""
        obj = self._catalog.get(name)
        if obj is None:
            if name in self._storage.list_tables():
                return self.table(name)
            raise UnknownObject(name, "table, index or view", sorted(self._catalog))
        return obj

    def _check_name(self, name: str) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise InvalidArgument(f"a name must be a non-empty string without '/', got {name!r}")

    def _check_relation(self, rel: object, what: str) -> Relation:
        if not isinstance(rel, Relation):
            raise InvalidArgument(f"{what}: expected a Relation, got {type(rel).__name__}")
        if rel._db is not self:
            raise InvalidArgument(f"{what}: the relation belongs to another database")
        for inp in rel.inputs.values():
            obj = self._catalog.get(inp.name)
            if obj is None or inp.id not in obj.inputs:
                raise UnknownObject(inp.name, f"{inp.kind} (was it dropped?)",
                                    sorted(self._catalog))
        return rel

    def _imports(self, rel: Relation) -> tuple[dict[GlobalId, IndexImport],
                                               dict[GlobalId, SourceImport]]:
        indexes: dict[GlobalId, IndexImport] = {}
        sources: dict[GlobalId, SourceImport] = {}
        for gid, inp in rel.inputs.items():
            if inp.kind == "index":
                assert inp.index is not None
                indexes[gid] = IndexImport(desc=inp.index, relation=inp.schema.desc())
            else:
                assert inp.shard is not None
                sources[gid] = SourceImport(shard=inp.shard, desc=inp.schema.desc())
        return indexes, sources

    def _bounds(self, inp: Input) -> tuple[int, int | None]:
        """`(since, latest complete time or None)` of one input."""
        if inp.kind == "index":
            try:
                since, upper = self._ctl.since(inp.id), self._ctl.frontier(inp.id)
            except UnknownCollection:
                raise UnknownObject(inp.name, "index (was it dropped?)",
                                    sorted(self._catalog)) from None
        else:
            assert inp.shard is not None
            shard = self._storage.shard(inp.shard)
            since, upper = shard.since, shard.upper
            view = self._catalog.get(inp.name)
            if isinstance(view, MaterializedView):
                # Before its as_of a view's shard is empty, not the view's contents: reading
                # there would silently miss every write the view was created after.
                since = since.join(Frontier.at(view.as_of))
        if since.is_empty:
            raise ReadBeforeSince(inp.label, 0, None)
        s = since.time
        assert s is not None
        latest = upper.step_back()
        return s, latest

    def _choose_time(self, rel: Relation, as_of: int | None, *, ryw: bool = True) -> int:
        if as_of is not None and (isinstance(as_of, bool) or not isinstance(as_of, int)
                                  or as_of < 0):
            raise InvalidArgument(f"as_of must be a non-negative int timestamp, got {as_of!r}")
        floor = 0
        latest: int | None = None
        for inp in rel.inputs.values():
            since, complete = self._bounds(inp)
            if as_of is not None and as_of < since:
                raise ReadBeforeSince(inp.label, as_of, since)
            floor = max(floor, since)
            if complete is not None:
                latest = complete if latest is None else min(latest, complete)
        if as_of is not None:
            return as_of
        t = max(floor, latest if latest is not None else floor)
        if not rel.inputs:
            t = self._storage.oracle.read_ts()
        if ryw and self.consistency == "read-your-writes":
            with self._write_lock:
                t = max(t, self._last_write)
        return t

    def now(self) -> int:
        """The latest timestamp handed out to a write or a tick."""
        return self._storage.oracle.read_ts()

    def frontier(self, obj: Table | Index | MaterializedView | str) -> Frontier:
        """The write frontier (`upper`) of a table, index or view: every earlier time is
        complete."""
        if isinstance(obj, str):
            obj = self.get(obj)
        if isinstance(obj, Index):
            return self._ctl.frontier(obj.id)
        if isinstance(obj, Table):
            return obj.upper
        return self._storage.shard(obj.shard).upper

    # -- indexes and views ------------------------------------------------------------------

    def _as_of_for(self, rel: Relation) -> Frontier:
        return Frontier.at(self._choose_time(rel, None, ryw=False))

    def _track(self, name: str, rel: Relation) -> None:
        for inp in rel.inputs.values():
            self._dependents.setdefault(inp.name, set()).add(name)

    async def create_index(self, name: str, relation: Relation, key: str | Sequence[str], *,
                           retain_history: float | None = None) -> Index:
        """Maintain `relation` as an arrangement keyed by `key` on the replicas. Reads of it
        (and `lookup` by key) are answered from the maintained state. `retain_history`
        (seconds) keeps that much history readable with `as_of`."""
        self._check_name(name)
        rel = self._check_relation(relation, "create_index")
        if name in self._catalog:
            raise ObjectExists(f"{name!r} already exists ({self._catalog[name]!r})")
        keys = [key] if isinstance(key, str) else list(key)
        if not keys:
            raise InvalidArgument("create_index: key must name at least one column")
        build, gid = self._new_id(), self._new_id()
        index = Index(self, name, gid, build, keys, rel.schema, rel)
        assert index.inputs[gid].index is not None
        indexes, sources = self._imports(rel)
        desc = DataflowDescription(
            debug_name=f"index {name}",
            source_imports=sources,
            index_imports=indexes,
            objects_to_build=[BuildDesc(id=build, plan=rel.plan)],
            index_exports={gid: (index.inputs[gid].index, rel.schema.desc())},  # type: ignore[dict-item]
            as_of=self._as_of_for(rel),
        )
        policy = None if retain_history is None else LagWindow(int(retain_history * 1000))
        with translate(f"index {name!r}"):
            await self._ctl.create_dataflow(desc, read_policy=policy)
        self._catalog[name] = index
        self._track(name, rel)
        return index

    async def create_materialized_view(self, name: str, relation: Relation) -> MaterializedView:
        """Maintain `relation` into the storage shard `mv/<name>`; read it like a table."""
        self._check_name(name)
        rel = self._check_relation(relation, "create_materialized_view")
        if name in self._catalog:
            raise ObjectExists(f"{name!r} already exists ({self._catalog[name]!r})")
        shard = f"mv/{name}"
        try:
            self._storage.create_shard(shard, rel.schema.desc())
        except StorageError as e:
            raise ObjectExists(f"create_materialized_view {name!r}: {e}") from e
        build, sink, read_id = self._new_id(), self._new_id(), self._new_id()
        indexes, sources = self._imports(rel)
        desc = DataflowDescription(
            debug_name=f"materialized view {name}",
            source_imports=sources,
            index_imports=indexes,
            objects_to_build=[BuildDesc(id=build, plan=rel.plan)],
            sink_exports={sink: SinkDesc(from_id=build, from_desc=rel.schema.desc(),
                                         connection=MaterializedViewSink(shard=shard))},
            as_of=self._as_of_for(rel),
        )
        with translate(f"materialized view {name!r}"):
            desc = await self._ctl.create_dataflow(desc)
        assert desc.as_of is not None and desc.as_of.time is not None
        view = MaterializedView(self, name, sink, read_id, shard, rel.schema, rel,
                                desc.as_of.time)
        self._catalog[name] = view
        self._track(name, rel)
        return view

    async def drop(self, obj: Index | MaterializedView | str) -> None:
        """Stop maintaining an index or view. Refused (`DependencyError`) while other
        indexes or views read it; tables cannot be dropped."""
        name = obj if isinstance(obj, str) else getattr(obj, "name", None)
        if not isinstance(name, str):
            raise InvalidArgument(f"drop: expected a name, Index or MaterializedView, got {obj!r}")
        target = self.get(name)
        if isinstance(target, Table):
            raise InvalidArgument(f"drop: {name!r} is a table; tables live in storage and "
                                  "cannot be dropped")
        dependents = sorted(d for d in self._dependents.get(name, set()) if d in self._catalog)
        if dependents:
            raise DependencyError(f"drop: {name!r} is read by {dependents}; drop those first")
        with translate(repr(name)):
            await self._ctl.drop(target.id)
        del self._catalog[name]
        for deps in self._dependents.values():
            deps.discard(name)

    # -- reads ------------------------------------------------------------------------------

    def _name_of(self, rel: Relation) -> str:
        if isinstance(rel, Table | Index | MaterializedView):
            return f"{type(rel).__name__.lower()} {rel.name!r}"
        return "query over " + ", ".join(sorted(i.label for i in rel.inputs.values()))

    async def query(self, relation: Relation, *, as_of: int | None = None,
                    timeout: float | None = None) -> Result:
        """Read `relation` at one time (default: now; see the module docstring)."""
        rel = self._check_relation(relation, "query")
        ctl = self._ctl
        t = self._choose_time(rel, as_of)
        timeout = self.timeout if timeout is None else timeout
        name = self._name_of(rel)
        finishing = RowSetFinishing(order_by=rel.order) if rel.order else None
        with translate(name):
            peekable = index_mfp(rel)
            if peekable is not None:
                # A map/filter/project of one index needs no dataflow: the replica applies it
                # while reading the arrangement (on interactive, with two runtimes).
                gid, mfp = peekable
                rows = await ctl.peek(gid, timestamp=t, mfp=mfp, finishing=finishing,
                                      result_desc=rel.schema.desc(), timeout=timeout)
            elif isinstance(rel.plan, Get) and len(rel.inputs) == 1:
                inp = rel.inputs[rel.plan.id]
                if inp.kind == "index":
                    rows = await ctl.peek(inp.id, timestamp=t, finishing=finishing,
                                          timeout=timeout)
                else:
                    assert inp.shard is not None
                    rows = await ctl.peek(StorageTarget(id=inp.id, shard=inp.shard),
                                          timestamp=t, finishing=finishing, timeout=timeout)
            else:
                indexes, sources = self._imports(rel)
                rows = await ctl.peek_query(rel.plan, rel.schema.desc(), index_imports=indexes,
                                            source_imports=sources, timestamp=t,
                                            finishing=finishing, timeout=timeout)
        return Result(rel.schema, t, expand(rows))

    async def lookup(self, index: Index, *keys: Any, as_of: int | None = None,
                     timeout: float | None = None) -> Result:
        """The rows of `index` whose key equals one of `keys`: a scalar each for a one-column
        key, else tuples in key order. Answered by the index's arrangement."""
        if not isinstance(index, Index):
            raise InvalidArgument(f"lookup: expected an Index, got {type(index).__name__}")
        self._check_relation(index, "lookup")
        if not keys:
            raise InvalidArgument("lookup: give at least one key")
        types = [index.schema.type_of(k, "lookup") for k in index.key]
        constraints: list[list[Any]] = []
        for k in keys:
            values = list(k) if isinstance(k, tuple | list) else [k]
            if len(values) != len(types):
                raise InvalidArgument(f"lookup on index {index.name!r}: a key has "
                                      f"{len(types)} values {index.key}, got {k!r}")
            row = []
            for v, ty, kname in zip(values, types, index.key, strict=True):
                if v is not None and type(v) is int and ty.scalar == "float":
                    v = float(v)
                if v is not None and {bool: "bool", int: "int", float: "float", str: "str",
                                      bytes: "bytes"}.get(type(v)) != ty.scalar:
                    raise TypeMismatch("lookup", f"key value {v!r} is not a {ty.scalar}",
                                       kname)
                row.append(v)
            constraints.append(row)
        t = self._choose_time(index, as_of)
        with translate(f"index {index.name!r}"):
            rows = await self._ctl.peek(index.id, timestamp=t, literal_constraints=constraints,
                                        timeout=self.timeout if timeout is None else timeout)
        return Result(index.schema, t, expand(rows))

    def _transient_dataflow_parts(
        self, rel: Relation
    ) -> tuple[GlobalId, list[BuildDesc], dict[GlobalId, IndexImport],
               dict[GlobalId, SourceImport]]:
        indexes, sources = self._imports(rel)
        build = self._ctl.new_transient_id()
        return build, [BuildDesc(id=build, plan=rel.plan)], indexes, sources

    async def subscribe(self, relation: Relation, *, as_of: int | None = None,
                        snapshot: bool = True, up_to: int | None = None) -> AsyncSubscription:
        """Follow `relation`'s changes: the contents at the start time first (unless
        `snapshot=False`), then a `Batch` per step. Ends at `up_to` if given."""
        rel = self._check_relation(relation, "subscribe")
        t = self._choose_time(rel, as_of)
        if up_to is not None and up_to <= t:
            raise InvalidArgument(f"subscribe: up_to {up_to} must be after the start time {t}")
        build, objects, indexes, sources = self._transient_dataflow_parts(rel)
        desc = subscribe_dataflow(
            sink_id=self._ctl.new_transient_id(), from_id=build, desc=rel.schema.desc(),
            index_imports=indexes, source_imports=sources, objects_to_build=objects,
            as_of=Frontier.at(t), with_snapshot=snapshot,
            up_to=None if up_to is None else Frontier.at(up_to),
        )
        name = self._name_of(rel)
        with translate(name):
            sub = await self._ctl.subscribe(desc)
        return AsyncSubscription(sub, rel.schema, name, t)

    async def copy_to(self, relation: Relation, path: str | Path, *,
                      format: Literal["parquet", "csv"] | None = None,
                      as_of: int | None = None, timeout: float | None = None) -> int:
        """Write `relation` at one time to a Parquet or CSV file (by `format`, else by the
        file's suffix); returns the number of rows written."""
        rel = self._check_relation(relation, "copy_to")
        target = Path(path).expanduser().resolve()
        fmt = format or {".parquet": "parquet", ".csv": "csv"}.get(target.suffix.lower())
        if fmt not in ("parquet", "csv"):
            raise InvalidArgument(f"copy_to: cannot tell the format of {str(path)!r}; name it "
                                  "*.parquet or *.csv or pass format='parquet'|'csv'")
        t = self._choose_time(rel, as_of)
        build, objects, indexes, sources = self._transient_dataflow_parts(rel)
        desc = copy_to_dataflow(
            sink_id=self._ctl.new_transient_id(), from_id=build, desc=rel.schema.desc(),
            path=str(target), format=fmt, timestamp=t, index_imports=indexes,
            source_imports=sources, objects_to_build=objects,
        )
        with translate(self._name_of(rel)):
            return await self._ctl.copy_to(
                desc, timeout=self.timeout if timeout is None else timeout)
