"""COPY as drivers send it: asyncpg's `copy_to_table` / `copy_records_to_table` pipeline their
CopyData behind the COPY statement without waiting for CopyInResponse, and name the table
schema-qualified (`"public"."t"`) when given a schema. PostgreSQL reads and drops the CopyData
of a COPY that failed (its connection goes on) and says `relation "t" does not exist`."""

from __future__ import annotations

import asyncio
import io

import asyncpg
import psycopg
import pytest
from tests.server.wire import Raw, msg, query

from twofold.testing.pgwire import ServerHandle


def test_copy_to_a_missing_table_keeps_the_connection(server: ServerHandle) -> None:
    async def main() -> None:
        async with server.asyncpg() as conn:
            with pytest.raises(asyncpg.UndefinedTableError,
                               match='relation "nope" does not exist'):
                await conn.copy_to_table("nope", source=io.BytesIO(b"1\n"))
            assert await conn.fetchval("SELECT 7") == 7

    asyncio.run(main())


def test_copy_data_after_a_failed_copy_is_dropped(server: ServerHandle) -> None:
    raw = Raw(server.host, server.port)
    try:
        raw.login()
        raw.send(query("COPY nope FROM STDIN") + msg(b"d", b"1\n") + msg(b"c") +
                 msg(b"f", b"gave up\0") + query("SELECT 7"))
        got = raw.until(b"Z")
        assert [k for k, _ in got] == [b"E", b"Z"] and b"42P01" in got[0][1]
        assert [k for k, _ in raw.until(b"Z")] == [b"T", b"D", b"C", b"Z"]
    finally:
        raw.close()


def test_copy_records_to_a_schema_qualified_table(server: ServerHandle, name: str) -> None:
    async def main() -> None:
        async with server.asyncpg() as conn:
            await conn.execute(f"CREATE TABLE {name} (k bigint, s text)")
            assert await conn.copy_records_to_table(
                name, records=[(1, "a"), (2, None)], schema_name="public") == "COPY 2"
            assert await conn.copy_to_table(name, source=io.BytesIO(b"3\tc\n"),
                                            schema_name="public") == "COPY 1"
            got = await conn.fetch(f"SELECT k, s FROM {name} ORDER BY k")
            assert [tuple(r) for r in got] == [(1, "a"), (2, None), (3, "c")]
            with pytest.raises(asyncpg.InvalidSchemaNameError):
                await conn.copy_to_table(name, source=io.BytesIO(b"4\td\n"),
                                         schema_name="elsewhere")

    asyncio.run(main())
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        with c.cursor().copy(f'COPY public."{name}" (k) FROM STDIN') as copy:
            copy.write_row((5,))
        with c.cursor().copy(f"COPY public.{name} TO STDOUT") as copy:
            out = b"".join(bytes(b) for b in copy)
        assert out.splitlines()[-1] == b"5\t\\N"
