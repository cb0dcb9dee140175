"""Introspection and session statements: `SHOW`, `EXPLAIN`, `SET`, and `SUBSCRIBE`.

Contract: `SHOW TABLES | VIEWS | MATERIALIZED VIEWS | INDEXES [ON obj] | OBJECTS` return a
`Result` with a `name` column (indexes also `on` and `key`); `SHOW COLUMNS FROM obj` returns
`name`, `nullable`, `type` (PostgreSQL type names); `SHOW CREATE ... obj` returns `name`,
`create_sql`; `SHOW <variable>` returns the session variable set with `SET` (or its default).
`EXPLAIN query` returns one `plan` row per operator (see `twofold.sql.explain`). `SUBSCRIBE`
subscribes to the object or query through `db.subscribe` (`SNAPSHOT`, `AS OF`, `UP TO` as its
`snapshot`, `as_of`, `up_to`).
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from twofold.api.results import Result
from twofold.api.schema import Schema
from twofold.protocol import ColumnType
from twofold.sql.errors import FeatureNotSupported, UndefinedObject, UndefinedTable
from twofold.sql.explain import explain
from twofold.sql.parser import Show, Subscribe
from twofold.sql.planner import Planner
from twofold.sql.types import type_name

_TEXT = ColumnType("str", False)
_DEFAULTS = {"TRANSACTION_ISOLATION": "strict serializable", "SERVER_VERSION": "15.0",
             "STANDARD_CONFORMING_STRINGS": "on", "CLIENT_ENCODING": "UTF8",
             "DATESTYLE": "ISO, MDY", "TIMEZONE": "UTC", "SEARCH_PATH": "public",
             "APPLICATION_NAME": "", "INTEGER_DATETIMES": "on"}


def _result(db: Any, names: list[str], rows: list[tuple[Any, ...]]) -> Result:
    schema = Schema(tuple(names), tuple(_TEXT for _ in names))
    return Result(schema, db.now(), rows)


def _settings(db: Any) -> dict[str, str]:
    found: dict[str, str] | None = getattr(db, "_sql_settings", None)
    if found is None:
        found = {}
        db._sql_settings = found
    return found


def show(db: Any, node: Show) -> Result:
    what = node.this
    table = node.args.get("table")
    name = table.name if table is not None else None
    objects = dict(db.objects())
    if what == "TABLES":
        return _result(db, ["name"], [(n,) for n, k in sorted(objects.items()) if k == "table"])
    if what == "MATERIALIZED VIEWS":
        return _result(db, ["name"], [(n,) for n, k in sorted(objects.items())
                                      if k == "materialized view"])
    if what == "VIEWS":
        return _result(db, ["name"], [(n,) for n, k in sorted(objects.items()) if k == "view"])
    if what == "OBJECTS":
        return _result(db, ["name", "type"], sorted(objects.items()))
    if what == "INDEXES":
        rows: list[tuple[Any, ...]] = []
        for n, k in sorted(objects.items()):
            if k != "index":
                continue
            idx = db.get(n)
            on = indexed_object(db, idx) or ""
            if name is not None and on != name:
                continue
            rows.append((n, on, ", ".join(idx.key)))
        return _result(db, ["name", "on", "key"], rows)
    if what in ("COLUMNS", "CREATE"):
        if name is None:
            raise FeatureNotSupported(f"SHOW {what} needs an object name")
        planner = Planner(db)
        rel = planner.relation(name) if name in objects else None
        if rel is None:
            raise UndefinedTable(f'relation "{name}" does not exist')
        if what == "COLUMNS":
            return _result(db, ["name", "nullable", "type"], [
                (c.name, "true" if c.nullable else "false", type_name(c.column_type.scalar))
                for c in rel.cols if not c.hidden])
        return _result(db, ["name", "create_sql"], [(name, create_sql(db, db.get(name)))])
    value = _settings(db).get(what, _DEFAULTS.get(what))
    if value is None:
        raise UndefinedObject(f"unrecognized configuration parameter {what.lower()!r}")
    return _result(db, [what.lower()], [(value,)])


def create_sql(db: Any, obj: Any) -> str:
    """A statement that creates `obj` again: a view's own text; a table's and an index's
    `CREATE` from their schema and key; otherwise (a materialized view, a DSL-made view) a
    description of the object."""
    from twofold.api.objects import Index, Table

    sql: str | None = getattr(obj, "sql", None)
    if sql:
        return sql
    if isinstance(obj, Table):
        cols = [f"{_ident(n)} {type_name(t.scalar)}{'' if t.nullable else ' NOT NULL'}"
                for n, t in obj.schema]
        if obj.primary_key:
            cols.append(f"PRIMARY KEY ({', '.join(_ident(k) for k in obj.primary_key)})")
        return f"CREATE TABLE {_ident(obj.name)} ({', '.join(cols)})"
    if isinstance(obj, Index):
        on = indexed_object(db, obj)
        if on is not None:
            keys = ", ".join(_ident(k) for k in obj.key)
            return f"CREATE INDEX {_ident(obj.name)} ON {_ident(on)} ({keys})"
    return repr(obj)


def indexed_object(db: Any, index: Any) -> str | None:
    """The name of the table or view an index arranges as it is, or None (an index of a
    query)."""
    from twofold.protocol import Get

    source = index.source
    name: str | None = getattr(source, "name", None)
    if name is not None:
        return name
    if isinstance(source.plan, Get) and source.plan.id in source.inputs:
        return str(source.inputs[source.plan.id].name)
    for view in source.views:  # a view's plan is inlined: the view whose plan it is
        obj = db.get(view)
        if obj.plan == source.plan and obj.schema == source.schema:
            return str(view)
    return None


def _ident(name: str) -> str:
    """`name` as a SQL identifier (quoted unless it reads back as itself unquoted)."""
    if name.isidentifier() and name == name.lower() and name.isascii():
        return name
    return '"' + name.replace('"', '""') + '"'


def set_variable(db: Any, node: exp.Set) -> int:
    for item in node.expressions:
        eq = item.this
        if not isinstance(eq, exp.EQ):
            raise FeatureNotSupported(f"SET {item.sql()} is not supported")
        name = eq.this.name.upper()
        value = eq.expression
        _settings(db)[name] = value.name if isinstance(value, exp.Literal | exp.Column |
                                                       exp.Identifier) else value.sql()
    return 0


def explain_result(db: Any, planner: Planner, node: exp.Expr) -> Result:
    from twofold.sql import compile_query
    from twofold.sql.lookup import explain_lookup, find_lookup
    from twofold.sql.parser import AsOf

    if isinstance(node, AsOf):
        node = node.this
    if not isinstance(node, exp.Select | exp.SetOperation | exp.Values | exp.Subquery):
        raise FeatureNotSupported("EXPLAIN explains queries (SELECT ...)")
    relation, _ = compile_query(db, node, planner.params)
    lines = explain(relation.plan, relation.inputs)
    found = find_lookup(db, relation)
    if found is not None:  # the chain's innermost line is the Get the lookup replaces
        depth = len(lines[-1]) - len(lines[-1].lstrip())
        lines[-1] = " " * depth + explain_lookup(found)
    if relation.order:
        keys = ", ".join(f"#{k.column}{' DESC' if k.desc else ''}" for k in relation.order)
        lines = [f"Finish order by ({keys})", *("  " + ln for ln in lines)]
    return _result(db, ["plan"], [(ln,) for ln in lines])


async def subscribe(db: Any, planner: Planner, node: Subscribe) -> Any:
    from twofold.sql import _as_of, compile_query

    target = node.this
    if isinstance(target, exp.Table):
        query: exp.Expr = exp.select("*").from_(target.name)
    else:
        query = target
    relation, visible = compile_query(db, query, planner.params)
    if visible != len(relation.schema):
        raise FeatureNotSupported("ORDER BY in SUBSCRIBE is not supported")
    if node.args.get("progress") is not None:
        _flag(node.args["progress"])  # a bad value is refused here; the rows: subscribe_rows
    snap = node.args.get("snapshot")
    snapshot = True if snap is None else _flag(snap)
    as_of = _as_of(planner, node.args["as_of"]) if node.args.get("as_of") is not None else None
    up_to = _as_of(planner, node.args["up_to"]) if node.args.get("up_to") is not None else None
    return await db.subscribe(relation, as_of=as_of, snapshot=snapshot, up_to=up_to)


def subscribe_rows(batch: Any, progressed: int | None = None) -> list[tuple[Any, ...]]:
    """A subscription `Batch` as Materialize's SUBSCRIBE rows: `(mz_timestamp, mz_diff,
    *columns)`, one per update, in time order (what a wire-protocol server streams).

    With `progressed` (SUBSCRIBE ... WITH (PROGRESS): the latest time a progress row
    announced), the rows are `(mz_timestamp, mz_progressed, mz_diff, *columns)`: each update
    with `mz_progressed` false, then — when the batch's upper moved past `progressed` — one
    progress row `(upper, true, NULL, NULL...)`: no later row has a time before `upper`."""
    updates = sorted(batch.updates, key=lambda u: u[0])
    if progressed is None:
        return [(t, d, *row) for t, row, d in updates]
    rows: list[tuple[Any, ...]] = [(t, False, d, *row) for t, row, d in updates]
    upper = batch.upper.time
    if upper is not None and upper > progressed:
        rows.append((upper, True, None, *([None] * len(batch.schema.names))))
    return rows


def subscribe_progress(text: str) -> bool:
    """Whether the SUBSCRIBE statement `text` asks for progress rows (WITH (PROGRESS))."""
    from twofold.sql.parser import parse

    node = parse(text)
    value = node.args.get("progress") if isinstance(node, Subscribe) else None
    return value is not None and _flag(value)


def _flag(node: exp.Expr) -> bool:
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    text = node.name.lower()
    if text in ("true", "on", "1", "t"):
        return True
    if text in ("false", "off", "0", "f"):
        return False
    raise FeatureNotSupported(f"SNAPSHOT = {node.sql()} is not a boolean")
