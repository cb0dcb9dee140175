"""`Queries`: reading relations — one-off queries, key lookups, subscriptions, copy-to.

Contract: plain index reads and key lookups are peeks of the index (a map/filter/project of one
index too); anything else is a transient peek dataflow. Every controller error becomes the API's
typed error naming the relation read.

Reads of storage (a table's or a materialized view's shard: a peek of it, or a transient
dataflow importing it — a one-off query, a subscribe, a copy-to) choose their time under a
`SinceHold` of those shards (`twofold.storage.holds`, as `CatalogSync._install` does for a new
index or view) and keep it until the controller has the dataflow (`storage_holds` then counts
it) or, for a peek of a shard, which no dataflow covers, until the peek is answered: a read at a
time at or after the since when it was chosen is never failed by the controller's critical
reader moving meanwhile. On memory and SQLite, where only an explicit `downgrade_since` moves
since, a default time is checked against the shards' sinces after the choice and chosen again;
a given `as_of` that such a call passed gets `ReadBeforeSince`, as if it were passed before.

A given `as_of` is refused with `ReadBeforeSince` up front when it is before where the hold
holds a shard — the controller's own reader's since on PostgreSQL, which may be later than the
shard's since while another reader (a listener, under a lease) keeps that lower: the time is
readable only as long as that reader stays, which nothing here can make sure of.

A since that still passes the read's time after all these checks (an explicit `downgrade_since`
on memory/SQLite between the check and the replica's read, another controller's reader) fails
the read at the replica; such a failure — one whose message names a since, at a time now before
an input's since — is raised as that `ReadBeforeSince` (for a subscribe: an ending before its
first batch), as promptly as the replica answers, never as the untyped `QueryFailed` /
`SubscribeEnded` it arrives as. A one-off query or copy-to at a default time is then chosen
again instead (a few times, `RECHOOSE`), as a choice the since passed before the read is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from twofold.api.catalog_sync import RECHOOSE, CatalogSync
from twofold.api.errors import (
    InvalidArgument,
    ObjectFailed,
    QueryFailed,
    QueryTimeout,
    ReadBeforeSince,
    SubscribeEnded,
    TwofoldError,
    TypeMismatch,
)
from twofold.api.objects import Index, MaterializedView, Table
from twofold.api.reads import AsyncSubscription, index_mfp, translate
from twofold.api.relation import Relation
from twofold.api.results import Result, expand
from twofold.controller import copy_to_dataflow, subscribe_dataflow
from twofold.protocol import (
    MAX_TIME,
    BuildDesc,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    IndexImport,
    RowSetFinishing,
    SourceImport,
    StorageTarget,
)
from twofold.storage import StorageError
from twofold.storage.holds import SinceHold


class Queries(CatalogSync):
    """Reads; see the module docstring."""

    def _name_of(self, rel: Relation) -> str:
        if isinstance(rel, Table | Index | MaterializedView):
            return f"{type(rel).__name__.lower()} {rel.name!r}"
        if not rel.inputs:
            return "query"
        return "query over " + ", ".join(sorted(i.label for i in rel.inputs.values()))

    def _timeout_of(self, timeout: object, what: str) -> float:
        """`timeout` checked (a positive number of seconds), or the database's for `None`."""
        if timeout is None:
            return self.timeout
        if (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                or not timeout > 0):  # NaN too
            raise InvalidArgument(f"{what}: timeout must be a positive number of seconds "
                                  f"(or None: the database's), got {timeout!r}")
        return float(timeout)

    def _hold_reads(self, rel: Relation) -> SinceHold | contextlib.nullcontext[None]:
        """A hold of the shards `rel` reads from storage, at their sinces now (nothing to hold
        when it reads only indexes; see the module docstring). A closed database says so
        first (`DatabaseClosed`), not that its storage is closed."""
        self._check_open()
        shards = sorted({inp.shard for inp in rel.inputs.values()
                         if inp.kind != "index" and inp.shard is not None})
        if not shards or self.holds is None:
            return contextlib.nullcontext()
        try:
            return self.holds.hold(shards)
        except StorageError as e:
            raise TwofoldError(f"cannot read the inputs of the {self._name_of(rel)}: {e}") from e

    def _held_time(self, rel: Relation, as_of: int | None, hold: SinceHold | None) -> int:
        """`_choose_time` under `hold`: a default time never before a held since, and checked
        against the shards' sinces after the choice (module docstring)."""
        t = self._choose_time(rel, as_of)
        if hold is None:
            return t
        if as_of is None:
            t = max([t, *(f.time for f in hold.since.values() if f.time is not None)])
        else:  # before the held since: readable only while some other reader stays
            labels = {inp.shard: inp.label for inp in rel.inputs.values()
                      if inp.kind != "index"}
            for shard, since in sorted(hold.since.items()):
                if not since.less_equal(Frontier.at(as_of)):
                    raise ReadBeforeSince(labels.get(shard, shard), as_of, since.time)
        for _ in range(RECHOOSE):
            if all(self._storage.shard(s).since.less_equal(Frontier.at(t)) for s in hold.since):
                break
            t = self._choose_time(rel, as_of)  # a given as_of passed: ReadBeforeSince
        return t

    def _since_passed(self, rel: Relation, t: int, hold: SinceHold | None,
                      e: TwofoldError) -> TwofoldError:
        """`e`, or the `ReadBeforeSince` it stands for: the replica failed the read at `t` on
        a since (the message says so) and an input's since is now past `t` (module
        docstring)."""
        if isinstance(e, ObjectFailed) or "since" not in str(e):
            return e
        held = {} if hold is None else hold.since
        for inp in rel.inputs.values():
            try:
                since, _ = self._bounds(inp)
            except ReadBeforeSince:  # no longer readable at all
                return ReadBeforeSince(inp.label, t, None)
            except (TwofoldError, StorageError):  # dropped meanwhile: says nothing of since
                continue
            f = held.get(inp.shard) if inp.shard is not None else None
            if f is not None and f.time is not None:
                since = max(since, f.time)
            if t < since:
                return ReadBeforeSince(inp.label, t, since)
        return e

    @contextlib.contextmanager
    def _typed_since(self, rel: Relation, t: int, hold: SinceHold | None) -> Iterator[None]:
        """A since failure of the read at `t` raised as `ReadBeforeSince` (`_since_passed`)."""
        try:
            yield
        except (QueryFailed, SubscribeEnded) as e:
            better = self._since_passed(rel, t, hold, e)
            if better is e:
                raise
            raise better from e.__cause__ or e

    async def query(self, relation: Relation, *, as_of: int | None = None,
                    timeout: float | None = None) -> Result:
        """Read `relation` at one time (default: now; see the module docstring)."""
        await self._install()  # dataflows adopted on the loop thread (see catalog_sync)
        rel = self._check_relation(relation, "query")
        timeout = self._timeout_of(timeout, "query")
        with self._hold_reads(rel) as hold:
            for attempt in range(RECHOOSE):
                try:
                    return await self._query_held(rel, as_of, timeout, hold)
                except ReadBeforeSince:  # a since passed a default time: chosen again
                    if as_of is not None or attempt == RECHOOSE - 1:
                        raise
        raise AssertionError("unreachable")

    async def _query_held(self, rel: Relation, as_of: int | None, timeout: float,
                          hold: SinceHold | None) -> Result:
        ctl = self._ctl
        t = self._held_time(rel, as_of, hold)
        name = self._name_of(rel)
        finishing = RowSetFinishing(order_by=rel.order) if rel.order else None
        with self._typed_since(rel, t, hold), translate(name):
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
        await self._install()  # dataflows adopted on the loop thread (see catalog_sync)
        self._check_relation(index, "lookup")
        timeout = self._timeout_of(timeout, "lookup")
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
                if type(v) is int and not -(2**63) <= v < 2**63:
                    raise TypeMismatch("lookup", f"key value {v} is outside the int64 range "
                                       "[-2**63, 2**63 - 1]", kname)  # fmt: skip
                row.append(v)
            constraints.append(row)
        t = self._choose_time(index, as_of)
        # At once where a replica in this process has published the index at `t`
        # (`Controller.lookup`), else by a peek.
        with translate(f"index {index.name!r}"):
            rows = await self._ctl.lookup(
                index.id, timestamp=t, literal_constraints=constraints,
                timeout=timeout)
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
        await self._install()  # dataflows adopted on the loop thread (see catalog_sync)
        rel = self._check_relation(relation, "subscribe")
        if up_to is not None and (isinstance(up_to, bool) or not isinstance(up_to, int)
                                  or not 0 <= up_to <= MAX_TIME):
            raise InvalidArgument("subscribe: up_to must be an int timestamp in "
                                  f"[0, 2**64 - 1], got {up_to!r}")
        name = self._name_of(rel)
        # Held until the controller has the dataflow: its as_of then holds the shards.
        with self._hold_reads(rel) as hold:
            t = self._held_time(rel, as_of, hold)
            if up_to is not None and up_to <= t:
                raise InvalidArgument(
                    f"subscribe: up_to {up_to} must be after the start time {t}")
            build, objects, indexes, sources = self._transient_dataflow_parts(rel)
            desc = subscribe_dataflow(
                sink_id=self._ctl.new_transient_id(), from_id=build, desc=rel.schema.desc(),
                index_imports=indexes, source_imports=sources, objects_to_build=objects,
                as_of=Frontier.at(t), with_snapshot=snapshot,
                up_to=None if up_to is None else Frontier.at(up_to),
            )
            with self._typed_since(rel, t, hold), translate(name):
                sub = await self._ctl.subscribe(desc)
        held = hold

        def typed(e: TwofoldError) -> TwofoldError:  # an ending before the first batch
            return self._since_passed(rel, t, held, e)
        return AsyncSubscription(sub, rel.schema, name, t, typed)

    async def copy_to(self, relation: Relation, path: str | Path, *,
                      format: Literal["parquet", "csv"] | None = None,
                      as_of: int | None = None, timeout: float | None = None) -> int:
        """Write `relation` at one time to a Parquet or CSV file (by `format`, else by the
        file's suffix); returns the number of rows written."""
        await self._install()  # dataflows adopted on the loop thread (see catalog_sync)
        rel = self._check_relation(relation, "copy_to")
        timeout = self._timeout_of(timeout, "copy_to")
        target = Path(path).expanduser().resolve()
        fmt = format or {".parquet": "parquet", ".csv": "csv"}.get(target.suffix.lower())
        if fmt not in ("parquet", "csv"):
            raise InvalidArgument(f"copy_to: cannot tell the format of {str(path)!r}; name it "
                                  "*.parquet or *.csv or pass format='parquet'|'csv'")
        with self._hold_reads(rel) as hold:  # held until the copy is written
            for attempt in range(RECHOOSE):
                t = self._held_time(rel, as_of, hold)
                build, objects, indexes, sources = self._transient_dataflow_parts(rel)
                desc = copy_to_dataflow(
                    sink_id=self._ctl.new_transient_id(), from_id=build,
                    desc=rel.schema.desc(), path=str(target), format=fmt, timestamp=t,
                    index_imports=indexes, source_imports=sources, objects_to_build=objects,
                )
                try:
                    with self._typed_since(rel, t, hold), translate(self._name_of(rel)):
                        return await self._copy(rel, desc, timeout)
                except ReadBeforeSince:  # a since passed a default time: chosen again
                    if as_of is not None or attempt == RECHOOSE - 1:
                        raise
        raise AssertionError("unreachable")

    async def _copy(self, rel: Relation, desc: DataflowDescription, timeout: float) -> int:
        """Run the copy-to `desc`; no result within `timeout` is a `QueryTimeout`, as for a
        query (the controller's own timeout says `CopyToFailed`), and cancels it (the
        controller drops its dataflow)."""
        bound = asyncio.timeout(timeout)
        try:
            async with bound:
                return await self._ctl.copy_to(desc)
        except TimeoutError:
            if not bound.expired():
                raise
            raise QueryTimeout(f"reading {self._name_of(rel)}: no answer within {timeout} s"
                               ) from None
