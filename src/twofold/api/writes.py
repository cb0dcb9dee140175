"""Checked table writes: what `Table.delete`, `update`, `upsert` and primary-key inserts do.

Contract (`docs/semantics.md`, "Table writes"):
- a table is a multiset of rows whose multiplicities are never negative: a write that reads the
  table retracts only rows it holds — `delete(rows)` at most as many copies of each row as are
  there, `update(old, new)` only pairs whose old row is there — and each reports what it did;
- such a write reads the table's contents at an upper (a `TableState` synced to it) and appends
  at that upper with compare-and-append; if another writer got there first it re-reads and
  plans again, so two writers never both delete one row;
- with a primary key, no write leaves two rows with one key: the write raises `UniqueViolation`
  and writes nothing;
- retractions are always of the row *as stored*, so they cancel exactly what is there;
- a plan costs time in proportion to the rows it names (keys are found through the state's hash
  index), except predicate writes, which read every row.

Every write is planned as a `Delta` (ids whose stored rows to retract, how many copies; rows to
insert, how many copies) by a pure function of the state, so a lost race only re-plans.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa

from twofold.api.errors import InvalidRows, QueryFailed, UniqueViolation
from twofold.api.tablestate import TableState
from twofold.sql.errors import SqlError
from twofold.sql.types import check_declared_series, storable_declared
from twofold.storage import StorageError
from twofold.storage import Table as StorageTable

T = TypeVar("T")
MAX_ATTEMPTS: Final = 1000
_NO_IDS: Final = np.zeros(0, np.int64)


class Written(msgspec.Struct, frozen=True):
    """What a table write did: its `timestamp` (read at or after it to see it) and `count`, the
    rows it affected — inserted, deleted or replaced (for `upsert`, inserted + replaced)."""

    timestamp: int
    count: int
    inserted: int = 0
    deleted: int = 0
    replaced: int = 0


@dataclass(frozen=True)
class Delta:
    """A planned write: retract `retract_n[i]` copies of the stored row of `retract_ids[i]`,
    insert `insert_n[i]` copies of row `i` of `insert_rows`."""

    retract_ids: np.ndarray = field(default_factory=lambda: _NO_IDS)
    retract_n: np.ndarray = field(default_factory=lambda: _NO_IDS)
    insert_rows: pl.DataFrame | None = None
    insert_n: np.ndarray = field(default_factory=lambda: _NO_IDS)


@dataclass(frozen=True)
class Compiled:
    """A bound expression compiled for the state's frames (columns `c0..`): value and error."""

    value: pl.Expr
    error: pl.Expr | None
    label: str


class TableWriter:
    """The checked writes of one table (see the module docstring). Thread-safe."""

    def __init__(self, table: StorageTable, name: str,
                 primary_key: tuple[str, ...] | None,
                 declared: Callable[[], Mapping[str, str]] = dict) -> None:
        self.table = table
        self.name = name
        self.primary_key = primary_key
        self.declared = declared  # the checked columns' SQL types (`conform_declared`)
        self._lock = threading.Lock()
        self._state: TableState | None = None

    def state(self) -> TableState:
        if self._state is None:
            self._state = TableState(self.table, self.primary_key)
        return self._state

    # -- the write loop ---------------------------------------------------------------------

    def transact(self, operation: str,
                 plan: Callable[[TableState], tuple[Delta, T]]) -> tuple[int, T]:
        """Plan against the state at its upper and write there; re-plan on a lost race."""
        with self._lock:
            state = self.state()
            planned_at = -1
            for _ in range(MAX_ATTEMPTS):
                lower = state.sync()
                if state.version != planned_at:
                    # Only a change of contents invalidates a plan: when the upper moved by
                    # empty appends alone (the ticker), the same plan is retried at the new
                    # upper, so a slow plan cannot be starved by ticks.
                    delta, result = plan(state)
                    if self.primary_key is not None:
                        self._check_unique(state, operation, delta)
                    rows, diffs = self._materialise(state, delta)
                    planned_at = state.version
                ts = self.table.compare_and_write(lower, rows, diffs)
                if ts is not None:
                    return ts, result
        raise StorageError(f"{operation} on table {self.name!r}: lost {MAX_ATTEMPTS} races "
                           "in a row")

    def _materialise(self, state: TableState,
                     delta: Delta) -> tuple[pa.Table | None, np.ndarray | None]:
        frames: list[pl.DataFrame] = []
        diffs: list[np.ndarray] = []
        if len(delta.retract_ids):
            frames.append(state.stored(delta.retract_ids))
            diffs.append(-delta.retract_n)
        if delta.insert_rows is not None and delta.insert_rows.height:
            frames.append(delta.insert_rows.select(state.names))
            diffs.append(delta.insert_n)
        if not frames:
            return None, None
        return pl.concat(frames, how="vertical").to_arrow(), np.concatenate(diffs)

    def _check_unique(self, state: TableState, operation: str, delta: Delta) -> None:
        """Raise `UniqueViolation` if `delta` would leave two rows with one key."""
        inserted = delta.insert_rows
        if inserted is None or inserted.height == 0:
            return
        ins_ids = state.ids(inserted)
        ids = np.concatenate([delta.retract_ids, ins_ids])
        net = np.concatenate([-delta.retract_n, delta.insert_n])
        touched, inverse = np.unique(ids, return_inverse=True)
        change = np.zeros(len(touched), np.int64)
        np.add.at(change, inverse, net)
        held = np.maximum(state.counts[touched], 0)
        bad = np.flatnonzero(held + change > 1)
        if not len(bad):
            return
        culprit = touched[bad[0]]
        row = int(np.flatnonzero(ins_ids == culprit)[0])
        assert self.primary_key is not None
        key = tuple(inserted.select(self.primary_key).row(row))
        reason = "already exists" if held[bad[0]] > 0 else "appears more than once in this write"
        raise UniqueViolation(operation, self.name, self.primary_key, key, reason)

    # -- writes -----------------------------------------------------------------------------

    def insert(self, rows: pl.DataFrame) -> Written:
        ts, _ = self.transact("insert", lambda s: (
            Delta(insert_rows=rows, insert_n=np.ones(rows.height, np.int64)), None))
        return Written(ts, rows.height, inserted=rows.height)

    def delete_rows(self, rows: pl.DataFrame) -> Written:
        def plan(state: TableState) -> tuple[Delta, int]:
            ids = state.ids(rows)
            applied = self._consume(state, rows, ids)
            touched, n = np.unique(ids[applied], return_counts=True)
            return Delta(touched, n.astype(np.int64)), int(n.sum())

        ts, n = self.transact("delete", plan)
        return Written(ts, n, deleted=n)

    def delete_keys(self, keys: pl.DataFrame) -> Written:
        def plan(state: TableState) -> tuple[Delta, int]:
            touched = np.unique(state.ids(keys))
            held = state.counts[touched]
            present = held > 0
            return Delta(touched[present], held[present]), int(held[present].sum())

        ts, n = self.transact("delete", plan)
        return Written(ts, n, deleted=n)

    def update_rows(self, old: pl.DataFrame, new: pl.DataFrame) -> Written:
        def plan(state: TableState) -> tuple[Delta, int]:
            ids = state.ids(old)
            applied = self._consume(state, old, ids)
            touched, n = np.unique(ids[applied], return_counts=True)
            at = pl.Series(np.flatnonzero(applied), dtype=pl.UInt32)
            return Delta(touched, n.astype(np.int64), new[at],
                         np.ones(len(at), np.int64)), int(n.sum())

        ts, n = self.transact("update", plan)
        return Written(ts, n, replaced=n)

    def upsert(self, rows: pl.DataFrame) -> Written:
        def plan(state: TableState) -> tuple[Delta, tuple[int, int]]:
            ids = state.ids(rows)
            held = state.counts[ids]
            existing = held > 0
            touched = np.unique(ids[existing])
            delta = Delta(touched, state.counts[touched], rows,
                          np.ones(rows.height, np.int64))
            replaced = int(existing.sum())
            return delta, (rows.height - replaced, replaced)

        ts, (inserted, replaced) = self.transact("upsert", plan)
        return Written(ts, inserted + replaced, inserted=inserted, replaced=replaced)

    def delete_where(self, where: Compiled) -> Written:
        def plan(state: TableState) -> tuple[Delta, int]:
            ids, rows = state.live()
            hit = _mask(rows, where, f"delete from table {self.name!r}")
            ids = ids[hit]
            n = state.counts[ids]
            return Delta(ids, n), int(n.sum())

        ts, n = self.transact("delete", plan)
        return Written(ts, n, deleted=n)

    def update_where(self, sets: dict[str, Compiled], where: Compiled | None,
                     nullable: dict[str, bool]) -> Written:
        what = f"update of table {self.name!r}"

        def plan(state: TableState) -> tuple[Delta, int]:
            ids, rows = state.live()
            if where is not None:
                hit = _mask(rows, where, what)
                ids = ids[hit]
                rows = rows.filter(pl.Series(hit))
            n = state.counts[ids]
            new = _assign(rows, sets, nullable, state.schema, what, self.declared())
            return Delta(ids, n, new, n), int(n.sum())

        ts, n = self.transact("update", plan)
        return Written(ts, n, replaced=n)

    def _consume(self, state: TableState, rows: pl.DataFrame, ids: np.ndarray) -> np.ndarray:
        """Which rows of a delete/update request apply: the `k`-th copy of a row applies iff the
        table holds more than `k` copies of it (with a primary key: iff it is the stored row)."""
        candidate = state.counts[ids] > 0
        if self.primary_key is not None and candidate.any():
            at = np.flatnonzero(candidate)
            same = state.same_rows(rows[pl.Series(at, dtype=pl.UInt32)], ids[at])
            candidate[at[~same]] = False
        at = np.flatnonzero(candidate)
        cids = ids[at]
        order = np.argsort(cids, kind="stable")
        ordered = cids[order]
        n = len(ordered)
        starts = np.ones(n, dtype=bool)
        starts[1:] = ordered[1:] != ordered[:-1]
        first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
        rank = np.empty(n, np.int64)
        rank[order] = np.arange(n) - first
        out = np.zeros(len(ids), dtype=bool)
        out[at] = rank < state.counts[cids]
        return out


def _positional(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.rename({n: f"c{i}" for i, n in enumerate(rows.columns)})


def _evaluate(rows: pl.DataFrame, exprs: dict[str, Compiled], what: str) -> pl.DataFrame:
    """Each expression's values over `rows`; `QueryFailed` naming the first evaluation error."""
    frame = _positional(rows)
    # `with_columns` broadcasts constant expressions (`set={"v": 0}`) to every row.
    out = frame.with_columns(
        *[e.value.alias(f"v{i}") for i, e in enumerate(exprs.values())],
        *[e.error.alias(f"e{i}") for i, e in enumerate(exprs.values()) if e.error is not None],
    )
    for i, e in enumerate(exprs.values()):
        if e.error is None:
            continue
        errors = out.get_column(f"e{i}").drop_nulls()
        if errors.len():
            raise QueryFailed(f"{what}: {e.label}: {errors[0]} (in {errors.len()} rows); "
                              "nothing was written", str(errors[0]))
    return out.select(
        [out.get_column(f"v{i}").alias(name) for i, name in enumerate(exprs)])


def _mask(rows: pl.DataFrame, where: Compiled, what: str) -> np.ndarray:
    if rows.height == 0:
        return np.zeros(0, dtype=bool)
    hit = _evaluate(rows, {"where": where}, what).get_column("where")
    return np.asarray(hit.fill_null(False).to_numpy(), dtype=bool)


def conform_declared(frame: pl.DataFrame, declared: Mapping[str, str], what: str
                     ) -> pl.DataFrame:
    """`frame` with each column named in `declared` (column name → its SQL-declared type:
    `int2`, `int4`, `float4`, `varchar(n)`, `bpchar(n)`) as SQL stores it
    (`twofold.sql.types.check_declared_series`: ranges and lengths checked, float4 rounded,
    a char(n)'s trailing spaces dropped); a value SQL would refuse is `InvalidRows` naming
    the column and PostgreSQL's message, its `sqlstate` PostgreSQL's (22001, 22003).
    Vectorised per column."""
    columns = []
    for name in frame.columns:
        pg = declared.get(name)
        if pg is None:
            continue
        try:
            columns.append(check_declared_series(frame.get_column(name), pg).alias(name))
        except SqlError as e:
            refused = InvalidRows(f"{what}: column {name!r}: {e} (SQLSTATE {e.sqlstate}); "
                                  "nothing was written")
            refused.sqlstate = e.sqlstate  # type: ignore[attr-defined]  # sqlstate_of's
            raise refused from e
    return frame.with_columns(columns) if columns else frame


def storable_rows(frame: pl.DataFrame, declared: Mapping[str, str]) -> pl.Series | None:
    """Which rows of `frame` a table whose columns are `declared` can hold
    (`twofold.sql.types.storable_declared` of each declared column, and-ed); None when every
    row can. A row it cannot hold is absent: deleting it (or updating it) changes nothing."""
    ok: pl.Series | None = None
    for name in frame.columns:
        pg = declared.get(name)
        if pg is None:
            continue
        col = storable_declared(frame.get_column(name), pg)
        ok = col if ok is None else ok & col
    return None if ok is None or bool(ok.all()) else ok


def _assign(rows: pl.DataFrame, sets: dict[str, Compiled], nullable: dict[str, bool],
            schema: dict[str, pl.DataType], what: str,
            declared: Mapping[str, str] | None = None) -> pl.DataFrame:
    """`rows` with the `set` columns replaced by their values, checked against the schema
    and the columns' declared SQL types (`conform_declared`)."""
    if rows.height == 0:
        return rows
    values = _evaluate(rows, sets, what)
    columns = []
    for name in sets:
        column = values.get_column(name).cast(schema[name])
        if not nullable[name] and column.null_count():
            raise InvalidRows(f"{what}: column {name!r} is not nullable but set gives NULL in "
                              f"{column.null_count()} rows; nothing was written")
        columns.append(column)
    if declared:
        checked = {n: pg for n, pg in declared.items() if n in sets}
        return rows.with_columns(conform_declared(pl.DataFrame(columns), checked, what))
    return rows.with_columns(columns)
