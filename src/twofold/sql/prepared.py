"""Prepared statements: SQL parsed, bound and planned once, then executed many times with
parameters — what a pgwire prepared statement (or the unnamed statement a driver re-sends)
runs, and what `db.sql` can use for a statement it sees again.

    stmt = statement(db, "SELECT v FROM t WHERE k = $1")    # shared per database and text
    (await stmt.execute([5])).rows
    (await stmt.execute([6])).rows                           # no parse, no plan: a key lookup

Contract: `PreparedStatement.execute(params, as_of=None)` returns exactly what
`twofold.sql.execute(db, text, params, as_of=as_of)` returns, with the same typed errors.
A query (`SELECT`, set operations, `VALUES`, `WITH`, `... AS OF t`) is parsed once; its plan
is kept per parameter type signature (the Python type of each parameter, `None` included) as a
*template*: the statement is planned with two different sets of stand-in values of those types,
and when the two plans differ only in `Literal` values that are those stand-ins, position for
position, the template is that plan with the parameters' places marked, and an execution only
puts its values there. Where a stand-in changes anything else (LIMIT $1, VALUES ($1), a folded
`-$1`, ...) there is no template: that signature is planned again on every execution (the
parse is still kept). A point query answered by an index (`twofold.sql.lookup`) keeps its
lookup — index, key places, fused map/filter/project — and an execution is: substitute the key,
peek the index. A key value the lookup cannot take (out of range, NaN, zero float) runs the
template's plan instead, as the unprepared path would.

Concurrent executions of a kept lookup that projects the index's columns (no filter or
expression beyond the key) share one peek: the first starts at once, those arriving meanwhile
go together in the next, one peek for all their distinct keys, each taking its key's rows; the
batch reads where `db.lookup` does — the index's latest complete time when it starts, never
before the database's latest write — so each execution reads the writes made before it
arrived, without waiting for the index to catch up with the table's next tick.

Before a kept plan answers, the session's catalog is brought up to date (`refresh_catalog`,
in `twofold.sql.catalog_watch`:
once per execution, or once per batch; it reads storage only when a catalog change may have
been committed since its last read — this process's notifier heard an append to the catalog
shard, or, on SQLite, another connection committed to the file — and so also notices another
process's DDL); when the version moved — any CREATE, DROP or new index, here or in another
process — every kept plan is discarded and the statement is planned afresh, so a kept plan
never answers for a catalog it was not planned against. Other statements (DML, DDL,
SUBSCRIBE, SHOW, EXPLAIN) run through `twofold.sql.execute` each time.
`statement(db, text)` gives the one `PreparedStatement` per database and text (the most recent
`CACHE_SIZE` texts are kept).
"""

from __future__ import annotations

import asyncio
import collections
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from sqlglot import exp

from twofold.api.errors import TwofoldError
from twofold.api.relation import Relation
from twofold.api.results import Result, expand
from twofold.api.schema import Schema
from twofold.protocol import GlobalId, Literal, MapFilterProject, RowSetFinishing
from twofold.sql.catalog_watch import _WATCH_ATTR as _WATCH_ATTR
from twofold.sql.catalog_watch import _CatalogWatch
from twofold.sql.catalog_watch import catalog_version as catalog_version
from twofold.sql.catalog_watch import refresh_catalog as refresh_catalog
from twofold.sql.errors import FeatureNotSupported, InternalError, SqlError
from twofold.sql.lookup import Lookup, _usable

CACHE_SIZE = 256
_QUERY_START = re.compile(r"^[\s(]*(select|with|values|table)\b", re.I)
_QUERIES = (exp.Select, exp.SetOperation, exp.Values, exp.Subquery)

# Stand-in values per parameter position: distinct across positions and between the two sets.
_STAND_INS: dict[type, tuple[Any, Any]] = {
    int: (7_340_033, 9_437_189),
    float: (7340033.25, 9437189.75),
    str: ("\x00twofold-a", "\x00twofold-b"),
    bytes: (b"\x00twofold-a", b"\x00twofold-b"),
}

Path = tuple[str | int, ...]
Holes = dict[str | int, Any]  # a trie over paths: a step's subtrie, or a parameter index leaf


def _stand_in(kind: type, which: int, position: int, value: Any) -> Any:
    if kind is type(None):
        return None
    if kind is bool:
        return value if which == 0 else (not value)
    base = _STAND_INS[kind][which]
    if kind is int:
        return base + 2 * position
    if kind is float:
        return base + 2.0 * position
    return base + (str(position) if kind is str else str(position).encode())


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _diff(a: Any, b: Any, sa: Sequence[Any], sb: Sequence[Any], path: Path,
          holes: list[tuple[Path, int]]) -> bool:
    """Whether plans `a` and `b` are equal but for Literals holding stand-ins `sa[i]` in `a`
    where `b` holds `sb[i]` (recorded in `holes`)."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is Literal:
        va, vb = a.value, b.value
        if _same(va, vb):
            return True
        for i, (x, y) in enumerate(zip(sa, sb, strict=True)):
            if _same(va, x) and _same(vb, y):
                holes.append((path, i))
                return True
        return False
    if isinstance(a, msgspec.Struct):
        return all(_diff(getattr(a, f), getattr(b, f), sa, sb, (*path, f), holes)
                   for f in a.__struct_fields__)
    if ta is list or ta is tuple:
        return len(a) == len(b) and all(_diff(x, y, sa, sb, (*path, i), holes)
                                        for i, (x, y) in enumerate(zip(a, b, strict=True)))
    if ta is dict:
        return a.keys() == b.keys() and all(_diff(a[k], b[k], sa, sb, (*path, k), holes)
                                            for k in a)
    return bool(a == b)


def _trie(holes: list[tuple[Path, int]]) -> Holes:
    root: Holes = {}
    for path, i in holes:
        node = root
        for step in path[:-1]:
            node = node.setdefault(step, {})
        node[path[-1]] = i
    return root


def _fill(node: Any, holes: Holes, params: Sequence[Any]) -> Any:
    """`node` with each hole's Literal holding its parameter's value."""
    if isinstance(node, Literal) and not holes:
        raise AssertionError("a hole is a Literal's place, not inside it")
    if isinstance(node, msgspec.Struct):
        changes = {}
        for step, sub in holes.items():
            child = getattr(node, str(step))
            changes[str(step)] = (Literal(value=params[sub]) if type(sub) is int
                                  else _fill(child, sub, params))
        return msgspec.structs.replace(node, **changes)
    if isinstance(node, list | tuple):
        items = list(node)
        for step, sub in holes.items():
            assert type(step) is int
            items[step] = (Literal(value=params[sub]) if type(sub) is int
                           else _fill(items[step], sub, params))
        return items if isinstance(node, list) else tuple(items)
    if isinstance(node, dict):
        out = dict(node)
        for step, sub in holes.items():
            out[step] = (Literal(value=params[sub]) if type(sub) is int
                         else _fill(out[step], sub, params))
        return out
    raise AssertionError(f"a hole inside a {type(node).__name__}")


@dataclass(frozen=True)
class _KeyPart:
    """One key value of a kept lookup: a parameter's (by index) or a constant."""

    param: int | None
    value: Any


@dataclass
class _Template:
    """A query planned once for one parameter type signature (module docstring)."""

    relation: Relation  # planned with the first stand-ins
    visible: int
    plan_holes: Holes
    lookup: Any  # twofold.sql.lookup.Lookup, planned with the first stand-ins, or None
    key: list[_KeyPart]
    key_scalars: list[str]
    mfp_holes: Holes

    batch: _LookupBatch | None = None
    plain_mfp: MapFilterProject | None = field(init=False, default=None)
    """A lookup without holes: its map/filter/project as a peek takes it (None: identity)."""
    now: _NowLookup | None = field(init=False, default=None)
    """The lookup as `execute_now` runs it (None: not a kept lookup)."""

    def __post_init__(self) -> None:
        if self.lookup is not None and not self.lookup.mfp.is_identity:
            self.plain_mfp = self.lookup.mfp
        if self.lookup is not None:
            self.now = _NowLookup(self)

    def relation_for(self, params: Sequence[Any]) -> Relation:
        rel = self.relation
        if not self.plan_holes:
            return rel
        out = Relation(rel._db, _fill(rel.plan, self.plan_holes, params), rel.schema,
                       rel.inputs, rel.views)
        out.order = list(rel.order)
        return out

    def key_for(self, params: Sequence[Any]) -> list[Any] | None:
        """The lookup's key for `params`, or None when the lookup cannot take it."""
        key = [params[k.param] if k.param is not None else k.value for k in self.key]
        if not all(_usable(v, s) for v, s in zip(key, self.key_scalars, strict=True)):
            return None
        return key

    def lookup_for(self, params: Sequence[Any]) -> Any:
        key = self.key_for(params)
        if key is None:
            return None
        found = self.lookup
        mfp = _fill(found.mfp, self.mfp_holes, params) if self.mfp_holes else found.mfp
        return Lookup(found.index, key, mfp)

    def now_mfp(self, params: Sequence[Any]) -> MapFilterProject | None:
        """The lookup's map/filter/project for `params` as a peek takes it (None: identity)."""
        if self.mfp_holes:
            mfp = _fill(self.lookup.mfp, self.mfp_holes, params)
            return None if mfp.is_identity else mfp
        return self.plain_mfp


class _NowLookup:
    """What `execute_now` does for one template, worked out when it is planned (the catalog
    version it is kept at): the index, how the key is taken from the parameters, the
    map/filter/project and finishing the peek takes, and the result's visible schema.
    Per execution only the parameters' key, the read time and the peek are left."""

    __slots__ = ("finishing", "holes", "index", "key", "plain_mfp", "schema", "template",
                 "trim")

    def __init__(self, template: _Template) -> None:
        found = template.lookup
        assert found is not None
        rel = template.relation
        self.template = template
        self.index: GlobalId = found.index.id
        self.finishing = RowSetFinishing(order_by=rel.order) if rel.order else None
        visible = template.visible
        self.trim = visible != len(rel.schema)
        self.schema = rel.schema if not self.trim else Schema(
            rel.schema.names[:visible], rel.schema.types[:visible])
        self.key = self._plain_key if len(template.key) == 1 and \
            template.key[0].param is not None else template.key_for
        self.holes = bool(template.mfp_holes)  # else the map/filter/project is `plain_mfp`
        self.plain_mfp = template.plain_mfp

    def _plain_key(self, params: Sequence[Any]) -> list[Any] | None:
        """`key_for` of a key that is one parameter."""
        template = self.template
        value = params[template.key[0].param]  # type: ignore[index]
        return [value] if _usable(value, template.key_scalars[0]) else None

    def mfp(self, params: Sequence[Any]) -> MapFilterProject | None:
        return self.template.now_mfp(params)


def _key_parts(a: Any, b: Any, sa: Sequence[Any], sb: Sequence[Any]) -> list[_KeyPart] | None:
    parts = []
    for va, vb in zip(a.key, b.key, strict=True):
        if _same(va, vb):
            parts.append(_KeyPart(None, va))
            continue
        found = [i for i, (x, y) in enumerate(zip(sa, sb, strict=True))
                 if _same(va, x) and _same(vb, y)]
        if not found:
            return None
        parts.append(_KeyPart(found[0], None))
    return parts


def _template(db: Any, node: exp.Expr, kinds: tuple[type, ...],
              params: Sequence[Any]) -> _Template | None:
    """The template of `node` for parameters of types `kinds`, or None (module docstring)."""
    from twofold.sql import compile_query
    from twofold.sql.lookup import Lookup, find_lookup

    if sum(k is bool for k in kinds) > 1:
        return None  # two stand-ins per position cannot tell several bools apart
    sa = [_stand_in(k, 0, i, v) for i, (k, v) in enumerate(zip(kinds, params, strict=True))]
    sb = [_stand_in(k, 1, i, v) for i, (k, v) in enumerate(zip(kinds, params, strict=True))]
    rel_a, visible = compile_query(db, node.copy(), sa)
    holes: list[tuple[Path, int]] = []
    if sa == sb:  # no parameter takes a stand-in (none, or all NULL): nothing varies
        rel_b, found_b = rel_a, find_lookup(db, rel_a)
        found_a = found_b
    else:
        rel_b, visible_b = compile_query(db, node.copy(), sb)
        if (visible != visible_b or rel_a.schema != rel_b.schema or rel_a.order != rel_b.order
                or rel_a.inputs != rel_b.inputs or rel_a.views != rel_b.views
                or not _diff(rel_a.plan, rel_b.plan, sa, sb, (), holes)):
            return None
        found_a, found_b = find_lookup(db, rel_a), find_lookup(db, rel_b)
    key: list[_KeyPart] = []
    scalars: list[str] = []
    mfp_holes: list[tuple[Path, int]] = []
    if (found_a is None) != (found_b is None):
        return None
    if found_a is not None and found_b is not None:
        parts = _key_parts(found_a, found_b, sa, sb)
        if (parts is None or found_a.index is not found_b.index
                or not _diff(found_a.mfp, found_b.mfp, sa, sb, (), mfp_holes)):
            return None
        key = parts
        schema = found_a.index.schema
        scalars = [schema.types[schema.names.index(k)].scalar for k in found_a.index.key]
        mfp = found_a.mfp
        if not mfp.map and not mfp.filter and mfp.project == list(range(len(schema))):
            # Every column in order is no projection: the peek takes the index's row path.
            found_a = Lookup(found_a.index, found_a.key, MapFilterProject())
    template = _Template(rel_a, visible, _trie(holes), found_a, key, scalars, _trie(mfp_holes))
    if found_a is not None and not template.mfp_holes and not rel_a.order:
        mfp = found_a.mfp
        if not mfp.map and not mfp.filter:
            schema = found_a.index.schema
            project = list(range(len(schema))) if mfp.project is None else list(mfp.project)
            positions = [schema.names.index(k) for k in found_a.index.key]
            template.batch = _LookupBatch(found_a.index, positions, project)
    return template


_STALE = object()  # a batch's answer when the catalog moved since its template was planned


class _LookupBatch:
    """Concurrent executions of one template's lookup share one peek: the first starts it
    at once; those arriving while it runs wait and go together in the next, one peek for all
    their keys, each taking the rows of its own key (projected as its query does). A batch
    reads at the index's latest complete time when it starts, never before the database's
    latest write, so every execution reads the writes made before it arrived."""

    def __init__(self, index: Any, positions: list[int], project: list[int]) -> None:
        self.index = index
        self.positions = positions
        self.project = project
        self.epoch: int | None = None  # the catalog version the template was planned at
        self.waiting: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self.task: asyncio.Task[None] | None = None

    async def rows(self, db: Any, relation: Relation, key: list[Any]) -> Result | object:
        """`relation`'s rows for `key` (every column, before `visible`), or `_STALE` when
        the catalog moved since the template was planned (the caller plans again)."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting.append((tuple(key), fut))
        if self.task is None:
            self.task = asyncio.ensure_future(self._run(db, relation))
        got = await fut
        if got is _STALE:
            return got
        t, rows = got
        return Result(relation.schema, t, rows)

    async def _run(self, db: Any, relation: Relation) -> None:
        batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                try:
                    got = await self._peek(db, relation, list(dict.fromkeys(k for k, _ in batch)))
                except Exception as e:
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for k, fut in batch:
                    if not fut.done():
                        fut.set_result(got if got is _STALE else (got[0], got[1].get(k, [])))
        except BaseException:  # cancelled (the server closing): so are its waiters
            for _, fut in batch + self.waiting:
                fut.cancel()
            self.waiting = []
            raise
        finally:
            self.task = None

    async def _peek(self, db: Any, relation: Relation, keys: list[tuple[Any, ...]]
                    ) -> Any:  # (time, rows by key) or _STALE
        from twofold.api.reads import translate

        refresh_catalog(db)  # adopts another's DDL (a storage read only when it may have moved)
        if catalog_version(db) != self.epoch:
            return _STALE
        await db._install()
        rel = db._check_relation(relation, "query")
        # At the index's latest complete time (never before the database's latest write), as
        # `db.lookup` reads: no wait for the index to catch up with the table's next tick.
        t = db._choose_time(self.index, None)
        constraints = [list(k) for k in keys]
        desc = self.index.schema.desc()
        found = db._ctl.peek_now(self.index.id, timestamp=t, literal_constraints=constraints)
        if found is None:  # not readable at once here: peek (and wait)
            with translate(db._name_of(rel)):
                found = await db._ctl.peek(self.index.id, timestamp=t,
                                           literal_constraints=constraints, result_desc=desc,
                                           timeout=db.timeout)
        by_key: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
        positions, project = self.positions, self.project
        for row, n in found:
            if n <= 0:
                continue  # as `expand`: positive multiplicities only
            out = tuple(row[i] for i in project)
            by_key.setdefault(tuple(row[i] for i in positions), []).extend([out] * n)
        return t, by_key


async def run_relation(db: Any, relation: Relation, visible: int, found: Any,
                       as_of: int | None) -> Result:
    """A planned query's result: through the index lookup `found` when it can be read, else
    the relation's own plan; only the `visible` leading columns."""
    from twofold.sql.lookup import run_lookup

    fast = None if found is None else await run_lookup(db, relation, found, as_of)
    result: Result = fast if fast is not None else await db.query(relation, as_of=as_of)
    return _visible(result, relation, visible)


def _visible(result: Result, relation: Relation, visible: int) -> Result:
    if visible == len(relation.schema):
        return result
    schema = Schema(relation.schema.names[:visible], relation.schema.types[:visible])
    return Result(schema, result.timestamp, [r[:visible] for r in result.rows])


def _typed_errors(text: str, e: Exception) -> Exception:
    """The error `twofold.sql.execute` raises for `e` (same translation)."""
    from twofold.sql import _typed

    if isinstance(e, SqlError):
        return e
    if isinstance(e, TwofoldError):
        return _typed(e)
    if isinstance(e, RecursionError):
        return FeatureNotSupported("the statement is nested too deeply")
    if isinstance(e, AttributeError | KeyError | IndexError | TypeError | ValueError
                  | AssertionError):
        return InternalError(f"cannot plan this statement ({type(e).__name__}: {e}); "
                             f"statement: {text[:200]!r}")
    return e


class PreparedStatement:
    """One SQL statement of one database, prepared (module docstring)."""

    def __init__(self, db: Any, text: str) -> None:
        self.db = db
        self.text = text
        self._node: exp.Expr | None = None
        self._query: bool | None = None
        self._epoch: int | None = None
        self._plans: dict[tuple[type, ...], _Template | None] = {}

    def _version(self) -> int:
        refresh_catalog(self.db)  # adopts another's DDL (a read only when it may have moved)
        return catalog_version(self.db)

    def _parsed(self) -> exp.Expr | None:
        """The parsed query, or None for a statement that is not one (left to `execute`)."""
        if self._query is False:
            return None
        if self._node is None:
            from twofold.sql.parser import AsOf, parse

            if not _QUERY_START.match(self.text):
                self._query = False  # DDL, DML, SHOW, ...: parsed by `execute` each time
                return None

            node = parse(self.text)
            self._query = isinstance(node, _QUERIES) or (
                isinstance(node, AsOf) and isinstance(node.this, _QUERIES))
            self._node = node
        return self._node

    def _template_for(self, node: exp.Expr, kinds: tuple[type, ...],
                      params: list[Any]) -> _Template | None:
        version = catalog_version(self.db)
        if version != self._epoch:  # the catalog moved: no kept plan is valid
            self._plans.clear()
            self._epoch = version
        if kinds not in self._plans:
            template = _template(self.db, node, kinds, params)
            if template is not None and template.batch is not None:
                template.batch.epoch = version
            self._plans[kinds] = template
        return self._plans[kinds]

    def execute_now(self, params: Sequence[Any]) -> Result | None:
        """`execute(params)`'s result, computed synchronously, when this statement's plan for
        these parameter types is a kept index lookup, the catalog has not moved since it was
        planned, no dataflow waits to be installed, and a replica in this process has
        published the index at the read's time (`Controller.peek_now`); else None — then
        `await execute(params)`, which also gives the errors. The read is the one `execute`
        makes: at the index's latest complete time, never before the latest write."""
        got = self.rows_now(params)
        return None if got is None else Result(*got)

    def rows_now(self, params: Sequence[Any]) -> tuple[Schema, int, list[tuple[Any, ...]]] | None:
        """`execute_now(params)` as `(schema, time, rows)` (what a `Result` holds), or None.

        The kept lookup (`_NowLookup`) was worked out against catalog version `_epoch`; an
        execution checks that nothing it depends on moved — the catalog (this process's DDL,
        and another process's, which `refresh_catalog` reads when storage says a commit may
        have happened), the dataflows installed — and then only takes the key, chooses the
        time and peeks. Whenever unsure it answers None: the slow path plans again or raises."""
        node = self._node
        if node is None or not self._query or not isinstance(node, _QUERIES):
            return None  # not parsed yet, not a query, or AS OF
        template = self._plans.get(tuple(map(type, params)))
        if template is None:
            return None
        now = template.now
        if now is None:
            return None
        db = self.db
        if db._closed:
            return None
        try:
            watch: _CatalogWatch | None = db.__dict__.get(_WATCH_ATTR)
            if watch is None:
                refresh_catalog(db)
            else:
                watch.refresh(db)  # a storage read only when the catalog may have moved
            if db._seen_version != self._epoch or not _installed(db):
                return None
            key = now.key(params)
            if key is None:
                return None
            # The read time and the read in one call: the index's latest complete time, not
            # before its since, with read-your-writes never before the latest write
            # (`db._choose_time` for an index; a test checks the two agree). The latest write
            # is read without the write lock: one attribute read sees the value before or
            # after a concurrent `_observe_write`, and every write that completed before this
            # read began has stored its time (what read-your-writes promises).
            ctl = db.controller
            if ctl is None:
                return None
            last = db._last_write if db.consistency == "read-your-writes" else -1
            got = ctl.peek_now_latest(
                now.index, not_before=last, literal_constraints=[key],
                mfp=now.mfp(params) if now.holes else now.plain_mfp, finishing=now.finishing)
            if got is None:
                return None
            t, rows = got
            # A unique key's one row: `expand` of it, inline.
            out = ([tuple(rows[0][0])] if len(rows) == 1 and rows[0][1] == 1
                   else expand(rows))
        except Exception:  # whatever it is, `execute` meets it again and says so
            return None
        if now.trim:
            visible = template.visible
            out = [r[:visible] for r in out]
        return now.schema, t, out

    async def execute(self, params: Sequence[Any] | None = None, *,
                      as_of: int | None = None) -> Any:
        from twofold.sql import execute

        try:
            node = self._parsed()
        except Exception as e:
            raise _typed_errors(self.text, e) from e
        if node is None or not self._query:
            if as_of is None:
                return await execute(self.db, self.text, params)
            return await execute(self.db, self.text, params, as_of=as_of)
        values = list(params or ())
        try:
            for _ in range(3):  # a batch finding the catalog moved: planned again
                result = await self._run_query(node, values, as_of, batch=True)
                if result is not _STALE:
                    return result
            return await self._run_query(node, values, as_of, batch=False)
        except Exception as e:
            err = _typed_errors(self.text, e)
            if err is e:
                raise
            raise err from e

    async def _run_query(self, node: exp.Expr, params: list[Any], as_of: int | None,
                         batch: bool) -> Any:
        from twofold.sql import _as_of, compile_query
        from twofold.sql.lookup import find_lookup
        from twofold.sql.parser import AsOf
        from twofold.sql.planner import Planner

        if isinstance(node, AsOf):
            as_of = _as_of(Planner(self.db, params), node.expression)
            node = node.this
        kinds = tuple(type(p) for p in params)
        template = self._template_for(node, kinds, params)
        if batch and template is not None and template.batch is not None and as_of is None:
            key = template.key_for(params)
            if key is not None:  # the batch reads the catalog's version, once for all
                # The template's own relation: every execution's schema and inputs (the
                # batch peeks the index; no plan of it runs).
                relation = template.relation
                got = await template.batch.rows(self.db, relation, key)
                if got is _STALE:
                    return got
                assert isinstance(got, Result)
                return _visible(got, relation, template.visible)
        if self._version() != self._epoch:  # one read of the catalog's version
            template = self._template_for(node, kinds, params)
        if template is None:  # planned for these values only
            relation, visible = compile_query(self.db, node.copy(), params)
            return await run_relation(self.db, relation, visible,
                                      find_lookup(self.db, relation), as_of)
        relation = template.relation_for(params)
        found = None if template.lookup is None else template.lookup_for(params)
        return await run_relation(self.db, relation, template.visible, found, as_of)


_CACHE_ATTR = "_twofold_prepared_statements"


def _installed(db: Any) -> bool:
    """Whether no dataflow of `db` waits to be created or dropped (`db._install` has none)."""
    lock = db._install_lock
    return not db._to_install and not db._to_drop and (lock is None or not lock.locked())


def statement(db: Any, text: str) -> PreparedStatement:
    """The prepared statement for `text` on `db` (one per database and text, the most recent
    `CACHE_SIZE` kept)."""
    # Kept on the database itself: its statements reference it, so a weak mapping keyed by
    # the database would keep it alive; as an attribute they go with it.
    cache: collections.OrderedDict[str, PreparedStatement] | None = \
        db.__dict__.get(_CACHE_ATTR)
    if cache is None:
        cache = collections.OrderedDict()
        setattr(db, _CACHE_ATTR, cache)
    stmt = cache.get(text)
    if stmt is None:
        stmt = cache[text] = PreparedStatement(db, text)
        if len(cache) > CACHE_SIZE:
            cache.popitem(last=False)
    else:
        cache.move_to_end(text)
    return stmt
