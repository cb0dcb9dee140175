"""asyncpg, pg8000 and SQLAlchemy 2 Core over the wire."""

from __future__ import annotations

import asyncio

import asyncpg
import pg8000.native
import pytest
import sqlalchemy as sa

from twofold.testing.pgwire import ServerHandle


def test_asyncpg_named_prepared_statements_and_types(server: ServerHandle, name: str) -> None:
    async def main() -> None:
        async with server.asyncpg() as conn:
            await conn.execute(f"CREATE TABLE {name} (k bigint, v double precision, s text, "
                               "b boolean, y bytea)")
            await conn.executemany(f"INSERT INTO {name} VALUES ($1, $2, $3, $4, $5)",
                                   [(1, 1.5, "a", True, b"\x01"), (2, None, "b", False, None)])
            stmt = await conn.prepare(f"SELECT k, v, s, b, y FROM {name} WHERE k = $1")
            assert [p.name for p in stmt.get_parameters()] == ["int8"]
            assert [a.type.name for a in stmt.get_attributes()] == [
                "int8", "float8", "text", "bool", "bytea"]
            row = await stmt.fetchrow(1)
            assert tuple(row) == (1, 1.5, "a", True, b"\x01")
            assert tuple(await stmt.fetchrow(2)) == (2, None, "b", False, None)
            assert await stmt.fetchrow(3) is None
            got = await conn.fetch(f"SELECT k FROM {name} WHERE s = $1 ORDER BY k", "b")
            assert [r["k"] for r in got] == [2]
            assert await conn.fetchval(f"SELECT count(*) FROM {name}") == 2
            with pytest.raises(asyncpg.UndefinedColumnError):
                await conn.fetch(f"SELECT nope FROM {name}")
            async with conn.transaction():
                assert await conn.fetchval(f"SELECT max(k) FROM {name}") == 2

    asyncio.run(main())


def test_pg8000(server: ServerHandle, name: str) -> None:
    conn = pg8000.native.Connection("twofold", host=server.host, port=server.port,
                                    database="twofold", timeout=10)
    try:
        conn.run(f"CREATE TABLE {name} (k bigint, v text)")
        conn.run(f"INSERT INTO {name} VALUES (:k, :v)", k=1, v="one")
        conn.run(f"INSERT INTO {name} VALUES (:k, :v)", k=2, v="two")
        assert conn.run(f"SELECT v FROM {name} WHERE k = :k", k=2) == [["two"]]
        assert conn.run(f"SELECT k, v FROM {name} ORDER BY k") == [[1, "one"], [2, "two"]]
        assert [c["name"] for c in conn.columns or []] == ["k", "v"]
        with pytest.raises(pg8000.native.DatabaseError) as info:
            conn.run("SELECT * FROM missing_table")
        assert info.value.args[0]["C"] == "42P01"
    finally:
        conn.close()


def test_sqlalchemy_core_and_inspect(server: ServerHandle, name: str) -> None:
    engine = sa.create_engine(
        f"postgresql+psycopg://twofold@{server.host}:{server.port}/twofold")
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE {name} (k bigint NOT NULL, v double precision, "
                                 "s text)"))
            conn.execute(sa.text(f"INSERT INTO {name} VALUES (:k, :v, :s)"),
                         [{"k": 1, "v": 0.5, "s": "x"}, {"k": 2, "v": None, "s": "y"}])
        with engine.connect() as conn:
            rows = conn.execute(sa.text(f"SELECT k, s FROM {name} WHERE k > :k ORDER BY k"),
                                {"k": 0}).all()
            assert [tuple(r) for r in rows] == [(1, "x"), (2, "y")]
        insp = sa.inspect(engine)
        assert name in insp.get_table_names()
        cols = insp.get_columns(name)
        assert [c["name"] for c in cols] == ["k", "v", "s"]
        assert [type(c["type"]).__name__ for c in cols] == ["BIGINT", "DOUBLE_PRECISION", "TEXT"]
        assert [c["nullable"] for c in cols] == [False, True, True]
    finally:
        engine.dispose()


def test_asyncpg_type_introspection(server: ServerHandle) -> None:
    """`set_type_codec` makes asyncpg introspect the type in pg_type (through the catalog)."""

    async def main() -> None:
        async with server.asyncpg() as conn:
            await conn.set_type_codec("int8", encoder=str, decoder=lambda x: ("int8", x),
                                      schema="pg_catalog", format="text")
            # `5` alone is int4, as in PostgreSQL (fc97e1e): the cast makes it the int8 codec's
            assert await conn.fetchval("SELECT 5::bigint") == ("int8", "5")
            assert await conn.fetchval("SELECT 5") == 5

    asyncio.run(main())


def test_sqlalchemy_get_columns_declared_types(server: ServerHandle, name: str) -> None:
    """inspect().get_columns reports each column as declared, as against PostgreSQL."""
    engine = sa.create_engine(
        f"postgresql+psycopg://twofold@{server.host}:{server.port}/twofold")
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE {name} (a smallint, b integer, c bigint, "
                                 "d real, e double precision, f varchar(5), h text)"))
        cols = sa.inspect(engine).get_columns(name)
        assert [type(c["type"]).__name__ for c in cols] == [
            "SMALLINT", "INTEGER", "BIGINT", "REAL", "DOUBLE_PRECISION", "VARCHAR", "TEXT"]
    finally:
        engine.dispose()
