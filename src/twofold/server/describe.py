"""Describing a prepared statement without running it: the columns it would return.

Contract: `describe_sql(session, sql, params)` is the statement's result columns, or None for
a statement that returns no rows (DDL, DML, SET, COPY, transaction control). Shims, cursors
and catalog relations are described as they are answered; a query is compiled against the
catalog (not run) with `params` standing in for its parameters; a SUBSCRIBE gets
`mz_timestamp, mz_diff` first (`mz_timestamp, mz_progressed, mz_diff` WITH (PROGRESS)).
Column types are `portals.columns_of`'s, as the executed statement's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twofold.server import shims
from twofold.server.origins import sourced
from twofold.server.portals import PROGRESS_COLS, SUB_COLS, Column, Outcome, columns_of
from twofold.server.statements import parse_copy, parse_declare, parse_fetch

if TYPE_CHECKING:
    from twofold.server.session import Session


async def describe_sql(s: Session, sql: str, params: list[Any]) -> list[Column] | None:
    from sqlglot import exp

    import twofold.sql.statements  # noqa: F401 - keeps the SQL layer loaded
    from twofold.sql import compile_query
    from twofold.sql.parser import AsOf, Subscribe, parse

    if not sql or shims.classify(sql) or parse_copy(sql) or parse_declare(sql):
        return None
    if shims.set_statement(sql, s.vars) is not None or shims.reset_statement(sql, s.vars):
        return None
    if shims.show_all(sql, s.vars) is not None:
        return shims.SHOW_ALL_COLUMNS
    if (shown := shims.show_statement(sql, s.vars)) is not None:
        return [(shown[0], "str")]
    if (probe := shims.probe(sql, s.vars, s.pid)) is not None:
        return probe[0]
    if (fetch := parse_fetch(sql)) is not None:
        return s.cursors.columns(fetch[0])
    from twofold.server import catalog

    if catalog.is_catalog_query(sql):
        # NULL parameters: the columns without a stand-in ('' for a text one) DuckDB must cast
        cols, _ = await catalog.run(s.db, sql, [None] * len(params), s)
        return cols
    node = parse(sql)
    sub = isinstance(node, Subscribe)
    progress = False
    if isinstance(node, Subscribe):
        from twofold.sql.show import subscribe_progress

        progress = subscribe_progress(sql)
        target = node.this
        node = exp.select("*").from_(target.name) if isinstance(target, exp.Table) \
            else target
    if isinstance(node, AsOf):
        node = node.this
    if not isinstance(node, exp.Select | exp.SetOperation | exp.Values | exp.Subquery):
        if isinstance(node, exp.Show) or type(node).__name__ in ("Show", "Explain"):
            # EXPLAIN plans (never runs) its query: its rows' column as it is answered
            return Outcome.of(sql, await s.db.sql(sql, params or None)).columns
        if isinstance(node, exp.Insert | exp.Update | exp.Delete):
            _target_exists(s.db, node)
        return None
    relation, visible = compile_query(s.db, node, params or None)
    cols = columns_of(relation.schema)[:visible]
    if not sub:
        return sourced(s.db, sql, cols)  # from which table columns (RowDescription)
    return (PROGRESS_COLS if progress else SUB_COLS) + cols


def _target_exists(db: Any, node: Any) -> None:
    """A write's table exists, or `42P01` now: PostgreSQL says so at Parse, before a driver
    (asyncpg's executemany) encodes parameters with the types inferred without it."""
    from sqlglot import exp

    from twofold.api.errors import UnknownObject
    from twofold.sql.errors import UndefinedTable

    target = node.this
    if isinstance(target, exp.Schema):
        target = target.this
    if not isinstance(target, exp.Table) or not target.name:
        return
    try:
        db.get(target.name)
    except UnknownObject:
        raise UndefinedTable(f'relation "{target.name}" does not exist') from None
