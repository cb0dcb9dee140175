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
"""

from __future__ import annotations

import re
import time
from collections import Counter
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
}
DDL = "".join(f"CREATE TABLE {n} ({cols});\n" for n, cols in RELATIONS.items())
_NAMES = re.compile(r"\b(" + "|".join(RELATIONS) + r")\b", re.I)
_LOGS = {"twofold_arrangement_sizes": "arrangement_sizes",
         "twofold_peek_durations": "peek_durations",
         "twofold_step_durations": "step_durations"}
PEEK_TIMEOUT = 10.0


def mentioned(sql: str) -> set[str]:
    return {m.lower() for m in _NAMES.findall(sql)}


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
        elif name == "twofold_arrangement_sizes":
            by_id = {str(obj.id): n for n, _, obj in _objects(db)}
            out[name] = [(by_id.get(c), c, records, batches, nbytes) for c, records, batches,
                         nbytes in await _log(db, _LOGS[name])]
        else:
            out[name] = await _log(db, _LOGS[name])
    return out
