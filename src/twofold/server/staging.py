"""The IO half of a session's transaction (`transaction.Transaction` decides): reads pinned to
the transaction's timestamp, writes staged and applied at COMMIT.

Contract:
- `control(s, sql)` answers `BEGIN`/`COMMIT`/`ROLLBACK`/`SAVEPOINT`/`RELEASE`/`ROLLBACK TO`,
  or returns None for any other statement (which inside a failed transaction is `25P02`).
  `COMMIT` applies the staged writes of its one table in one atomic write — all of them or
  none: a write that fails there (a duplicate key; `40001` when rows an `UPDATE`/`DELETE`
  planned against changed meanwhile) fails the COMMIT, nothing is written, and the transaction
  ends all the same (as PostgreSQL's does).
- `sql(s, text, params)` runs a statement as `db.sql` does, inside the session's transaction:
  outside `BEGIN` it is exactly `db.sql`; inside, reads run at the transaction's timestamp and
  writes are staged — run through the SQL layer against a stand-in of the database whose
  tables record their writes instead of making them. The count an `UPDATE`/`DELETE` reports is
  planned against the table's contents then, with the transaction's earlier writes applied;
  a key the write would duplicate fails the statement at once. An `INSERT ... SELECT` reading
  a relation stages the rows its query gives then; after another staged write it is refused
  (`0A000`): its query could not see the transaction's own writes.
- `insert_rows(s, table, rows)` is COPY FROM's write, staged the same way inside `BEGIN`.
- In the extended protocol a write outside `BEGIN` opens the implicit transaction that lasts
  until Sync (`transaction.Transaction.begin_implicit`): its writes are staged as inside
  `BEGIN`, and `end_implicit(s)` (at Sync) applies them in one atomic write, or discards them
  when a statement failed. They are applied to the tables as they are at Sync (no `40001`).
  So in the simple protocol: a write (or COPY FROM) with more statements after it in its
  Query message (`s.simple_rest`, set by the session) opens one that lasts to the message's
  end; the last statement of a message, when none is open, runs as autocommit.
  A write whose portal is the only one run before the Sync already received
  (`Machine.alone_until_sync`: psycopg's Parse/Bind/Describe/Execute/Sync) runs at once, as
  autocommit — the same outcome, without staging.
- The first read's timestamp is held: every index readable there gets a controller read hold
  at it (Materialize holds back compaction the same way), released when the transaction ends
  or the session does (`release(s)`), so later reads of those indexes stay possible however
  long the transaction lasts. Tables and materialized views are read from storage, which is
  not compacted under them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import re
from typing import Any

import numpy as np
import polars as pl
from sqlglot import exp

from twofold.api.objects import Table
from twofold.api.tablestate import TableState
from twofold.api.writes import Compiled, Delta, TableWriter, Written, _assign, _mask
from twofold.server import messages as m
from twofold.server.machine import Phase
from twofold.server.portals import Outcome
from twofold.server.shims import classify as classify_control
from twofold.server.transaction import (
    ABORTED,
    Action,
    Kind,
    Staged,
    Transaction,
    TransactionError,
)
from twofold.sql import execute
from twofold.sql.errors import FeatureNotSupported
from twofold.sql.parser import AsOf, CreateIndex, Subscribe, parse
from twofold.sql.prepared import statement
from twofold.sql.statements import check_declared_rows

_QUERIES = (exp.Select, exp.SetOperation, exp.Values, exp.Subquery)
_DISCARD_ALL = re.compile(r"^\s*discard\s+all\b", re.I)


@functools.lru_cache(maxsize=1024)
def classify(text: str) -> tuple[Kind, str | None]:
    """What a statement does to a transaction, and the table it writes (cached by text: a
    pure function of it, and parsing costs about a millisecond)."""
    node = parse(text)
    if isinstance(node, AsOf):
        return Kind.READ_AS_OF, None
    if isinstance(node, _QUERIES):
        return (Kind.READ if node.find(exp.Table) is not None else Kind.FREE), None
    if isinstance(node, exp.Insert | exp.Update | exp.Delete):
        target = node.this.this if isinstance(node.this, exp.Schema) else node.this
        return Kind.WRITE, target.name if isinstance(target, exp.Table) else None
    if isinstance(node, Subscribe):
        return Kind.SUBSCRIBE, None
    if isinstance(node, exp.Create | exp.Drop | CreateIndex):
        return Kind.DDL, None
    return Kind.FREE, None


# -- transaction control ---------------------------------------------------------------------


async def control(s: Any, sql: str) -> Outcome | None:
    tx: Transaction = s.tx
    word = classify_control(sql)
    if word is None:
        if tx.failed:
            raise TransactionError(ABORTED, "25P02")
        if _DISCARD_ALL.match(sql) and (tx.in_block or s.simple_many):
            # as PostgreSQL: in a block or a Query of several statements (not between Syncs)
            raise TransactionError("DISCARD ALL cannot run inside a transaction block", "25001")
        tx.characteristics(sql)  # SET TRANSACTION READ ONLY ...: then answered as a SET
        return None
    held = tx.held
    try:
        done = tx.control(word, sql)
    finally:
        if tx.held is not held:
            _release(s.db, held)
    if done.warning is not None:
        s.out(m.encode_error(*done.warning, severity="WARNING", notice=True))
    if not tx.explicit and word in ("COMMIT", "ROLLBACK"):
        await s.cursors.end_transaction()  # its cursors close, as in PostgreSQL
    if done.writes:
        await _apply(s.db, done.writes)
    return Outcome(done.tag)


async def end_implicit(s: Any) -> None:
    """At Sync: end the extended protocol's implicit transaction, applying its writes in one
    atomic write (an error is reported before ReadyForQuery, as PostgreSQL's COMMIT at Sync
    is), or discarding them after an error."""
    tx: Transaction = s.tx
    if not tx.implicit:
        return
    held = tx.held
    writes = tx.end_implicit()
    _release(s.db, held)
    if writes:
        try:
            # Planned against the table as it was at Execute; applied to it as it is now (as
            # an autocommit write would be), so a concurrent write is no 40001 here.
            await _apply(s.db, [dataclasses.replace(w, version=None) for w in writes])
        except Exception as e:
            s.error(e)


def release(s: Any) -> None:
    """The session ends: release what its transaction holds."""
    tx: Transaction = s.tx
    held, tx.held = tx.held, []
    _release(s.db, held)


def _hold(db: Any, tx: Transaction) -> None:
    """Hold every index readable at the transaction's timestamp there, and every table's
    shard where its since is now (a `SinceHold`: on PostgreSQL the controller's reader then
    stays at or before the timestamp until the transaction ends; before, a read-only
    transaction's reads of a table failed with `ReadBeforeSince` once `retain_history` had
    passed since its first)."""
    from twofold.controller import UnknownCollection
    from twofold.controller.holds import HoldError
    from twofold.storage import StorageError

    ts = tx.timestamp
    assert ts is not None
    ctl = db._ctl
    for name in db.indexes():
        idx = db.get(name)
        try:
            ctl.acquire_hold(idx.id, ts)
        except (HoldError, UnknownCollection):
            continue  # compacted past it already, or dropped: a read of it will say so
        tx.held.append((idx.id, ts))
    holds = getattr(db, "holds", None)
    if holds is None:
        return
    shards = sorted({inp.shard for name in db.tables() for inp in db.get(name).inputs.values()
                     if inp.kind != "index" and inp.shard is not None})
    if shards:
        with contextlib.suppress(StorageError):  # a table dropped meanwhile: its read says so
            tx.held.append(holds.hold(shards))


def _release(db: Any, held: list[Any]) -> None:
    from twofold.storage.holds import SinceHold

    ctl = db._ctl
    for item in held:
        if isinstance(item, SinceHold):
            item.release()
        else:
            gid, ts = item
            ctl.release_hold(gid, ts)


# -- statements ------------------------------------------------------------------------------


async def sql(s: Any, text: str, params: list[Any] | None) -> Any:
    tx: Transaction = s.tx
    if not tx.explicit:
        if not _more_may_follow(s) or classify(text)[0] is not Kind.WRITE or _alone(s):
            # outside an implicit transaction, or its only statement: as autocommit
            return await statement(s.db, text).execute(params)
        tx.begin_implicit()  # a write with more to come: staged until the end (`end_implicit`)
    kind, table = classify(text)
    action = tx.check(kind, table)
    if action is Action.RUN:
        return await statement(s.db, text).execute(params)
    if action is Action.READ_AT:
        return await statement(s.db, text).execute(params, as_of=tx.timestamp)
    if action is Action.READ_CHOOSE:
        result = await statement(s.db, text).execute(params)
        ts = getattr(result, "timestamp", None)
        if isinstance(ts, int):
            tx.pin(ts)
            _hold(s.db, tx)
        return result
    if tx.writes and _insert_query(text):
        raise FeatureNotSupported("INSERT ... SELECT after another write in a transaction block "
                                  "is not supported: its query would not see the "
                                  "transaction's own writes; run it first, or on its own")
    return await execute(_recording_db(s.db, tx), text, params or None)


def _more_may_follow(s: Any) -> bool:
    """Whether statements may follow this one in its implicit transaction: in the extended
    protocol (until Sync), or in a Query message of several statements, not the last one."""
    return s.machine.phase is Phase.EXTENDED or s.simple_rest > 0


def _alone(s: Any) -> bool:
    """Whether an extended-protocol portal is the only statement before the Sync already
    received (`Machine.alone_until_sync`); a simple Query's later statements always count."""
    return s.machine.phase is Phase.EXTENDED and s.machine.alone_until_sync(s.extended.running)


@functools.lru_cache(maxsize=256)
def _insert_query(text: str) -> bool:
    """Whether `text` is an `INSERT` whose rows come from a query that reads a relation."""
    node = parse(text)
    source = node.expression if isinstance(node, exp.Insert) else None
    return source is not None and source.find(exp.Table) is not None


async def insert_rows(s: Any, table: str, rows: Any) -> int:
    """COPY FROM's write of `rows` (tuples in column order, or an Arrow table of the table's
    columns) into `table`: at once outside `BEGIN`, else staged."""
    tx: Transaction = s.tx
    obj = s.db.get(table)
    rows = check_declared_rows(s.db, obj, rows)  # 22003 before anything is staged or written
    if not tx.explicit and s.simple_rest > 0:
        tx.begin_implicit()  # COPY FROM with more statements after it in its Query message
    if tx.explicit:
        tx.check(Kind.WRITE, table)
        if rows:
            _Recorder(obj, tx).insert(obj._frame(rows, "insert"))
        return len(rows)
    if rows:
        await asyncio.to_thread(obj.insert, rows)
    return len(rows)


# -- recording writes ------------------------------------------------------------------------


def _recording_db(db: Any, tx: Transaction) -> Any:
    """A shallow copy of `db` (sharing its catalog, controller and storage) whose `get` hands
    out tables that stage their writes in `tx` instead of making them."""
    stand_in = copy.copy(db)
    real_get = db.get

    def get(name: str) -> Any:
        obj = real_get(name)
        return _recording_table(obj, tx) if isinstance(obj, Table) else obj

    stand_in.get = get
    return stand_in


class _RecordingTable(Table):
    """A copy of a table whose writes go to a `_Recorder` (never constructed directly)."""

    def _run(self, what: str, write: Any) -> Written:
        return write()  # type: ignore[no-any-return]

    def insert(self, rows: Any) -> Written:
        frame = self._frame(rows, "insert")
        return self._writer.insert(frame)


def _recording_table(table: Table, tx: Transaction) -> Table:
    rec = object.__new__(_RecordingTable)
    rec.__dict__.update(table.__dict__)
    rec._writer = _Recorder(table, tx)  # type: ignore[assignment]
    return rec


class _Recorder:
    """Stands in for a table's writer: stages each write in the transaction and reports what
    it would do (planned against the table's contents with the earlier staged writes)."""

    def __init__(self, table: Table, tx: Transaction) -> None:
        self.table = table
        self.writer: TableWriter = table._writer
        self.tx = tx

    def insert(self, frame: pl.DataFrame) -> Written:
        write = Staged(self.table.name, "insert", frame)
        if self.writer.primary_key is not None:
            self._plan(write)  # a duplicate key fails this statement, as in PostgreSQL
        self.tx.stage(write)
        return Written(0, frame.height, inserted=frame.height)

    def update_where(self, sets: dict[str, Compiled], where: Compiled | None,
                     nullable: dict[str, bool]) -> Written:
        write = Staged(self.table.name, "update", (sets, where, nullable), reads=True)
        n = self._plan(write)
        self.tx.stage(write)
        return Written(0, n, replaced=n)

    def delete_where(self, where: Compiled) -> Written:
        write = Staged(self.table.name, "delete", where, reads=True)
        n = self._plan(write)
        self.tx.stage(write)
        return Written(0, n, deleted=n)

    def __getattr__(self, name: str) -> Any:
        raise FeatureNotSupported(f"{name} of table {self.table.name!r} inside a transaction "
                                  "block is not supported")

    def _plan(self, write: Staged) -> int:
        """Plan the transaction's writes with `write` against the table now: `write`'s count
        (raises what the write would: a duplicate key, a concurrent change)."""
        staged = [w for w in self.tx.writes if w.table == write.table]
        with self.writer._lock:
            state = self.writer.state()
            state.sync()
            version = next((w.version for w in staged if w.version is not None), None)
            if version is not None and version != state.version:
                raise _conflict(write.table)
            if write.reads:
                write.version = state.version
            delta, counts = compose(state, [*staged, write])
            if self.writer.primary_key is not None:
                self.writer._check_unique(state, write.op, delta)
        return counts[-1]


def _conflict(table: str) -> TransactionError:
    return TransactionError(f"could not serialize access: table {table!r} changed since this "
                            "transaction's UPDATE/DELETE read it; nothing was written",
                            "40001")


# -- applying at COMMIT ----------------------------------------------------------------------


async def _apply(db: Any, writes: list[Staged]) -> None:
    """Apply one table's staged writes in one atomic write (all or nothing)."""
    name = writes[0].table
    table = db.get(name)
    if not isinstance(table, Table):
        raise TransactionError(f"cannot commit writes to {name!r}: it is no longer a table",
                               "42809")
    if all(w.op == "insert" for w in writes):
        frame = pl.concat([w.payload for w in writes], how="vertical")
        await asyncio.to_thread(table.insert, frame)
        return
    version = next((w.version for w in writes if w.version is not None), None)

    def plan(state: TableState) -> tuple[Delta, int]:
        if version is not None and state.version != version:
            raise _conflict(name)
        delta, counts = compose(state, writes)
        return delta, sum(counts)

    def write() -> Written:
        ts, n = table._writer.transact("commit", plan)
        return Written(ts, n)

    await asyncio.to_thread(table._run, "commit", write)


def compose(state: TableState, writes: list[Staged]) -> tuple[Delta, list[int]]:
    """The net effect of `writes`, applied in order to the table's contents in `state`, as one
    `Delta` (rows to retract as stored, rows to insert), and each write's row count."""
    names = state.names

    def conform(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.select([pl.col(c).cast(state.schema[c]) for c in names])

    if all(w.op == "insert" for w in writes):
        frames = [conform(w.payload) for w in writes]
        rows = pl.concat(frames, how="vertical")
        return (Delta(insert_rows=rows, insert_n=np.ones(rows.height, np.int64)),
                [f.height for f in frames])
    ids, rows = state.live()
    n = state.counts[ids].astype(np.int64)
    origin = ids.astype(np.int64)          # the state's id of each row, -1 if staged
    changed = np.zeros(len(ids), dtype=bool)
    gone: list[np.ndarray] = []
    counts: list[int] = []
    for w in writes:
        what = f"{w.op} of table {w.table!r}"
        if w.op == "insert":
            f = conform(w.payload)
            rows = pl.concat([rows, f], how="vertical")
            n = np.concatenate([n, np.ones(f.height, np.int64)])
            origin = np.concatenate([origin, np.full(f.height, -1, np.int64)])
            changed = np.concatenate([changed, np.ones(f.height, dtype=bool)])
            counts.append(f.height)
            continue
        pred = w.payload if w.op == "delete" else w.payload[1]
        hit = _mask(rows, pred, what) if pred is not None else np.ones(rows.height, bool)
        counts.append(int(n[hit].sum()))
        keep = ~hit
        if w.op == "delete":
            gone.append(origin[hit & (origin >= 0)])
            rows, n, origin, changed = (rows.filter(pl.Series(keep)), n[keep], origin[keep],
                                        changed[keep])
            continue
        sets, _, nullable = w.payload
        at = np.flatnonzero(hit)
        if not len(at):
            continue
        new = _assign(rows[pl.Series(at, dtype=pl.UInt32)], sets, nullable, state.schema, what)
        rows = pl.concat([rows.filter(pl.Series(keep)), new], how="vertical")
        n = np.concatenate([n[keep], n[at]])
        origin = np.concatenate([origin[keep], origin[at]])
        changed = np.concatenate([changed[keep], np.ones(len(at), dtype=bool)])
    retract = np.unique(np.concatenate([*gone, origin[changed & (origin >= 0)]]))
    fresh = np.flatnonzero(changed)
    return (Delta(retract, state.counts[retract].astype(np.int64),
                  rows[pl.Series(fresh, dtype=pl.UInt32)], n[fresh]), counts)
