"""`varchar(n)` and `char(n)` result columns on the wire as PostgreSQL 15 sends them: the
RowDescription's type modifier n + 4 (psycopg's `display_size` n), and `char(n)` values
blank-padded to n characters, in text and binary results and in COPY TO — through plain
references, subqueries, views, materialized views, COALESCE of one length and min/max — and
pg_catalog types a view's columns as declared (`character(3)`, `numeric`). Each
read runs against a real PostgreSQL (`servers` fixture) and the twofold server, over psycopg.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tests.sql.pgcompare import postgres_with, wire_with

from twofold.testing.pgwire import ServerHandle

SETUP = [
    "CREATE TABLE c (i integer, v varchar(5), c char(3), t text, one char)",
    "INSERT INTO c VALUES (1, 'ab', 'a', 'x', 'q'), (2, 'abcde', 'abc', 'y', NULL), "
    "(3, NULL, NULL, NULL, 'z'), (4, '', '', '', ' ')",
    "CREATE VIEW cv AS SELECT i, v, c FROM c",
    "CREATE MATERIALIZED VIEW cm AS SELECT i, c, v FROM c",
    "CREATE MATERIALIZED VIEW cn AS SELECT 2.5 AS x, i + 1 AS j, c, v, t FROM c",
]

READS = [
    "SELECT v, c, t, one FROM c ORDER BY i",
    "SELECT * FROM (SELECT c AS d, v AS w FROM c) s ORDER BY d",
    "SELECT c, v FROM cv ORDER BY i", "SELECT c, v FROM cm ORDER BY i",
    "SELECT c FROM c WHERE c = 'a'", "SELECT c FROM c WHERE i = 1",
    "SELECT coalesce(c, c) AS cc, coalesce(v, v) AS vv FROM c ORDER BY i",
    "SELECT c || '|' AS j, length(c) AS n, c::text AS ct, v::varchar(2) AS v2, "
    "'ab'::char(4) AS lit FROM c ORDER BY i",
    "SELECT c FROM c UNION SELECT c FROM c ORDER BY 1",
]


@pytest.fixture(scope="module")
def pg(servers: Any) -> Iterator[Any]:
    with postgres_with(servers, "chw", *SETUP) as con:
        yield con


@pytest.fixture(scope="module")
def tf(server: ServerHandle) -> Iterator[Any]:
    with wire_with(server.dsn(), *SETUP) as con:
        yield con


def _read(con: Any, sql: str, binary: bool) -> tuple[list[tuple[Any, ...]], list[Any]]:
    cur = con.cursor(binary=binary)
    cur.execute(sql)
    description = [(d.name, d.type_code, d.display_size) for d in cur.description]
    return description, cur.fetchall()


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize("sql", READS)
def test_lengths_and_padding_as_postgres(pg: Any, tf: Any, sql: str, binary: bool) -> None:
    assert _read(tf, sql, binary) == _read(pg, sql, binary), sql


def _copy(con: Any, sql: str) -> bytes:
    with con.cursor().copy(f"COPY ({sql}) TO STDOUT") as copy:
        return b"".join(bytes(data) for data in copy)


def test_copy_to_pads_char_columns(pg: Any, tf: Any) -> None:
    sql = "SELECT c, v, one FROM c ORDER BY i"
    assert _copy(tf, sql) == _copy(pg, sql)


@pytest.mark.parametrize("name", ["cv", "cm", "cn"])
def test_catalog_types_of_views_as_postgres(pg: Any, tf: Any, name: str) -> None:
    """pg_attribute (what psql's `\\d` reads) types a view's and a materialized view's
    columns as PostgreSQL does: `character(3)`, `character varying(5)`, `numeric`,
    `integer`."""
    sql = ("SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
           f"JOIN pg_class r ON a.attrelid = r.oid WHERE r.relname = '{name}' AND a.attnum > 0 "
           "ORDER BY a.attnum")
    assert tf.execute(sql).fetchall() == pg.execute(sql).fetchall()
