"""A table's `varchar(n)`/`char(n)` columns show their declared length in the catalog, as in
PostgreSQL 15: `information_schema.columns.character_maximum_length` is `n`,
`pg_attribute.atttypmod` is `n + 4` (-1 for other types) and `format_type(atttypid,
atttypmod)` — what psql's `\\d` shows — is `character varying(n)` / `character(n)`. Compared
with a real PostgreSQL (`servers` fixture) over psycopg."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.sql.pgcompare import fresh_database

from twofold.testing.pgwire import ServerHandle

TABLE = ("CREATE TABLE dl (id bigint, v varchar(10), c char(3), w varchar, h text, "
         "i integer, one char, cv character varying(1), big varchar(10485760))")
QUERIES = [
    "SELECT column_name, data_type, character_maximum_length FROM information_schema.columns "
    "WHERE table_name = 'dl' ORDER BY ordinal_position",
    "SELECT a.attname, a.atttypmod, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
    "JOIN pg_class c ON c.oid = a.attrelid WHERE c.relname = 'dl' AND a.attnum > 0 "
    "ORDER BY a.attnum",
]


@pytest.fixture(scope="module")
def pg(servers: Any) -> Iterator[Any]:
    with fresh_database(servers, "dl") as con:
        con.execute(TABLE)
        yield con


@pytest.fixture(scope="module")
def tf(server: ServerHandle) -> Iterator[Any]:
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as con:
        con.execute(TABLE)
        yield con


@pytest.mark.parametrize("sql", QUERIES)
def test_catalog_shows_declared_lengths(pg: Any, tf: Any, sql: str) -> None:
    want = [tuple(r) for r in pg.execute(sql).fetchall()]
    assert [tuple(r) for r in tf.execute(sql).fetchall()] == want


def test_psql_describe_shows_lengths(server: ServerHandle, tf: Any) -> None:
    """psql's `\\d dl` lists `character varying(10)` and `character(3)`."""
    from tests.server.test_psql import psql

    out = psql(server, "\\d dl").stdout
    for line in ("v      | character varying(10)", "c      | character(3)",
                 "w      | character varying ", "one    | character(1)"):
        assert line in out, out
