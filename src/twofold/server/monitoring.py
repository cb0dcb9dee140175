"""twofold's monitoring relations, computed afresh for every query that reads them.

Contract: `RELATIONS` maps each relation's name to its columns (DuckDB types, for the catalog
snapshot that answers catalog queries); `mentioned(sql)` names the ones a statement reads;
`collect(db, names)` gives each one's rows now:

- `twofold_frontiers (object, type, id, since, upper)`: every table, index and materialized
  view with its read frontier (`since`: the earliest time it can be read at) and write
  frontier (`upper`: every time before it is complete); NULL when the frontier is empty
  (closed). Tables and materialized views report their storage shard's; indexes the
  controller's (the maximum over replicas).
- `twofold_lag (object, type, upper, input_upper, local_lag_ms, global_lag_ms)`: freshness.
  `input_upper` is the least `upper` of what an index or materialized view reads (NULL for a
  table), `local_lag_ms` how far the object's upper is behind it, `global_lag_ms` how far it is
  behind the wall clock (timestamps are milliseconds since the epoch): `now - (upper - 1)`,
  at least 0.
- `twofold_arrangement_sizes (object, id, records, batches, bytes)`: each arrangement the
  maintenance runtime keeps (an index's; `object` is NULL for one no catalog object names),
  from its `arrangement_sizes` introspection index.
- `twofold_peek_durations (runtime, le_us, count)` and `twofold_step_durations (runtime, le_us,
  count)`: per runtime (`maintenance`, `interactive`), how many peeks answered or steps taken
  fell in each power-of-two bucket of microseconds, `le_us` its upper bound (counts are per
  bucket, not cumulative), from the `peek_durations`/`step_durations` introspection indexes.

The last three read the replicas' introspection indexes, which exist when the database was
opened with `introspection_interval` (`twofold serve` does: 1 s); they are as fresh as that
interval and empty without it.

`pg_stat_activity` (PostgreSQL 15's columns) has one row per open session of the database:
its `pid` (the BackendKeyData process id), `datname`, `usename`, `application_name`,
`client_addr`/`client_port` (NULL over a Unix socket), `backend_start`, `query_start` and
`state_change` (timestamptz text: twofold has no timestamp type), `state` (`active` while a
Query or Execute runs — the session reading it is active — else `idle`, `idle in transaction`
or `idle in transaction (aborted)`), `query` (the running or last statement; a kept lookup
answered at once, `fastpath`, does not update it) and `backend_type` `client backend`; what
twofold does not have (`usesysid`, `backend_xid`, wait events, ...) is NULL. A session is
listed from `track(db, session)` (at authentication) until it is garbage.
"""

from __future__ import annotations

import datetime
import re
import time
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from twofold.api.objects import Index, MaterializedView, Table
from twofold.protocol import Frontier

RELATIONS: dict[str, str] = {
    "twofold_frontiers": "object VARCHAR, type VARCHAR, id VARCHAR, since BIGINT, upper BIGINT",
    "twofold_lag": "object VARCHAR, type VARCHAR, upper BIGINT, input_upper BIGINT, "
                   "local_lag_ms BIGINT, global_lag_ms BIGINT",
    "twofold_arrangement_sizes": "object VARCHAR, id VARCHAR, records BIGINT, batches BIGINT, "
                                 "bytes BIGINT",
    "twofold_peek_durations": "runtime VARCHAR, le_us BIGINT, count BIGINT",
    "twofold_step_durations": "runtime VARCHAR, le_us BIGINT, count BIGINT",
    "pg_stat_activity": "datid BIGINT, datname VARCHAR, pid INTEGER, leader_pid INTEGER, "
                        "usesysid BIGINT, usename VARCHAR, application_name VARCHAR, "
                        "client_addr VARCHAR, client_hostname VARCHAR, client_port INTEGER, "
                        "backend_start VARCHAR, xact_start VARCHAR, query_start VARCHAR, "
                        "state_change VARCHAR, wait_event_type VARCHAR, wait_event VARCHAR, "
                        "state VARCHAR, backend_xid VARCHAR, backend_xmin VARCHAR, "
                        "query_id BIGINT, query VARCHAR, backend_type VARCHAR",
}
DDL = "".join(f"CREATE TABLE {n} ({cols});\n" for n, cols in RELATIONS.items())
_NAMES = re.compile(r"\b(" + "|".join(RELATIONS) + r")\b", re.I)
_LOGS = {"twofold_arrangement_sizes": "arrangement_sizes",
         "twofold_peek_durations": "peek_durations",
         "twofold_step_durations": "step_durations"}
PEEK_TIMEOUT = 10.0


def mentioned(sql: str) -> set[str]:
    return {m.lower() for m in _NAMES.findall(sql)}


@dataclass
class Activity:
    """What `pg_stat_activity` shows of one session; the session updates it (`start`/`stop`
    around each Query or Execute)."""

    peer: Any = None  # the socket's peer address: (host, port) over TCP
    backend_start: float = field(default_factory=time.time)
    query: str = ""
    query_start: float | None = None
    state_change: float = field(default_factory=time.time)
    active: bool = False

    def start(self, query: str) -> None:
        self.query, self.active = query, True
        self.query_start = self.state_change = time.time()

    def stop(self) -> None:
        self.active = False
        self.state_change = time.time()


_tracked: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Any]] = weakref.WeakKeyDictionary()
_DATABASE_OID = 16384  # pg_database's oid of `twofold`


def track(db: Any, session: Any) -> None:
    """List `session` (with `pid`, `user`, `vars`, `tx`, `activity`) in `pg_stat_activity`."""
    _tracked.setdefault(db, weakref.WeakSet()).add(session)


def untrack(db: Any, session: Any) -> None:
    _tracked.get(db, weakref.WeakSet()).discard(session)


def _stamp(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00")


_STATE = {"I": "idle", "T": "idle in transaction", "E": "idle in transaction (aborted)"}


def _activity(db: Any) -> list[tuple[Any, ...]]:
    rows = []
    for s in sorted(_tracked.get(db, ()), key=lambda s: s.activity.backend_start):
        a: Activity = s.activity
        host, port = (a.peer[0], a.peer[1]) if isinstance(a.peer, tuple) else (None, None)
        rows.append((_DATABASE_OID, "twofold", s.pid, None, None, s.user,
                     s.vars.values.get("application_name", ""), host, None, port,
                     _stamp(a.backend_start), None, _stamp(a.query_start),
                     _stamp(a.state_change), None, None,
                     "active" if a.active else _STATE.get(s.tx.status, "idle"), None, None,
                     None, a.query, "client backend"))
    return rows


def _time(f: Frontier) -> int | None:
    return None if f.is_empty else f.time


def _objects(db: Any) -> list[tuple[str, str, Any]]:
    out = []
    for name, kind in db.objects():
        obj = db.get(name)
        if isinstance(obj, Table | Index | MaterializedView):
            out.append((name, kind, obj))
    return out


def _input_bounds(db: Any, inp: Any) -> tuple[Frontier, Frontier]:
    """(since, upper) of one stored collection a relation reads."""
    if inp.kind == "index":
        return db._ctl.since(inp.id), db._ctl.frontier(inp.id)
    shard = db._storage.shard(inp.shard)
    return shard.since, shard.upper


def _bounds(db: Any, obj: Any) -> tuple[Frontier, Frontier]:
    if isinstance(obj, Index):
        return db._ctl.since(obj.id), db._ctl.frontier(obj.id)
    if isinstance(obj, Table):
        return obj.since, obj.upper
    return _input_bounds(db, next(iter(obj.inputs.values())))


def _frontiers(db: Any) -> list[tuple[Any, ...]]:
    rows = []
    for name, kind, obj in _objects(db):
        since, upper = _bounds(db, obj)
        rows.append((name, kind, str(obj.id), _time(since), _time(upper)))
    return rows


def _lag(db: Any) -> list[tuple[Any, ...]]:
    now = time.time_ns() // 1_000_000
    rows = []
    for name, kind, obj in _objects(db):
        upper = _time(_bounds(db, obj)[1])
        source = getattr(obj, "source", None)
        inputs = [] if source is None else [_time(_input_bounds(db, i)[1])
                                            for i in source.inputs.values()]
        known = [u for u in inputs if u is not None]
        input_upper = min(known) if known else None
        local = None if upper is None or input_upper is None else max(0, input_upper - upper)
        glob = None if upper is None else max(0, now - (upper - 1))
        rows.append((name, kind, upper, input_upper, local, glob))
    return rows


async def _log(db: Any, variant: str) -> list[tuple[Any, ...]]:
    gid = getattr(db, "introspection_logs", {}).get(variant)
    if gid is None:
        return []
    got = await db._ctl.peek(gid, timeout=PEEK_TIMEOUT)
    rows: Counter[tuple[Any, ...]] = Counter()
    for row, diff in got:
        rows[tuple(row)] += diff
    return [r for r, n in rows.items() for _ in range(max(n, 0))]


async def collect(db: Any, names: set[str]) -> dict[str, list[tuple[Any, ...]]]:
    out: dict[str, list[tuple[Any, ...]]] = {}
    for name in names:
        if name == "twofold_frontiers":
            out[name] = _frontiers(db)
        elif name == "twofold_lag":
            out[name] = _lag(db)
        elif name == "pg_stat_activity":
            out[name] = _activity(db)
        elif name == "twofold_arrangement_sizes":
            by_id = {str(obj.id): n for n, _, obj in _objects(db)}
            out[name] = [(by_id.get(c), c, records, batches, nbytes) for c, records, batches,
                         nbytes in await _log(db, _LOGS[name])]
        else:
            out[name] = await _log(db, _LOGS[name])
    return out
