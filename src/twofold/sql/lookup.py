"""Point queries answered by an index: `SELECT ... FROM t WHERE k = 5` as a key lookup.

Contract: `find_lookup(db, relation)` returns a `Lookup` when `relation` (a compiled query) is
a chain of map/filter/projects over one stored collection (table or materialized view) whose
filters include `col = constant` for every key column of an index on exactly that collection,
else `None`. `run_lookup` then reads only the matching rows of that index's arrangement — the
read path of `db.lookup(index, key)` — and applies the whole fused map/filter/project (the key
equalities included) and the query's order to them, at `AS OF`'s time or else at the index's
own latest complete time (where `db.lookup` reads: no wait for the index to catch up with the
table's ticks), so the result is the filter path's at the time it carries — at once when a
replica in this process has published the index that far (`Controller.lookup`; a kept
lookup's synchronous form is `PreparedStatement.rows_now`, `Controller.peek_now`), else by a
peek. The fast path is taken only
when it cannot change the answer; otherwise the query runs as planned:

- each key constant's type is exactly the key column's (`int` key with `5.0` is not
  taken; `'5'` is already an `int` constant after binding), not NULL (`k = NULL` holds for no
  row; the filter path answers it), an int in the int64 range, a float finite and non-zero
  (NaN and -0.0 compare differently than they hash);
- the key equalities themselves are dropped from the fused map/filter/project (the lookup
  guarantees them), so `SELECT * FROM t WHERE k = c` reads the matching rows and nothing else;
- a map (select-list expression) is fused over filters only when each filter before it is one
  of the chosen index's key equalities (which the lookup guarantees), so no expression is
  evaluated on a row an earlier filter would drop (its error would be spurious);
- `TopK` (`LIMIT`/`OFFSET`), joins, aggregates and anything else above the chain: not taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from twofold.api.objects import Index
from twofold.api.reads import _remap, mfp_chain
from twofold.api.relation import Relation
from twofold.api.results import Result, expand
from twofold.protocol import Call, Column, Get, Literal, MapFilterProject, RowSetFinishing
from twofold.protocol import Expr as PExpr

_SCALAR = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}


@dataclass(frozen=True)
class Lookup:
    """An index lookup answering a query: the index, its key values, the fused mfp."""

    index: Index
    key: list[Any]
    mfp: MapFilterProject


def _equality(f: PExpr) -> tuple[int, Any] | None:
    """`(column, value)` when `f` is `#column = constant` (either side)."""
    if not (isinstance(f, Call) and f.func == "eq" and len(f.args) == 2):
        return None
    a, b = f.args
    if isinstance(b, Column) and isinstance(a, Literal):
        a, b = b, a
    if isinstance(a, Column) and isinstance(b, Literal):
        return a.index, b.value
    return None


def _usable(value: Any, scalar: str) -> bool:
    if value is None or _SCALAR.get(type(value)) != scalar:
        return False
    if type(value) is int:
        return -(2**63) <= value < 2**63
    if type(value) is float:
        return math.isfinite(value) and value != 0.0
    return True


def _indexes_on(db: Any, get: Get, relation: Relation) -> list[Index]:
    inp = relation.inputs.get(get.id)
    if inp is None or inp.kind not in ("table", "view"):
        return []
    found = []
    for name in db.indexes():
        idx = db.get(name)
        src = idx.source
        if (isinstance(idx, Index) and src.plan == get and set(src.inputs) == {get.id}
                and idx.schema == inp.schema):
            found.append(idx)
    return found


def find_lookup(db: Any, relation: Relation) -> Lookup | None:
    """The index lookup that answers `relation`, if one does (module docstring)."""
    found = mfp_chain(relation)
    if found is None:
        return None
    chain, plan, inp = found
    arity = len(inp.schema)
    # Fuse the chain from the innermost out; `guard` filters come before the last map.
    maps: list[PExpr] = []
    filters: list[PExpr] = []
    columns = list(range(arity))
    guard = 0
    for m in reversed(chain):
        if m.map:
            guard = len(filters)
        for e in m.map:
            maps.append(_remap(e, columns))
            columns.append(arity + len(maps) - 1)
        filters.extend(_remap(f, columns) for f in m.filter)
        if m.project is not None:
            columns = [columns[j] for j in m.project]
    eqs: dict[int, Any] = {}
    pending = [eq for f in filters if (eq := _equality(f)) is not None and eq[0] < arity]
    for col, value in pending:
        eqs.setdefault(col, value)
    if not eqs:
        return None
    best: Lookup | None = None
    for idx in _indexes_on(db, plan, relation):
        positions = [idx.schema.names.index(k) for k in idx.key]
        if not positions or any(p not in eqs for p in positions):
            continue
        if not all(_usable(eqs[p], idx.schema.types[p].scalar) for p in positions):
            continue
        if best is None or len(positions) > len(best.key):
            key = [eqs[p] for p in positions]
            # The lookup guarantees its own equalities: dropping them keeps a plain
            # `SELECT * ... WHERE k = c` on the arrangement's row-lookup path.
            implied = {(p, type(v), v) for p, v in zip(positions, key, strict=True)}
            guaranteed = [(eq := _equality(f)) is not None
                          and (eq[0], type(eq[1]), eq[1]) in implied for f in filters]
            if not all(guaranteed[:guard]):
                continue  # a map would run on rows a filter before it drops
            kept = [f for f, g in zip(filters, guaranteed, strict=True) if not g]
            # Every column in order is no projection: the peek takes the row-lookup path.
            project = None if not maps and not kept and columns == list(range(arity)) \
                else columns
            best = Lookup(idx, key, MapFilterProject(map=maps, filter=kept, project=project))
    return best


async def run_lookup(db: Any, relation: Relation, found: Lookup,
                     as_of: int | None) -> Result | None:
    """`relation`'s result read through `found`, or `None` when the index cannot be read at
    `as_of` (the caller runs the filter path). Without `as_of` it reads at the index's time,
    as `db.lookup` does: the latest time the index is complete at (never before this session's
    latest write, with read-your-writes) — so it never waits for the index to catch up with
    the table's ticks, and its answer is the filter path's at that time."""
    from twofold.api.errors import ReadBeforeSince
    from twofold.api.reads import translate

    await db._install()
    rel = db._check_relation(relation, "query")
    if as_of is not None:
        db._choose_time(rel, as_of)  # the table's since is the filter path's bound
    try:
        t = db._choose_time(found.index, as_of)
    except ReadBeforeSince:
        return None
    finishing = RowSetFinishing(order_by=rel.order) if rel.order else None
    with translate(db._name_of(rel)):
        rows = await db._ctl.lookup(found.index.id, timestamp=t, literal_constraints=[found.key],
                                    mfp=None if found.mfp.is_identity else found.mfp,
                                    finishing=finishing,
                                    result_desc=rel.schema.desc(), timeout=db.timeout)
    return Result(rel.schema, t, expand(rows))


def explain_lookup(found: Lookup) -> str:
    """The EXPLAIN line of the read a lookup replaces."""
    key = ", ".join(found.index.key)
    values = ", ".join(repr(v) for v in found.key)
    return (f"Lookup index {found.index.name!r} ({key}) = ({values}) "
            "(reads only the matching rows of its arrangement)")
