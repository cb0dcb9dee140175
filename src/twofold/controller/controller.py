"""The async `Controller`: drives several replicas of one compute instance, and reads from them.

Contract (`spec/controller.md`): everything of `InstanceDriver` (`driver.py`: connections,
replay, responses, availability, collections), plus the reads: peeks complete on the first
answer from any replica and hold their target at their timestamp until then; arbitrary queries
become transient single-time peek dataflows, dropped whatever the outcome; subscribes yield
contiguous batches exactly once; copy-tos deliver their first result. A read abandoned (timed
out, cancelled, or failed because no replica is available) is cancelled at the replicas and
releases its hold.

`peek_now` is a point lookup's synchronous fast path for a replica in this process that offered one
(`attach_local_reads`): at the time `peek` would choose (or the given one, never before the
since), it asks that replica to answer from an arrangement it has already published, with no
command sent, nothing held and no await; it returns None whenever that cannot answer at once
(then `peek` does, with its errors). The answer is the index's contents at that time — the same
rows any replica's `Peek` gives, as an arrangement readable at `t` (`since <= t < upper`)
holds exactly those.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from uuid import UUID, uuid4

from twofold.controller.dataflows import peek_dataflow
from twofold.controller.driver import InstanceDriver
from twofold.controller.errors import (
    CopyToFailed,
    InvalidRead,
    PeekCancelled,
    PeekFailed,
    PeekTimeout,
    SinceViolation,
)
from twofold.controller.frontiers import ReplicaId
from twofold.controller.holds import ReadPolicy
from twofold.controller.state import CollectionKind, CollectionState
from twofold.controller.subscription import Subscription
from twofold.protocol import (
    DataflowDescription,
    GlobalId,
    IndexImport,
    IndexTarget,
    MapFilterProject,
    PeekCanceled,
    PeekError,
    PeekResult,
    PeekTarget,
    Plan,
    RelationDesc,
    Row,
    RowSetFinishing,
    SourceImport,
)

log = logging.getLogger(__name__)

LocalReads = Callable[[GlobalId, int, list[Row], MapFilterProject | None,
                       RowSetFinishing | None], list[tuple[Row, int]] | None]
"""A replica in this process answering a ready point lookup at once — index, time, keys, mfp,
finishing — with a `Peek`'s rows, or None."""

LocalReadsEach = Callable[
    [GlobalId, int, Sequence[tuple[list[Row], MapFilterProject | None, RowSetFinishing | None]]],
    list[list[tuple[Row, int]] | None] | None]
"""`LocalReads` of several lookups of one index at one time, the shared checks once: a list of
rows or None per lookup, or None for all."""


class Controller(InstanceDriver):
    """Drives the replicas of one instance. Use `async with Controller(...) as c:`."""

    _local_reads: dict[ReplicaId, LocalReads] | None = None
    _local_each: dict[ReplicaId, LocalReadsEach] | None = None

    # -- peeks ------------------------------------------------------------------------------

    def attach_local_reads(self, replica: ReplicaId, reads: LocalReads,
                           each: LocalReadsEach | None = None) -> None:
        """`replica` runs in this process and answers ready peeks synchronously with `reads`
        (`peek_now`), and several at once with `each` if given (`peek_now_latest_each`); used
        only while the replica is connected."""
        if self._local_reads is None:
            self._local_reads = {}
        self._local_reads[replica] = reads
        if each is not None:
            if self._local_each is None:
                self._local_each = {}
            self._local_each[replica] = each

    def peek_now(
        self,
        target: GlobalId,
        *,
        timestamp: int | None = None,
        literal_constraints: list[Row],
        mfp: MapFilterProject | None = None,
        finishing: RowSetFinishing | None = None,
    ) -> list[tuple[Row, int]] | None:
        """`peek(target, ...)`'s rows for the keys `literal_constraints` now, from a connected
        replica in this process that can answer index `target` at the time without waiting
        (module docstring), else None: not an index, failed, unknown, before its since, not
        yet published that far, an error, or no such replica. Never raises for those; `peek`
        then answers or raises."""
        reads = self._local_reads
        if not reads or self._local_index(target) is None:
            return None
        try:
            ts = self.state.choose_timestamp(target, timestamp)
        except SinceViolation:
            return None
        return self._read_local(reads, target, ts, literal_constraints, mfp, finishing)

    def peek_now_latest(
        self,
        target: GlobalId,
        *,
        not_before: int,
        literal_constraints: list[Row],
        mfp: MapFilterProject | None = None,
        finishing: RowSetFinishing | None = None,
    ) -> tuple[int, list[tuple[Row, int]]] | None:
        """`peek_now` at the latest time `target` is readable, but never before `not_before`
        (a reader's own latest write): `(time, rows)`, or None as `peek_now` (and when that
        time is not yet published: the read must wait for it). The time is the one
        `choose_timestamp(target)` gives, raised to `not_before` — the index's write frontier
        minus one, not before its since — chosen in the same pass over the collection as
        `peek_now`'s checks (a kept point lookup's whole read: `PreparedStatement.rows_now`)."""
        latest = self._latest(target, not_before)
        if latest is None:
            return None
        reads, ts = latest
        rows = self._read_local(reads, target, ts, literal_constraints, mfp, finishing)
        return None if rows is None else (ts, rows)

    def peek_now_latest_each(
        self,
        target: GlobalId,
        *,
        not_before: int,
        lookups: Sequence[tuple[list[Row], MapFilterProject | None, RowSetFinishing | None]],
    ) -> tuple[int, list[list[tuple[Row, int]] | None]] | None:
        """`peek_now_latest` of each `(literal_constraints, mfp, finishing)` of `lookups`, at
        one time and with the checks they share made once (a loop turn's kept lookups on one
        index: `server/turns.py`): `(time, [rows or None per lookup])`, or None for all. The
        time is the one each would choose on its own (nothing moves the index's frontier
        between them: the checks and reads run on the event loop without yielding)."""
        latest = self._latest(target, not_before)
        if latest is None:
            return None
        reads, ts = latest
        out: list[list[tuple[Row, int]] | None] | None = None
        each = self._local_each
        if each:  # the first connected replica that reads several at once, if any
            for replica, read_each in each.items():
                conn = self.connections.get(replica)
                if conn is not None and conn.connected:
                    try:
                        out = read_each(target, ts, lookups)
                    except Exception:
                        out = None
                    break
        if out is None or len(out) != len(lookups):
            out = [None] * len(lookups)
        for i, (keys, mfp, finishing) in enumerate(lookups):
            if out[i] is not None:
                continue
            # One at a time, from any replica (as `peek_now_latest`); a failure declines it,
            # as `peek_now_latest`'s caller treats it.
            with contextlib.suppress(Exception):
                out[i] = self._read_local(reads, target, ts, keys, mfp, finishing)
        return ts, out

    def _latest(self, target: GlobalId, not_before: int
                ) -> tuple[dict[ReplicaId, LocalReads], int] | None:
        """The local reads and the read time of `peek_now_latest` (and `_each`), or None when
        index `target` cannot be read locally now (no replica in this process reads)."""
        reads = self._local_reads
        if not reads:
            return None
        c = self._local_index(target)
        if c is None or c.dropped:
            return None
        s = c.since.time
        if s is None:
            return None  # closed: nothing is readable
        latest = c.write_frontier.step_back()
        ts = s if latest is None or latest < s else latest
        return reads, (not_before if not_before > ts else ts)

    def _local_index(self, target: GlobalId) -> CollectionState | None:
        """The collection of index `target` if a local read of it may be tried now (the
        controller running and not failed over, the index known and not failed), else None:
        `peek_now`'s and `peek_now_latest`'s shared checks."""
        if self._closed or not self._started or self._watchdog.down or target in self.failed:
            return None
        c = self.state.collections.get(target)
        return c if c is not None and c.kind is CollectionKind.INDEX else None

    def _read_local(self, reads: dict[ReplicaId, LocalReads], target: GlobalId, ts: int,
                    keys: list[Row], mfp: MapFilterProject | None,
                    finishing: RowSetFinishing | None) -> list[tuple[Row, int]] | None:
        for replica, read in reads.items():
            conn = self.connections.get(replica)
            if conn is None or not conn.connected:
                continue
            rows = read(target, ts, keys, mfp, finishing)
            if rows is not None:
                return rows
        return None

    async def lookup(
        self,
        target: GlobalId,
        *,
        timestamp: int,
        literal_constraints: list[Row],
        mfp: MapFilterProject | None = None,
        finishing: RowSetFinishing | None = None,
        result_desc: RelationDesc | None = None,
        timeout: float | None = None,
    ) -> list[tuple[Row, int]]:
        """A point lookup on index `target` at `timestamp`: answered at once where `peek_now`
        can (then still one event-loop turn is yielded, so a caller looping on lookups never
        starves the loop's other tasks — writers, the ticker), else by `peek`, which raises
        as it does."""
        rows = self.peek_now(target, timestamp=timestamp,
                             literal_constraints=literal_constraints, mfp=mfp,
                             finishing=finishing)
        if rows is not None:
            await asyncio.sleep(0)
            return rows
        return await self.peek(target, timestamp=timestamp,
                               literal_constraints=literal_constraints, mfp=mfp,
                               finishing=finishing, result_desc=result_desc, timeout=timeout)

    async def peek(
        self,
        target: GlobalId | PeekTarget,
        *,
        timestamp: int | None = None,
        literal_constraints: list[Row] | None = None,
        mfp: MapFilterProject | None = None,
        finishing: RowSetFinishing | None = None,
        result_desc: RelationDesc | None = None,
        timeout: float | None = None,
    ) -> list[tuple[Row, int]]:
        """Read `target` (an index id, or a `StorageTarget`) at `timestamp` (default: the latest
        readable time). Returns `(row, diff)` pairs from the first replica to answer.

        Raises `SinceViolation` (time before the since), `PeekFailed` (a replica error),
        `PeekTimeout` (no answer in `timeout` s; the peek is cancelled), `PeekCancelled`,
        `ReplicaUnavailable` (no replica connected for `unavailable_after` s),
        `CollectionFailed` (its dataflow failed on consecutive replays)."""
        self._check_open()
        if isinstance(target, GlobalId):
            target = IndexTarget(id=target)
        self.check_not_failed([target.id])
        self._check_available()
        uuid = uuid4()
        fut: asyncio.Future[PeekResult] = asyncio.get_running_loop().create_future()
        _, fx = self.state.begin_peek(
            uuid,
            target,
            timestamp,
            literal_constraints=literal_constraints,
            mfp=mfp,
            finishing=finishing,
            result_desc=result_desc,
        )
        self.deliveries.peeks[uuid] = fut
        self._apply(fx)
        try:
            # `asyncio.timeout`, not `wait_for`: the latter can lose a racing cancellation.
            async with asyncio.timeout(timeout):
                result = await asyncio.shield(fut)
        except TimeoutError:
            self._abandon_peek(uuid)
            raise PeekTimeout(uuid, target.id, timeout or 0.0) from None
        except BaseException:  # cancelled, no replica available, the controller closed
            self._abandon_peek(uuid)
            raise
        if isinstance(result, PeekError):
            raise PeekFailed(uuid, target.id, result.message)
        if isinstance(result, PeekCanceled):
            raise PeekCancelled(uuid, "a replica cancelled it")
        return result.rows

    def _abandon_peek(self, uuid: UUID) -> None:
        self.deliveries.peeks.pop(uuid, None)
        if not self._closed:
            self._apply(self.state.cancel_peek(uuid))

    def choose_query_timestamp(self, imports: Sequence[GlobalId]) -> int:
        """The latest time every import is readable at, but never before any import's since."""
        if not imports:
            return 0
        latest: int | None = None
        floor = 0
        for i in imports:
            c = self.state.collection(i, "peek query")
            if c.dropped or c.since.is_empty:
                raise SinceViolation(i, None, c.since)
            s = c.since.time
            assert s is not None
            floor = max(floor, s)
            t = c.write_frontier.step_back()
            t = s if t is None else t
            latest = t if latest is None else min(latest, t)
        assert latest is not None
        return max(latest, floor)

    async def peek_query(
        self,
        plan: Plan,
        desc: RelationDesc,
        *,
        index_imports: Mapping[GlobalId, IndexImport] | None = None,
        source_imports: Mapping[GlobalId, SourceImport] | None = None,
        timestamp: int | None = None,
        finishing: RowSetFinishing | None = None,
        timeout: float | None = None,
    ) -> list[tuple[Row, int]]:
        """Answer an arbitrary query with a **peek dataflow**: build `plan` at one time as a
        transient index, peek it, then drop it (whatever the outcome)."""
        self._check_open()
        self._check_available()
        imports = dict(index_imports or {})
        self.check_not_failed(list(imports))
        if timestamp is None:
            if source_imports and not imports:
                raise InvalidRead("a query over storage collections needs an explicit timestamp")
            timestamp = self.choose_query_timestamp(list(imports))
        build, index = self.new_transient_id(), self.new_transient_id()
        d = peek_dataflow(
            build_id=build,
            index_id=index,
            plan=plan,
            desc=desc,
            timestamp=timestamp,
            index_imports=imports,
            source_imports=dict(source_imports or {}),
        )
        await self.create_dataflow(d)
        try:
            return await self.peek(index, timestamp=timestamp, finishing=finishing,
                                   timeout=timeout)  # fmt: skip
        finally:
            if not self._closed and index in self.state.collections:
                self._apply(self.state.drop(index))

    # -- subscribes and copy-tos ------------------------------------------------------------

    async def subscribe(
        self, desc: DataflowDescription, *, read_policy: ReadPolicy | None = None
    ) -> Subscription:
        """Create a subscribe dataflow (exactly one subscribe sink) and iterate its batches.
        A running subscribe outlives outages (it resumes without gaps); a new one is refused
        while no replica is available."""
        self._check_open()
        self._check_available()
        ids = desc.subscribe_ids()
        if len(ids) != 1 or len(desc.export_ids()) != 1:
            raise InvalidRead(
                f"dataflow {desc.debug_name!r} must export exactly one subscribe sink, "
                f"got exports {desc.export_ids()}"
            )
        sub = Subscription(self, ids[0])
        self.deliveries.subscriptions[ids[0]] = sub
        try:
            await self.create_dataflow(desc, read_policy=read_policy)
        except BaseException:
            self.deliveries.subscriptions.pop(ids[0], None)
            raise
        return sub

    async def copy_to(self, desc: DataflowDescription, *, timeout: float | None = None) -> int:
        """Run a copy-to dataflow (exactly one copy-to sink); returns the first row count
        reported. Raises `CopyToFailed`, `ReplicaUnavailable`."""
        self._check_open()
        self._check_available()
        ids = desc.copy_to_ids()
        if len(ids) != 1 or len(desc.export_ids()) != 1:
            raise InvalidRead(
                f"dataflow {desc.debug_name!r} must export exactly one copy-to sink, "
                f"got exports {desc.export_ids()}"
            )
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.deliveries.copy_tos[ids[0]] = fut
        try:
            await self.create_dataflow(desc)
            try:
                async with asyncio.timeout(timeout):
                    return await asyncio.shield(fut)
            except TimeoutError:
                raise CopyToFailed(ids[0], f"no result within {timeout} s") from None
        finally:
            self.deliveries.copy_tos.pop(ids[0], None)
            if not self._closed and ids[0] in self.state.collections:
                c = self.state.collections[ids[0]]
                if not c.dropped:
                    self._apply(self.state.drop(ids[0]))
