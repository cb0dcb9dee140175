"""Describe of a statement names the columns its execution then sends: a driver that decodes
with what it was told (asyncpg: "the number of columns in the result row (1) is different
from what was described (0)") fails otherwise. Statements answered with rows that are not
queries: EXPLAIN, SHOW."""

from __future__ import annotations

import asyncio

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
