"""A loop turn's kept lookups answered together: `answer_together` for the server's turn
(`inbox.Turn.together`), and `rows_now_each`, what `PreparedStatement.rows_now` does for each
lookup of one statement with what they share done once.

Contract: `answer_together(turn, inboxes)` answers (`fastpath.answer_each`) the held bytes of
every inbox whose connection may take a request from its bytes now (`fast_ready()`) and
which are one whole kept-lookup request, writes each reply with `turn.write` and takes those
bytes (`Inbox.take`); the rest it leaves held, for their own offer.

`rows_now_each(prepared, many)` is `[prepared.rows_now(params) for params in many]`
— each `(schema, time, rows)` or None — except that the catalog check (`_CatalogWatch`, one
SQLite `data_version` read), the dataflows-installed check and the controller's checks of
the index and its read time are made once for all of them (`Controller.peek_now_latest_each`),
and None for all where any of those says None. Sound for requests that were all received
before the call: the catalog is read after each was received, and the read time is the
index's latest complete one then, never before the database's latest write (what
read-your-writes promises for every write acknowledged before). The per-request parts — the
parameters' template, key and map/filter/project, the rows and their trimming — are
`rows_now`'s own; a test checks the two agree (`tests/server/test_fastpath_turn.py`).

The statement's private parts are read here (its parsed node, templates and catalog epoch):
this is its batched form, kept beside the server's turn (`inbox.Turn`) that calls it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from twofold.api.results import expand
from twofold.api.schema import Schema
from twofold.protocol import MapFilterProject, Row, RowSetFinishing
from twofold.sql.prepared import (
    _QUERIES,
    _WATCH_ATTR,
    PreparedStatement,
    _installed,
    refresh_catalog,
)

if TYPE_CHECKING:
    from twofold.server.inbox import Inbox, Turn

Got = tuple[Schema, int, list[tuple[Any, ...]]]


def answer_together(turn: Turn, inboxes: list[Inbox]) -> None:
    """The turn's whole kept-lookup requests answered at once (module docstring)."""
    from twofold.server import fastpath

    taken: list[tuple[Inbox, Any]] = []
    requests: list[tuple[Any, bytes]] = []
    for inbox in inboxes:
        data = inbox.held()
        conn = inbox.owner  # a `connection.Connection`
        if data is None or conn is None or not conn.fast_ready():
            continue
        taken.append((inbox, conn))
        requests.append((conn.session, data))
    if len(requests) < 2:
        return  # one alone: its inbox's own offer answers it
    for (inbox, conn), reply in zip(taken, fastpath.answer_each(requests), strict=True):
        if reply is not None:
            inbox.take()
            turn.write(conn.writer.transport, reply)


def rows_now_each(prepared: PreparedStatement,
                  many: Sequence[Sequence[Any]]) -> list[Got | None] | None:
    """`[prepared.rows_now(p) for p in many]`, the shared checks once (module docstring)."""
    node = prepared._node
    if node is None or not prepared._query or not isinstance(node, _QUERIES):
        return None
    db = prepared.db
    if db._closed:
        return None
    try:
        watch = db.__dict__.get(_WATCH_ATTR)
        if watch is None:
            refresh_catalog(db)
        else:
            watch.refresh(db)  # a storage read only when the catalog may have moved
        if db._seen_version != prepared._epoch or not _installed(db):
            return None
        ctl = db.controller
        if ctl is None:
            return None
        last = db._last_write if db.consistency == "read-your-writes" else -1
    except Exception:
        return None
    out: list[Got | None] = [None] * len(many)
    # Per index (one, unless parameter types pick templates on different indexes): the
    # positions, and each one's now-lookup and read.
    groups: dict[Any, tuple[list[int], list[Any],
                            list[tuple[list[Row], MapFilterProject | None,
                                       RowSetFinishing | None]]]] = {}
    plans = prepared._plans
    for i, params in enumerate(many):
        try:
            template = plans.get(tuple(map(type, params)))
            now = None if template is None else template.now
            if now is None:
                continue
            key = now.key(params)
            if key is None:
                continue
            mfp = now.mfp(params) if now.holes else now.plain_mfp
        except Exception:
            continue
        group = groups.get(now.index)
        if group is None:
            group = groups[now.index] = ([], [], [])
        group[0].append(i)
        group[1].append((template, now))
        group[2].append(([key], mfp, now.finishing))
    for index, (positions, nows, lookups) in groups.items():
        try:
            got = ctl.peek_now_latest_each(index, not_before=last, lookups=lookups)
        except Exception:
            continue
        if got is None:
            continue
        t, each = got
        for i, (template, now), rows in zip(positions, nows, each, strict=True):
            if rows is None:
                continue
            try:
                # A unique key's one row: `expand` of it, inline (as `rows_now`).
                found = ([tuple(rows[0][0])] if len(rows) == 1 and rows[0][1] == 1
                         else expand(rows))
            except Exception:
                continue
            if now.trim:
                visible = template.visible
                found = [r[:visible] for r in found]
            out[i] = (now.schema, t, found)
    return out
