"""asyncpg reading catalog relations whose columns are arrays: it introspects every array type
but oid[] and text[] with a query whose own columns must then be of types it knows (its
`attrtypoids` is `array_agg(atttypid)`, oid[] in PostgreSQL) - as int8[] that introspection
introspected itself until RecursionError - and which reads pg_range.rngmultitypid."""

from __future__ import annotations

import asyncio

import psycopg

from twofold.testing.pgwire import ServerHandle


def test_asyncpg_reads_catalog_arrays(server: ServerHandle, name: str) -> None:
    async def main() -> None:
        async with server.asyncpg() as conn:
            await conn.execute(f"CREATE TABLE {name} (k bigint PRIMARY KEY, v text, i integer)")
            await conn.execute(f"CREATE INDEX {name}_v ON {name} (v)")
            rows = await conn.fetch(
                "SELECT i.indkey, i.indisprimary FROM pg_index i JOIN pg_class c "
                "ON c.oid = i.indrelid WHERE c.relname = $1 ORDER BY i.indisprimary", name)
            assert [(list(r[0]), r[1]) for r in rows] == [([2], False), ([1], True)]
            types = await conn.fetchval(
                "SELECT array_agg(a.atttypid ORDER BY a.attnum) FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid WHERE c.relname = $1 AND a.attnum > 0",
                name)
            assert list(types) == [20, 25, 23]
            assert await conn.fetchval(
                "SELECT atttypid FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "WHERE c.relname = $1 AND a.attname = 'i'", name) == 23

    asyncio.run(main())


def test_oid_columns_as_postgres_types(server: ServerHandle, name: str) -> None:
    """atttypid is an oid (26), an array of them oid[] (1028), in text and binary."""
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, s text)")
        q = ("SELECT a.atttypid, array_agg(a.atttypid) OVER () FROM pg_attribute a JOIN "
             "pg_class c ON c.oid = a.attrelid WHERE c.relname = %s ORDER BY a.attnum")
        for binary in (False, True):
            cur = c.cursor(binary=binary)
            rows = cur.execute(q, [name]).fetchall()
            assert [d.type_code for d in cur.description or []] == [26, 1028]
            assert [r[0] for r in rows] == [20, 25] and sorted(rows[0][1]) == [20, 25]


def test_char_columns_as_postgres(server: ServerHandle, name: str) -> None:
    """pg_class.relkind and the other "char" columns are PostgreSQL's "char" (OID 18): asyncpg
    reads them as bytes, as against PostgreSQL (b'r'); psycopg as text."""
    async def main() -> None:
        async with server.asyncpg() as conn:
            await conn.execute(f"CREATE TABLE {name} (k bigint)")
            row = await conn.fetchrow(
                "SELECT c.relkind, c.relpersistence, a.attidentity, a.attname FROM pg_class c "
                "JOIN pg_attribute a ON a.attrelid = c.oid WHERE c.relname = $1", name)
            assert tuple(row) == (b"r", b"p", b"", "k")

    asyncio.run(main())
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        for binary in (False, True):
            cur = c.cursor(binary=binary)
            assert cur.execute("SELECT relkind FROM pg_class WHERE relname = %s",
                               [name]).fetchall() == [("r",)]
            assert [d.type_code for d in cur.description or []] == [18]
