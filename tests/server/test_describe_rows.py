"""Describe of a statement names the columns its execution then sends: a driver that decodes
with what it was told (asyncpg: "the number of columns in the result row (1) is different
from what was described (0)") fails otherwise. Statements answered with rows that are not
queries: EXPLAIN, SHOW."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from twofold.testing.pgwire import ServerHandle


def test_asyncpg_explain_and_show(server: ServerHandle, name: str) -> None:
    async def main() -> None:
        async with server.asyncpg() as conn:
            await conn.execute(f"CREATE TABLE {name} (k bigint, v text)")
            stmt = await conn.prepare(f"EXPLAIN SELECT v FROM {name} WHERE k = 1")
            assert len(stmt.get_attributes()) == 1
            rows = await stmt.fetch()
            assert rows and all(isinstance(r[0], str) for r in rows)
            assert (await conn.fetch(f"EXPLAIN SELECT * FROM {name}"))[0][0]
            assert await conn.fetchval("SHOW TimeZone") == "UTC"

    asyncio.run(main())


def test_a_write_to_a_missing_table_fails_at_describe(server: ServerHandle) -> None:
    """As PostgreSQL at Parse: 42P01 before any parameter is sent (asyncpg's executemany
    otherwise failed in the client, "expected str, got int", with text-typed parameters)."""
    async def main() -> None:
        async with server.asyncpg() as conn:
            for sql in ("INSERT INTO nope VALUES ($1)", "INSERT INTO nope (k) VALUES ($1)",
                        "UPDATE nope SET k = $1", "DELETE FROM nope WHERE k = $1"):
                with pytest.raises(asyncpg.UndefinedTableError,
                                   match='relation "nope" does not exist'):
                    await conn.executemany(sql, [(1,)])
            assert await conn.fetchval("SELECT 3") == 3

    asyncio.run(main())
