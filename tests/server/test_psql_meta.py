"""psql's other backslash commands over the wire: `\\df` (no user functions: an empty list, as
a fresh PostgreSQL database gives), `\\du`/`\\dg`, `\\dn`, `\\l`, `\\dx`, `\\db`, `\\des`, `\\dy`,
`\\df+` answer; one twofold does not serve fails with a clear 0A000 naming the query, never a
traceback. `pg_backend_pid()` is int4 (text and binary, psycopg and asyncpg), and equals the
BackendKeyData pid the client was given."""

from __future__ import annotations

import asyncio

import psycopg
from tests.server.test_psql import psql

from twofold.testing.pgwire import ServerHandle


def test_function_role_schema_database_lists(server: ServerHandle) -> None:
    out = psql(server, "\\df").stdout
    assert "List of functions" in out and "(0 rows)" in out
    assert "Argument data types" in out
    assert "Source code" in psql(server, "\\df+").stdout
    for command in ("\\du", "\\dg"):
        roles = psql(server, command).stdout
        assert "List of roles" in roles and "twofold" in roles and "Superuser" in roles
    assert "public" in psql(server, "\\dn").stdout
    assert "twofold" in psql(server, "\\l").stdout and "UTF8" in psql(server, "\\l").stdout
    assert "List of installed extensions" in psql(server, "\\dx").stdout
    assert "pg_default" in psql(server, "\\db").stdout
    assert "(0 rows)" in psql(server, "\\des").stdout
    assert "(0 rows)" in psql(server, "\\dy").stdout


def test_an_unserved_backslash_command_fails_clearly(server: ServerHandle) -> None:
    done = psql(server, "\\dC", check=False)  # casts: pg_cast is not served
    assert done.returncode != 0
    assert "this catalog query is not supported" in done.stderr
    assert "Traceback" not in done.stderr
    assert "1" in psql(server, "SELECT 1 AS one").stdout  # the server keeps serving


def test_pg_backend_pid_is_int4(server: ServerHandle) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        cur = c.execute("SELECT pg_backend_pid()")
        assert cur.description is not None and cur.description[0].type_code == 23
        assert cur.fetchone() == (c.info.backend_pid,)
        binary = c.cursor(binary=True).execute("SELECT pg_backend_pid() AS p, current_user")
        assert binary.fetchone() == (c.info.backend_pid, "twofold")

    async def via_asyncpg() -> None:
        async with server.asyncpg() as conn:
            stmt = await conn.prepare("SELECT pg_backend_pid()")
            assert [a.type.name for a in stmt.get_attributes()] == ["int4"]
            assert await stmt.fetchval() == conn.get_server_pid()

    asyncio.run(via_asyncpg())
