"""Errors over pgwire carry PostgreSQL 15's SQLSTATE and primary message (and HINT where
PostgreSQL gives one with it): an error found while computing a query is the evaluation
error's message alone (`division by zero`, not the Python API's `reading query failed: ...`),
a DROP others depend on is `cannot drop table t because other objects depend on it` with
`Use DROP ... CASCADE to drop the dependent objects too.`, and names are quoted as
PostgreSQL quotes them (`relation "nope" does not exist`). Each statement runs in turn against
a real PostgreSQL (`servers` fixture) and the twofold server, over psycopg."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.sql.pgcompare import postgres_with, wire_with

from twofold.testing.pgwire import ServerHandle

SETUP = [
    "CREATE TABLE t (a integer, b text, f double precision)",
    "INSERT INTO t VALUES (0, 'x', -1)",
    "CREATE VIEW v AS SELECT a, b FROM t",
    "CREATE VIEW v2 AS SELECT a FROM v",
    "CREATE TABLE u (k integer NOT NULL, s text)",
    "CREATE MATERIALIZED VIEW mu AS SELECT k FROM u",
]

CASES = [
    # computing a query
    "SELECT 1/0", "SELECT 1/a FROM t", "SELECT a % 0 FROM t", "SELECT sqrt(f) FROM t",
    "SELECT ln(a::float8) FROM t", "SELECT (a + 1000)::smallint * 1000::smallint FROM t",
    "SELECT 2147483647 + 1 + a FROM t", "SELECT 1/a FROM v", "INSERT INTO u SELECT 1/a, b FROM t",
    "UPDATE t SET a = 1/a", "DELETE FROM t WHERE 1/a = 1",
    "CREATE MATERIALIZED VIEW mz AS SELECT 1/a FROM t", "SELECT * FROM mz",  # none created
    # drops others depend on
    "DROP TABLE t", "DROP VIEW v", "DROP TABLE u", "DROP TABLE t, u",
    # names
    "SELECT * FROM nope", "SELECT nope FROM t", "SELECT t.nope FROM t", "SELECT x.a FROM t",
    "DROP TABLE nope", "DROP VIEW nope", "DROP INDEX nope", "DROP MATERIALIZED VIEW nope",
    "CREATE TABLE t (a integer)", "CREATE VIEW v AS SELECT 1", "INSERT INTO nope VALUES (1)",
    "INSERT INTO t (nope) VALUES (1)", "UPDATE t SET nope = 1", "INSERT INTO u (s) VALUES ('a')",
    "SELECT * FROM t JOIN u USING (nope)", "DELETE FROM nope",
]


@pytest.fixture(scope="module")
def pg(servers: Any) -> Iterator[Any]:
    with postgres_with(servers, "msg", *SETUP) as con:
        yield con


@pytest.fixture(scope="module")
def tf(server: ServerHandle) -> Iterator[Any]:
    with wire_with(server.dsn(), *SETUP) as con:
        yield con


def _error(con: Any, sql: str) -> tuple[str | None, str | None, str | None] | None:
    import psycopg

    try:
        con.execute(sql)
    except psycopg.Error as e:
        return e.sqlstate, e.diag.message_primary, e.diag.message_hint
    return None


@pytest.mark.parametrize("sql", CASES)
def test_error_equals_postgres(pg: Any, tf: Any, sql: str) -> None:
    want = _error(pg, sql)
    assert want is not None, f"{sql}: PostgreSQL accepts it (the case is wrong)"
    got = _error(tf, sql)
    assert got is not None, f"{sql}: PostgreSQL fails with {want}, twofold accepts it"
    assert got[:2] == want[:2], f"{sql}: twofold {got}; PostgreSQL {want}"
    if want[2] is not None:
        assert got[2] == want[2], f"{sql}: hint {got[2]!r}; PostgreSQL {want[2]!r}"
