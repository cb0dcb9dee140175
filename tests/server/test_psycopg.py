"""psycopg 3 over the wire: parameters, prepared statements, binary cursors, COPY, SUBSCRIBE
streaming, DECLARE/FETCH, error classes, transactions."""

from __future__ import annotations

import math

import psycopg
import pytest
from psycopg import errors

from twofold.testing.pgwire import ServerHandle


def connect(server: ServerHandle, autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=autocommit, connect_timeout=10)


def test_ddl_dml_and_params(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint PRIMARY KEY, v double precision, s text, "
                  "b boolean)")
        cur = c.execute(f"INSERT INTO {name} VALUES (1, 2.5, 'a', true), (2, NULL, 'b', false)")
        assert cur.statusmessage == "INSERT 0 2"
        c.execute(f"INSERT INTO {name} VALUES (%s, %s, %s, %s)", [3, -0.5, "it's", None])
        rows = c.execute(f"SELECT k, v, s, b FROM {name} ORDER BY k").fetchall()
        assert rows == [(1, 2.5, "a", True), (2, None, "b", False), (3, -0.5, "it's", None)]
        assert c.execute(f"SELECT s FROM {name} WHERE k = %s", [3]).fetchall() == [("it's",)]
        assert c.execute(f"SELECT k FROM {name} WHERE s = %s", ["b"]).fetchall() == [(2,)]
        cur = c.execute(f"UPDATE {name} SET v = %s WHERE k = %s", [9.0, 2])
        assert cur.rowcount == 1
        cur = c.execute(f"DELETE FROM {name} WHERE k = %s", [1])
        assert cur.rowcount == 1
        assert c.execute(f"SELECT k, v FROM {name} ORDER BY k").fetchall() == [(2, 9.0),
                                                                             (3, -0.5)]


def test_column_types_and_oids(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v double precision, s text, b boolean, "
                  "y bytea)")
        c.execute(f"INSERT INTO {name} VALUES (%s, %s, %s, %s, %s)",
                  [7, float("inf"), "x", True, b"\x00\xff"])
        cur = c.execute(f"SELECT * FROM {name}")
        assert [d.type_code for d in cur.description or []] == [20, 701, 25, 16, 17]
        assert cur.fetchall() == [(7, math.inf, "x", True, b"\x00\xff")]
        with c.cursor(binary=True) as bc:
            assert bc.execute(f"SELECT * FROM {name}").fetchall() == [
                (7, math.inf, "x", True, b"\x00\xff")]


def test_prepared_statement_reused(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v text)")
        c.execute(f"INSERT INTO {name} VALUES (1, 'one'), (2, 'two')")
        c.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        for k, v in [(1, "one"), (2, "two"), (1, "one"), (3, None)]:
            got = c.execute(f"SELECT v FROM {name} WHERE k = %s", [k], prepare=True).fetchall()
            assert got == ([(v,)] if v else [])


def test_errors_have_sqlstate_classes(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint PRIMARY KEY)")
        with pytest.raises(errors.UndefinedColumn):
            c.execute(f"SELECT nope FROM {name}")
        with pytest.raises(errors.UndefinedTable):
            c.execute("SELECT * FROM no_such_table")
        with pytest.raises(errors.SyntaxError):
            c.execute("SELEC 1")
        c.execute(f"INSERT INTO {name} VALUES (1)")
        with pytest.raises(errors.UniqueViolation):
            c.execute(f"INSERT INTO {name} VALUES (1)")
        with pytest.raises(errors.DivisionByZero):
            c.execute("SELECT 1 / 0")
        # the session still works after errors
        assert c.execute(f"SELECT count(*) FROM {name}").fetchone() == (1,)


def test_transaction_block_fails_until_rollback(server: ServerHandle, name: str) -> None:
    with connect(server, autocommit=False) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        c.commit()
        with pytest.raises(errors.UndefinedColumn):
            c.execute(f"SELECT nope FROM {name}")
        with pytest.raises(errors.InFailedSqlTransaction):
            c.execute(f"SELECT k FROM {name}")
        c.rollback()
        assert c.execute(f"SELECT count(*) FROM {name}").fetchone() == (0,)
        status = psycopg.pq.TransactionStatus
        assert c.info.transaction_status == status.INTRANS
        c.commit()
        assert c.info.transaction_status in (status.IDLE,)


def test_copy_in_text_and_csv_and_out(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v double precision, s text)")
        with c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
            cp.write_row((1, 1.5, "tab\there"))
            cp.write_row((2, None, "x"))
        with c.cursor().copy(f"COPY {name} (k, v, s) FROM STDIN WITH (FORMAT csv)") as cp:
            cp.write('3,2.5,"a,b"\n4,,c\n')
        rows = c.execute(f"SELECT k, v, s FROM {name} ORDER BY k").fetchall()
        assert rows == [(1, 1.5, "tab\there"), (2, None, "x"), (3, 2.5, "a,b"), (4, None, "c")]
        with c.cursor().copy(f"COPY (SELECT k, s FROM {name} ORDER BY k) TO STDOUT") as cp:
            out = list(cp.rows())
        assert out == [("1", "tab\there"), ("2", "x"), ("3", "a,b"), ("4", "c")]
        with pytest.raises(errors.InvalidTextRepresentation), \
                c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
            cp.write("notanumber\t1\tx\n")
        assert c.execute(f"SELECT count(*) FROM {name}").fetchone() == (4,)


def test_subscribe_streams_and_cursor_fetch(server: ServerHandle, name: str) -> None:
    with connect(server) as c, connect(server) as writer:
        c.execute(f"CREATE TABLE {name} (k bigint, v text)")
        c.execute(f"INSERT INTO {name} VALUES (1, 'a')")
        c.execute(f"DECLARE cur CURSOR FOR SUBSCRIBE {name}")
        first = c.execute("FETCH 10 cur WITH (timeout = '2s')").fetchall()
        assert [r[1:] for r in first] == [(1, 1, "a")]
        writer.execute(f"INSERT INTO {name} VALUES (2, 'b')")
        got: list[tuple[object, ...]] = []
        for _ in range(20):
            got += c.execute("FETCH 10 cur WITH (timeout = '1s')").fetchall()
            if got:
                break
        assert [r[1:] for r in got] == [(1, 2, "b")]
        assert got[0][0] >= first[0][0]
        c.execute("CLOSE cur")
        with c.cursor() as cur:
            seen = []
            for row in cur.stream(f"SUBSCRIBE {name}"):
                seen.append(row[1:])
                if len(seen) == 2:
                    break
            assert sorted(seen) == [(1, 1, "a"), (1, 2, "b")]
        # the connection is usable after leaving a stream
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_session_shims(server: ServerHandle) -> None:
    with connect(server) as c:
        version = c.execute("select pg_catalog.version()").fetchone()
        assert version is not None and version[0].startswith("PostgreSQL 15")
        assert c.execute("select current_schema()").fetchone() == ("public",)
        assert c.execute("select current_database(), current_user").fetchone() == (
            "twofold", "twofold")
        assert c.execute("show transaction isolation level").fetchone() == ("serializable",)
        c.execute("SET application_name = 'mine'")
        assert c.execute("SHOW application_name").fetchone() == ("mine",)
        assert c.info.parameter_status("application_name") == "mine"
        c.execute("SET extra_float_digits = 3")
        assert c.execute("SHOW extra_float_digits").fetchone() == ("3",)
        with pytest.raises(errors.UndefinedObject):
            c.execute("SHOW no_such_variable")


def test_catalog_relations(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint NOT NULL, v text)")
        c.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        tables = c.execute("SELECT table_name, table_type FROM information_schema.tables "
                           "WHERE table_name = %s", [name]).fetchall()
        assert tables == [(name, "BASE TABLE")]
        cols = c.execute("SELECT column_name, data_type, is_nullable FROM "
                         "information_schema.columns WHERE table_name = %s "
                         "ORDER BY ordinal_position", [name]).fetchall()
        assert cols == [("k", "bigint", "NO"), ("v", "text", "YES")]
        assert c.execute("SELECT type FROM twofold_objects WHERE name = %s",
                         [name]).fetchall() == [("table",)]
        assert c.execute("SELECT \"on\", key FROM twofold_indexes WHERE name = %s",
                         [f"{name}_k"]).fetchall() == [(name, "k")]
        rel = c.execute("SELECT c.relkind FROM pg_catalog.pg_class c JOIN "
                        "pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE n.nspname = 'public' AND c.relname = %s", [name]).fetchall()
        assert rel == [("r",)]
        # a dropped index leaves the catalog relations (the snapshot is rebuilt)
        c.execute(f"DROP INDEX {name}_k")
        assert c.execute("SELECT count(*) FROM twofold_indexes WHERE name = %s",
                         [f"{name}_k"]).fetchone() == (0,)
