"""Running one statement of a session: which part of the server answers it.

Contract: `run(session, sql, params)` gives the statement's Outcome — transaction control and
session shims (SET/SHOW/RESET, `version()` and friends) answered here, COPY, cursors, catalog
relations for tools, everything else through the SQL layer (`db.sql`) within the session's
transaction (`staging`: pinned reads, staged writes; inside a failed transaction every
statement but COMMIT/ROLLBACK is `25P02`).

`run_now(session, sql, params)` is `run`'s Outcome computed synchronously where that is
possible — a text `run` has already handed to the SQL layer (no shim, COPY, cursor or catalog
relation answers it: a property of the text), outside a transaction block, that the SQL layer
answers at once (`PreparedStatement.execute_now`: a kept point lookup) — else None, and the
caller awaits `run`.
"""

from __future__ import annotations

import collections
import re
from typing import TYPE_CHECKING, Any

from twofold.server import messages as m
from twofold.server import shims, staging
from twofold.server.copy import copy_statement
from twofold.server.origins import sourced
from twofold.server.portals import Outcome, Sourced, remember_sourced
from twofold.server.statements import (
    command_tag,
    parse_close,
    parse_copy,
    parse_declare,
    parse_fetch,
)
from twofold.sql.parser import parse_off_loop
from twofold.sql.prepared import statement

_SQL_TEXTS_KEPT = 1024
_sql_texts: collections.OrderedDict[str, None] = collections.OrderedDict()
"""Texts `run` handed to the SQL layer (every recogniser before it declined them)."""

if TYPE_CHECKING:
    from twofold.server.session import Session


async def run(s: Session, sql: str, params: list[Any]) -> Outcome:
    if (control := await staging.control(s, sql)) is not None:
        return control
    if (setting := shims.set_statement(sql, s.vars)) is not None:
        name, value = setting
        if name in shims.REPORTED:
            s.out(m.encode_parameter_status(name, value))
        return Outcome("SET")
    if (every := shims.show_all(sql, s.vars)) is not None:
        return Outcome("SHOW", shims.SHOW_ALL_COLUMNS, list(every))
    if (shown := shims.show_statement(sql, s.vars)) is not None:
        name, value = shown
        return Outcome("SHOW", [(name, "str")], [(value,)])
    if shims.reset_statement(sql, s.vars):
        return Outcome(command_tag(sql, 0))
    if (probe := shims.probe(sql, s.vars, s.pid)) is not None:
        cols, row = probe
        return Outcome("SELECT 1", cols, [tuple(row)])
    if (copy := parse_copy(sql)) is not None:
        return await copy_statement(s.db, copy, params,
                                    lambda q, p: staging.sql(s, q, p))
    if (declared := parse_declare(sql)) is not None:
        name, query, hold = declared  # outside BEGIN: held until CLOSE or the session ends
        return await s.cursors.declare(name, query, params, hold=hold or not s.tx.explicit)
    if (fetch := parse_fetch(sql)) is not None:
        return await s.cursors.fetch(*fetch)
    if (closed := parse_close(sql)) is not None:
        return await s.cursors.close(closed)
    from twofold.server import catalog

    if catalog.is_catalog_query(sql):
        cols, rows = await catalog.run(s.db, sql, params, s)
        return Outcome(f"SELECT {len(rows)}", cols, rows)
    _notice_skipped(s, sql)
    _sql_texts[sql] = None
    if len(_sql_texts) > _SQL_TEXTS_KEPT:
        _sql_texts.popitem(last=False)
    await parse_off_loop(sql)  # a long text: parsed on a thread, not on the loop
    return _sourced(s, sql, await staging.sql(s, sql, params))


def run_now(s: Session, sql: str, params: list[Any]) -> Outcome | None:
    """`run(s, sql, params)`'s Outcome at once, or None (module docstring). Outside a
    transaction block `staging.sql` is the prepared statement's `execute`, whose synchronous
    form this takes."""
    if sql not in _sql_texts or s.tx.explicit or s.tx.failed:
        return None
    result = statement(s.db, sql).execute_now(params)
    return None if result is None else _sourced(s, sql, result)


def _sourced(s: Session, sql: str, result: Any) -> Outcome:
    """`Outcome.of(sql, result)`, its columns read from tables said to be (`origins`)."""
    o = Outcome.of(sql, result)
    if o.columns and o.stream is None and o.copy is None and \
            not any(isinstance(c, Sourced) for c in o.columns):
        cols = sourced(s.db, sql, o.columns)
        if any(isinstance(c, Sourced) for c in cols):
            o.columns = cols
            remember_sourced(result.schema, cols)
    return o


_NAME = r'(?:"(?:[^"]|"")+"|[\w$]+)(?:\s*\.\s*(?:"(?:[^"]|"")+"|[\w$]+))?'
_DROP_IF = re.compile(rf"^\s*drop\s+(table|view|materialized\s+view|index)\s+if\s+exists\s+"
                      rf"({_NAME}(?:\s*,\s*{_NAME})*)", re.I | re.S)
_CREATE_IF = re.compile(rf"^\s*create\s+(?:table|materialized\s+view|(?:default\s+)?index)\s+"
                        rf"if\s+not\s+exists\s+({_NAME})", re.I | re.S)
_PART = re.compile(r'"(?:[^"]|"")+"|[\w$]+')


def _object_name(text: str) -> str:
    last: str = _PART.findall(text)[-1]
    return last[1:-1].replace('""', '"') if last.startswith('"') else last.lower()


def _notice_skipped(s: Session, sql: str) -> None:
    """PostgreSQL's NOTICE for what `IF [NOT] EXISTS` skips: `table "t" does not exist,
    skipping` (00000) for each missing name of a DROP, `relation "t" already exists,
    skipping` (42P07) for a CREATE of one that exists (psql prints them; migration tools
    log them)."""
    if not sql.lstrip()[:6].lower().startswith(("drop", "create")):
        return  # the cheap test first: every statement run here passes through
    from twofold.api.errors import UnknownObject

    def exists(name: str) -> bool:
        try:
            s.db.get(name)
        except UnknownObject:
            return False
        except Exception:
            return True  # not ours to judge: the statement says
        return True

    if (drop := _DROP_IF.match(sql)) is not None:
        kind = " ".join(drop.group(1).lower().split())
        for name in (_object_name(n) for n in re.findall(_NAME, drop.group(2))):
            if not exists(name):
                s.out(m.encode_error("00000", f'{kind} "{name}" does not exist, skipping',
                                     severity="NOTICE", notice=True))
    elif (create := _CREATE_IF.match(sql)) is not None:
        name = _object_name(create.group(1))
        if exists(name):
            s.out(m.encode_error("42P07", f'relation "{name}" already exists, skipping',
                                 severity="NOTICE", notice=True))
