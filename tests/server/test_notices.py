"""The NOTICEs PostgreSQL sends for what `IF [NOT] EXISTS` skips (psql prints them, migration
tools log them), compared with PostgreSQL 15's: severity, SQLSTATE and message."""

from __future__ import annotations

import psycopg

from twofold.testing.pgwire import ServerHandle

_SETUP = ["CREATE TABLE nt_t (k bigint)", "CREATE INDEX nt_i ON nt_t (k)",
          "CREATE MATERIALIZED VIEW nt_m AS SELECT k FROM nt_t"]
_STATEMENTS = [
    "DROP TABLE IF EXISTS nt_nope",
    "DROP TABLE IF EXISTS nt_nope, \"NT_Other\"",
    "DROP VIEW IF EXISTS nt_nope",
    "DROP MATERIALIZED VIEW IF EXISTS nt_nope",
    "DROP INDEX IF EXISTS nt_nope",
    "CREATE TABLE IF NOT EXISTS nt_t (k bigint)",
    "CREATE TABLE IF NOT EXISTS NT_T (k bigint)",
    "CREATE INDEX IF NOT EXISTS nt_i ON nt_t (k)",
    "CREATE MATERIALIZED VIEW IF NOT EXISTS nt_m AS SELECT k FROM nt_t",
    "CREATE TABLE IF NOT EXISTS nt_new (k bigint)",
    "DROP TABLE IF EXISTS nt_new",
]


def _notices(con: psycopg.Connection[tuple[object, ...]]) -> list[list[tuple[str, str, str]]]:
    out: list[list[tuple[str, str, str]]] = []
    got: list[tuple[str, str, str]] = []
    con.add_notice_handler(lambda d: got.append(
        (d.severity or "", d.sqlstate or "", d.message_primary or "")))
    for sql in _STATEMENTS:
        con.execute(sql)
        out.append(list(got))
        got.clear()
    return out


def test_skipped_notices_as_postgres(server: ServerHandle, postgres: tuple[str, int]) -> None:
    host, port = postgres
    with psycopg.connect(host=host, port=port, user="postgres", dbname="postgres",
                         autocommit=True) as pg:
        pg.execute("DROP MATERIALIZED VIEW IF EXISTS nt_m")
        pg.execute("DROP TABLE IF EXISTS nt_t, nt_new")
        for s in _SETUP:
            pg.execute(s)
        want = _notices(pg)
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as tf:
        for s in _SETUP:
            tf.execute(s)
        assert _notices(tf) == want
    assert want[0] == [("NOTICE", "00000", 'table "nt_nope" does not exist, skipping')]
