"""The extended protocol's implicit transaction, as PostgreSQL's: outside `BEGIN`, the writes
between two Syncs are one transaction — applied together at Sync, or not at all when one of
them fails (the error skips to Sync); a read of data after such a write is refused (25000,
Materialize's rule: it would not see the staged write); `BEGIN` inside it makes it a block.
Real clients: psycopg's pipeline and `executemany`, asyncpg's `executemany`."""

from __future__ import annotations

import asyncio

import asyncpg
import psycopg
import pytest
from psycopg import errors
from tests.server.test_extended import SYNC, bind, execute, parse
from tests.server.wire import Raw, msg, query

from twofold.testing.pgwire import ServerHandle


def _rows(server: ServerHandle, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        return c.execute(sql).fetchall()


def _insert(raw: Raw, name: str, value: bytes) -> bytes:
    return bind("", f"ins_{name}", (value,)) + execute("")


def test_writes_between_syncs_are_one_transaction(server: ServerHandle, name: str) -> None:
    raw = Raw(server.host, server.port)
    raw.login()
    raw.send(query(f"CREATE TABLE {name} (k bigint PRIMARY KEY, v text)"))
    raw.until(b"Z")
    raw.send(parse(f"ins_{name}", f"INSERT INTO {name} VALUES ($1, 'x')", (20,)) + SYNC)
    raw.until(b"Z")
    # three inserts, the third a duplicate key: nothing of the three is written
    raw.send(_insert(raw, name, b"1") + _insert(raw, name, b"2") + _insert(raw, name, b"1") +
             _insert(raw, name, b"3") + SYNC)
    got = raw.until(b"Z")
    assert [k for k, _ in got] == [b"2", b"C", b"2", b"C", b"2", b"E", b"Z"]
    assert got[-1][1] == b"I"
    assert _rows(server, f"SELECT k FROM {name}") == []
    # without the error, both are written at Sync
    raw.send(_insert(raw, name, b"4") + _insert(raw, name, b"5") + SYNC)
    assert [k for k, _ in raw.until(b"Z")] == [b"2", b"C", b"2", b"C", b"Z"]
    assert _rows(server, f"SELECT k FROM {name} ORDER BY k") == [(4,), (5,)]
    # a key already in the table fails at Sync: reported before ReadyForQuery, nothing written
    raw.send(_insert(raw, name, b"6") + _insert(raw, name, b"4") + SYNC)
    got = raw.until(b"Z")
    assert got[-2][0] == b"E" and b"23505" in got[-2][1]
    assert _rows(server, f"SELECT k FROM {name} ORDER BY k") == [(4,), (5,)]
    # each Sync is its own transaction: the next pipeline works
    raw.send(_insert(raw, name, b"7") + SYNC)
    assert [k for k, _ in raw.until(b"Z")] == [b"2", b"C", b"Z"]
    assert _rows(server, f"SELECT k FROM {name} ORDER BY k") == [(4,), (5,), (7,)]
    raw.close()


def test_a_read_after_a_write_before_sync_is_refused(server: ServerHandle, name: str) -> None:
    raw = Raw(server.host, server.port)
    raw.login()
    raw.send(query(f"CREATE TABLE {name} (k bigint)"))
    raw.until(b"Z")
    raw.send(parse("", f"INSERT INTO {name} VALUES (1)") + bind("", "") + execute("") +
             parse("", f"SELECT count(*) FROM {name}") + bind("", "") + execute("") + SYNC)
    got = raw.until(b"Z")
    assert got[-2][0] == b"E" and b"25000" in got[-2][1]
    assert _rows(server, f"SELECT k FROM {name}") == []  # the failed transaction wrote nothing
    # a read, then a write: the read ran on its own, the write is applied at Sync
    raw.send(parse("", f"SELECT count(*) FROM {name}") + bind("", "") + execute("") +
             parse("", f"INSERT INTO {name} VALUES (2)") + bind("", "") + execute("") + SYNC)
    assert [k for k, _ in raw.until(b"Z")][-1] == b"Z"
    assert _rows(server, f"SELECT k FROM {name}") == [(2,)]
    raw.close()


def test_psycopg_pipeline_and_executemany(server: ServerHandle, name: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        c.execute(f"CREATE TABLE {name} (k bigint PRIMARY KEY, v double precision)")
        c.cursor().executemany(f"INSERT INTO {name} VALUES (%s, %s)",
                               [(i, i / 2) for i in range(20)])
        assert c.execute(f"SELECT count(*), sum(v) FROM {name}").fetchone() == (20, 95.0)
        with pytest.raises(errors.UniqueViolation):
            c.cursor().executemany(f"INSERT INTO {name} VALUES (%s, %s)",
                                   [(100, 0.0), (101, 0.0), (5, 0.0)])
        assert c.execute(f"SELECT count(*) FROM {name}").fetchone() == (20,)  # none of the 3
        with pytest.raises(errors.UniqueViolation), c.pipeline():
            c.execute(f"INSERT INTO {name} VALUES (200, 1)")
            c.execute(f"UPDATE {name} SET v = v + 1 WHERE k < 10")
            c.execute(f"INSERT INTO {name} VALUES (0, 1)")
        assert c.execute(f"SELECT count(*), sum(v) FROM {name}").fetchone() == (20, 95.0)
        with c.pipeline():
            c.execute(f"UPDATE {name} SET v = v + 1 WHERE k < 10")
            c.execute(f"DELETE FROM {name} WHERE k >= 18")
        assert c.execute(f"SELECT count(*), sum(v) FROM {name}").fetchone() == (18, 86.5)


def test_asyncpg_executemany_is_atomic(server: ServerHandle, name: str) -> None:
    async def run() -> None:
        async with server.asyncpg() as conn:
            await conn.execute(f"CREATE TABLE {name} (k bigint PRIMARY KEY)")
            await conn.executemany(f"INSERT INTO {name} VALUES ($1)", [(1,), (2,), (3,)])
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.executemany(f"INSERT INTO {name} VALUES ($1)", [(4,), (5,), (2,)])
            assert await conn.fetchval(f"SELECT count(*) FROM {name}") == 3

    asyncio.run(run())


def test_begin_inside_an_implicit_transaction_makes_it_a_block(server: ServerHandle,
                                                             name: str) -> None:
    raw = Raw(server.host, server.port)
    raw.login()
    raw.send(query(f"CREATE TABLE {name} (k bigint)"))
    raw.until(b"Z")
    raw.send(parse("", f"INSERT INTO {name} VALUES (1)") + bind("", "") + execute("") +
             parse("", "BEGIN") + bind("", "") + execute("") + SYNC)
    got = raw.until(b"Z")
    assert got[-1] == (b"Z", b"T")
    assert _rows(server, f"SELECT k FROM {name}") == []
    raw.send(query("COMMIT"))
    raw.until(b"Z")
    assert _rows(server, f"SELECT k FROM {name}") == [(1,)]
    raw.close()


def test_alone_until_sync_reads_the_buffered_messages() -> None:
    """The sans-IO check that lets a write run at once when it is the only statement of its
    implicit transaction (psycopg's Parse/Bind/Describe/Execute/Sync in one packet)."""
    from twofold.server.machine import Machine, Phase

    def machine(data: bytes) -> Machine:
        mc = Machine()
        mc.phase = Phase.EXTENDED
        mc.receive_data(data)
        return mc

    describe_p = msg(b"D", b"P\0")
    assert machine(execute("") + SYNC).alone_until_sync("")
    assert machine(describe_p + execute("") + SYNC).alone_until_sync("")
    assert machine(msg(b"C", b"Sx\0") + msg(b"H") + SYNC).alone_until_sync("")
    assert not machine(execute("")).alone_until_sync("")  # no Sync yet
    assert not machine(SYNC[:3]).alone_until_sync("")  # a Sync not whole yet
    assert not machine(bind("", "s") + execute("") + SYNC).alone_until_sync("")
    assert not machine(execute("other") + SYNC).alone_until_sync("")
    assert not machine(msg(b"D", b"Pother\0") + SYNC).alone_until_sync("")
    assert not machine(query("SELECT 1") + SYNC).alone_until_sync("")
    assert machine(SYNC + bind("", "s")).alone_until_sync("")  # after the Sync: another one


def test_a_query_message_ends_the_implicit_transaction(server: ServerHandle, name: str) -> None:
    """A simple Query after Execute without a Sync (as asyncpg may send) ends the implicit
    transaction, as PostgreSQL's does: its writes are applied, or discarded on an error."""
    raw = Raw(server.host, server.port)
    raw.login()
    raw.send(query(f"CREATE TABLE {name} (k bigint)"))
    raw.until(b"Z")
    insert = parse("", f"INSERT INTO {name} VALUES ($1)", (20,))
    raw.send(insert + bind("", "", (b"1",)) + execute("") + bind("", "", (b"2",)) +
             execute("") + query("SELECT 1"))
    assert [k for k, _ in raw.until(b"Z")][-2:] == [b"C", b"Z"]
    assert _rows(server, f"SELECT k FROM {name} ORDER BY k") == [(1,), (2,)]
    raw.send(insert + bind("", "", (b"3",)) + execute("") + query("SELECT 1 / 0"))
    assert [k for k, _ in raw.until(b"Z")][-2:] == [b"E", b"Z"]
    assert _rows(server, f"SELECT k FROM {name} ORDER BY k") == [(1,), (2,)]
    raw.close()
