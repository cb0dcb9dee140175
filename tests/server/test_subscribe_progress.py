"""SUBSCRIBE ... WITH (PROGRESS) over the wire, as Materialize emits it: the columns
`mz_timestamp, mz_progressed, mz_diff, ...`; a progress row `(t, true, NULL, NULL...)` first
at the start time and then each time the frontier moves; no row after a progress row at `t`
has a time before `t`."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import errors

from twofold.api.results import Batch
from twofold.api.schema import Schema
from twofold.protocol import ColumnType, Frontier
from twofold.sql.show import subscribe_progress, subscribe_rows
from twofold.testing.pgwire import ServerHandle


def connect(server: ServerHandle) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10)


def _check_progress(rows: list[tuple[Any, ...]], width: int) -> None:
    """Materialize's guarantee: progress times increase, and no row comes before one."""
    floor = -1
    for t, progressed, diff, *cols in rows:
        assert len(cols) == width
        if progressed:
            assert diff is None and cols == [None] * width
            assert t > floor
            floor = t
        else:
            assert progressed is False and diff is not None and t >= floor


def test_subscribe_with_progress_streams_progress_rows(server: ServerHandle, name: str) -> None:
    with connect(server) as c, connect(server) as writer:
        c.execute(f"CREATE TABLE {name} (k bigint, v text)")
        c.execute(f"INSERT INTO {name} VALUES (1, 'a')")
        rows: list[tuple[Any, ...]] = []
        with c.cursor() as cur:
            for row in cur.stream(f"SUBSCRIBE {name} WITH (PROGRESS)"):
                if not rows:
                    assert cur.description is not None
                    assert [d.name for d in cur.description] == [
                        "mz_timestamp", "mz_progressed", "mz_diff", "k", "v"]
                rows.append(row)
                data = [r for r in rows if not r[1]]
                if len(data) == 1 and len(rows) == 3:  # start, snapshot, a progress after it
                    writer.execute(f"INSERT INTO {name} VALUES (2, 'b')")
                if len(data) == 2 and rows[-1][1]:
                    break
        start = rows[0]
        assert start[1:] == (True, None, None, None)  # the first row: progress at the start
        data = [r for r in rows if not r[1]]
        assert [r[2:] for r in data] == [(1, 1, "a"), (1, 2, "b")]
        assert data[0][0] == start[0]  # the snapshot is at the start time
        _check_progress(rows, 2)
        assert rows[-1][0] > data[1][0]  # a progress row after the write closes its time


def test_cursor_fetch_with_progress(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        c.execute(f"INSERT INTO {name} VALUES (7)")
        c.execute(f"DECLARE cur CURSOR FOR SUBSCRIBE {name} WITH (SNAPSHOT, PROGRESS = true)")
        got: list[tuple[Any, ...]] = []
        for _ in range(20):
            cur = c.execute("FETCH 100 cur WITH (timeout = '1s')")
            assert cur.description is not None
            assert [d.name for d in cur.description][:3] == [
                "mz_timestamp", "mz_progressed", "mz_diff"]
            got += cur.fetchall()
            if sum(1 for r in got if r[1]) >= 2:
                break
        _check_progress(got, 1)
        assert [r[2:] for r in got if not r[1]] == [(1, 7)]
        c.execute("CLOSE cur")
        t = got[0][0]  # the start: COPY over the same times ends at UP TO
        with c.cursor().copy(f"COPY (SUBSCRIBE {name} WITH (PROGRESS) AS OF {t} "
                             f"UP TO {t + 1}) TO STDOUT") as cp:
            copied = list(cp.rows())
        assert copied[:2] == [(str(t), "t", None, None), (str(t), "f", "1", "7")]
        c.execute(f"DECLARE cur CURSOR FOR SUBSCRIBE {name} WITH (PROGRESS = false)")
        cur = c.execute("FETCH 1 cur WITH (timeout = '2s')")
        assert cur.description is not None
        assert [d.name for d in cur.description] == ["mz_timestamp", "mz_diff", "k"]
        assert [r[1:] for r in cur.fetchall()] == [(1, 7)]
        c.execute("CLOSE cur")


def test_prepared_subscribe_with_progress_is_described(server: ServerHandle, name: str) -> None:
    """Describe of a prepared SUBSCRIBE names mz_progressed (typed bool) before it runs."""
    import asyncio

    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        with pytest.raises(errors.FeatureNotSupported):
            c.execute(f"SUBSCRIBE {name} WITH (PROGRESS = 'maybe')").fetchone()

    async def described() -> list[tuple[str, str]]:
        async with server.asyncpg() as conn:
            stmt = await conn.prepare(f"SUBSCRIBE {name} WITH (PROGRESS)")
            return [(a.name, a.type.name) for a in stmt.get_attributes()]

    assert asyncio.run(described()) == [("mz_timestamp", "int8"), ("mz_progressed", "bool"),
                                        ("mz_diff", "int8"), ("k", "int8")]


def test_subscribe_rows_with_progress() -> None:
    schema = Schema(["k"], [ColumnType(scalar="int")])
    batch = Batch(schema, Frontier.at(3), Frontier.at(6), [(5, (1,), -1), (3, (2,), 1)])
    assert subscribe_rows(batch) == [(3, 1, 2), (5, -1, 1)]
    assert subscribe_rows(batch, 3) == [(3, False, 1, 2), (5, False, -1, 1),
                                        (6, True, None, None)]
    assert subscribe_rows(batch, 6) == [(3, False, 1, 2), (5, False, -1, 1)]  # no move
    empty = Batch(schema, Frontier.at(6), Frontier.at(9), [])
    assert subscribe_rows(empty, 6) == [(9, True, None, None)]
    assert subscribe_progress("SUBSCRIBE t WITH (SNAPSHOT = false, PROGRESS)")
    assert not subscribe_progress("SUBSCRIBE t WITH (PROGRESS = false)")
    assert not subscribe_progress("SUBSCRIBE (SELECT 1)")
