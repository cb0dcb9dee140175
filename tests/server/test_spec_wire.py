"""Acceptance checks of `spec/pgwire.md` and the issue against the public surface, as a new
user's client sends them: parameters written without spaces (`VALUES (%s,%s)` is `$1,$2`),
parameter types inferred through casts and arithmetic (asyncpg encodes by them), COPY of a
column list out, COPY errors naming the field, SETs the server cannot honour refused, and
the start line's psql command working as printed, SQLAlchemy's reflection and psql's `\\d`
of an index."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import errors

from twofold.testing.pgcluster import free_port
from twofold.testing.pgwire import ServerHandle


def connect(server: ServerHandle) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10)


def test_parameters_without_spaces(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, s text)")
        c.execute(f"INSERT INTO {name} VALUES (%s,%s)", (1, "a,$2"))
        c.cursor().executemany(f"INSERT INTO {name} (k,s) VALUES (%s,%s)", [(2, "b"), (3, "c")])
        got = c.execute(f"SELECT k,s FROM {name} WHERE k IN (%s,%s) ORDER BY k", (1, 3))
        assert got.fetchall() == [(1, "a,$2"), (3, "c")]


def test_parameter_types_through_casts_and_arithmetic(server: ServerHandle, name: str) -> None:
    async def main() -> list[object]:
        async with server.asyncpg() as conn:
            await conn.execute(f"CREATE TABLE {name} (k bigint, f double precision)")
            await conn.execute(f"INSERT INTO {name} VALUES (1, 1.5), (2, NULL), (3, 0.5)")
            stmt = await conn.prepare("SELECT $1::bigint, $2::double precision, $3::boolean, "
                                      "$4::int4, $5::text")
            assert [p.name for p in stmt.get_parameters()] == [
                "int8", "float8", "bool", "int4", "text"]
            return [
                tuple(await stmt.fetchrow(1, 2.5, True, 4, "x")),
                await conn.fetchval("SELECT $1::bigint + $2", 1, 2),
                await conn.fetchval(f"SELECT k FROM {name} WHERE k = $1 + 1", 1),
                await conn.fetchval(f"SELECT k FROM {name} WHERE k > $1 * 2 ORDER BY k", 1),
                await conn.fetchval(f"SELECT coalesce(f, $1) FROM {name} WHERE k = 2", 7.5),
                await conn.fetchval("SELECT -$1::bigint", 5),
            ]

    assert asyncio.run(main()) == [(1, 2.5, True, 4, "x"), 3, 2, 3, 7.5, -5]


def test_copy_out_a_column_list(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, s text, f double precision)")
        c.execute(f"INSERT INTO {name} VALUES (1, 'a', 1.5), (2, NULL, 2.5)")
        out = b""
        with c.cursor().copy(f"COPY {name} (f, k) TO STDOUT") as cp:
            for data in cp:
                out += bytes(data)
        assert sorted(out.decode().splitlines()) == ["1.5\t1", "2.5\t2"]
        with pytest.raises(errors.UndefinedColumn), \
                c.cursor().copy(f"COPY {name} (nope) TO STDOUT") as cp:
            for _ in cp:
                pass


def test_copy_error_names_the_line_column_and_type(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, s text)")
        with pytest.raises(errors.InvalidTextRepresentation) as e, \
                c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
            cp.write("1\ta\nx\tb\n")
        assert "line 2, column 1" in str(e.value) and "bigint" in str(e.value)
        assert c.execute(f"SELECT count(*) FROM {name}").fetchone() == (0,)


def test_sets_the_server_cannot_honour_are_refused(server: ServerHandle) -> None:
    with connect(server) as c:
        c.execute("SET client_encoding TO 'utf-8'")
        c.execute("SET NAMES 'UTF8'")
        assert c.execute("SHOW client_encoding").fetchone() == ("UTF8",)
        with pytest.raises(errors.InvalidParameterValue):
            c.execute("SET client_encoding = 'LATIN1'")
        with pytest.raises(errors.InvalidParameterValue):
            c.execute("SET standard_conforming_strings = off")
        with pytest.raises(errors.CantChangeRuntimeParam):
            c.execute("SET server_version = '9.0'")
        assert c.execute("SHOW client_encoding").fetchone() == ("UTF8",)
        assert c.execute("SHOW server_version").fetchone() == ("15.0",)
        c.execute("SET standard_conforming_strings = on")
        c.execute("SET extra_float_digits = 3")
        assert c.execute("SHOW extra_float_digits").fetchone() == ("3",)
        every = {r[0]: r[1] for r in c.execute("SHOW ALL").fetchall()}  # simple and extended
        assert every["extra_float_digits"] == "3" and every["server_version"] == "15.0"
        assert every["client_encoding"] == "UTF8"
        assert c.execute("SHOW ALL", prepare=True).fetchall() == c.execute("SHOW ALL").fetchall()


def test_connect_line_under_a_password_file_works_as_printed(tmp_path: Path) -> None:
    """The start line is a command a new user can run: under `--password-file` it names a
    user of the file (not `twofold`, who cannot log in there), and psql gets in with it."""
    passwords = tmp_path / "passwords"
    passwords.write_text("alice:s3cret\n")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "twofold.cli", "serve", "--listen",
                             f"127.0.0.1:{port}", "--storage", "memory://", "--password-file",
                             str(passwords)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "(auth scram-sha-256)" in line, line
        command = line.split("connect with: ", 1)[1].split()
        assert command == ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "alice", "twofold"]
        done = subprocess.run([*command, "-X", "-At", "-c", "SELECT current_user"],
                              capture_output=True, text=True, timeout=30,
                              env={**os.environ, "PGPASSWORD": "s3cret"})
        assert (done.returncode, done.stdout.strip()) == (0, "alice"), done.stderr
        # SIGTERM ends a streaming SUBSCRIBE with PostgreSQL's shutdown error, not a hang-up
        sub = subprocess.Popen([*command, "-X", "-c", "CREATE TABLE z (k bigint)", "-c",
                                "SUBSCRIBE z"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PGPASSWORD": "s3cret"})
        assert sub.stdout is not None
        sub.stdout.readline()  # CREATE TABLE: the SUBSCRIBE follows
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        _, err = sub.communicate(timeout=30)
        assert "terminating connection due to administrator command" in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("driver", ["psycopg", "pg8000"])
def test_sqlalchemy_reflection(server: ServerHandle, name: str, driver: str) -> None:
    """`Table(..., autoload_with=)`, `MetaData.reflect()` and every inspector method a model
    generator calls: primary keys, indexes (their key columns, in order), views. pg8000
    describes each catalog statement before running it (with its parameters as NULL) and
    reads `pg_index.indoption` as an int2vector."""
    engine = sa.create_engine(
        f"postgresql+{driver}://twofold@{server.host}:{server.port}/twofold")
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE TABLE {name} (k bigint PRIMARY KEY, v text, "
                                 "f double precision)"))
            conn.execute(sa.text(f"CREATE INDEX {name}_vk ON {name} (v, k)"))
            conn.execute(sa.text(f"CREATE VIEW {name}_v AS SELECT k FROM {name}"))
            conn.execute(sa.text(f"CREATE MATERIALIZED VIEW {name}_m AS SELECT count(*) AS n "
                                 f"FROM {name}"))
        insp = sa.inspect(engine)
        assert insp.get_pk_constraint(name)["constrained_columns"] == ["k"]
        assert [(i["name"], i["column_names"], i["unique"]) for i in insp.get_indexes(name)] \
            == [(f"{name}_vk", ["v", "k"], False)]
        assert insp.has_index(name, f"{name}_vk")
        assert f"{name}_v" in insp.get_view_names()
        # the query, as pg_get_viewdef gives it, not the CREATE VIEW statement
        assert insp.get_view_definition(f"{name}_v").strip().lower() == f"select k from {name}"
        assert f"{name}_m" in insp.get_materialized_view_names()
        assert insp.get_foreign_keys(name) == [] and insp.get_unique_constraints(name) == []
        table = sa.Table(name, sa.MetaData(), autoload_with=engine)
        assert [c.name for c in table.c] == ["k", "v", "f"]
        assert [c.name for c in table.primary_key] == ["k"]
        meta = sa.MetaData()
        meta.reflect(engine, only=[name])
        assert list(meta.tables) == [name]
        with engine.begin() as conn:
            conn.execute(sa.insert(table), [{"k": 1, "v": "a", "f": 0.5}])
        with engine.connect() as conn:
            assert conn.execute(sa.select(table.c.v).where(table.c.k == 1)).all() == [("a",)]
    finally:
        engine.dispose()


def test_psql_describes_an_index_by_its_key(server: ServerHandle, name: str) -> None:
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is not installed (test_psql installs postgresql-client)")

    def run(command: str) -> str:
        done = subprocess.run([psql, "-X", "-h", server.host, "-p", str(server.port), "-U",
                               "twofold", "-c", command, "twofold"],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    run(f"CREATE TABLE {name} (k bigint, v text, w text)")
    run(f"CREATE INDEX {name}_wk ON {name} (w, k)")
    lines = [line.split("|") for line in run(f"\\d {name}_wk").splitlines() if "|" in line]
    assert [[c.strip() for c in line] for line in lines[1:]] == [
        ["w", "text", "yes", "w"], ["k", "bigint", "yes", "k"]]


def test_cursors_over_queries_and_psycopg_server_side_cursors(server: ServerHandle,
                                                             name: str) -> None:
    """`DECLARE c CURSOR FOR SELECT` with every FETCH form drivers send, psycopg's named
    (server-side) cursors with parameters, and cursors closed at COMMIT and ROLLBACK."""
    with connect(server) as setup:
        setup.execute(f"CREATE TABLE {name} (k bigint, s text)")
        setup.execute(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")
    with psycopg.connect(server.dsn(), connect_timeout=10) as c:  # not autocommit: BEGIN
        cur = c.cursor()
        cur.execute(f"DECLARE d CURSOR FOR SELECT k FROM {name} ORDER BY k")
        got = []
        for fetch in ("FETCH 1 d", "FETCH NEXT FROM d", "FETCH FORWARD 1 FROM d",
                      "FETCH FORWARD ALL FROM d"):
            cur.execute(fetch)
            got.append([r[0] for r in cur.fetchall()])
        assert got == [[1], [2], [3], [4]]
        c.commit()
        with pytest.raises(errors.InvalidCursorName):  # COMMIT closed it
            cur.execute("FETCH 1 d")
        c.rollback()
        cur.execute(f"DECLARE e CURSOR FOR SUBSCRIBE {name}")
        c.rollback()
        with pytest.raises(errors.InvalidCursorName):  # so did ROLLBACK, and its subscription
            cur.execute("FETCH 1 e WITH (timeout = '0s')")
        c.rollback()
        named = c.cursor(name="sc")
        named.execute(f"SELECT k, s FROM {name} WHERE k > %s ORDER BY k", (1,))
        assert [d.name for d in named.description or []] == ["k", "s"]
        assert named.fetchmany(2) == [(2, "b"), (3, "c")]
        assert named.fetchall() == [(4, "d")]
        named.close()
        c.commit()
    with connect(server) as auto:  # outside BEGIN a cursor lives until CLOSE
        auto.execute(f"DECLARE h CURSOR FOR SELECT k FROM {name} ORDER BY k")
        assert auto.execute("FETCH 2 h").fetchall() == [(1,), (2,)]
        auto.execute("CLOSE h")


def test_catalog_arrays_in_text_and_binary(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (a bigint, b text, k bigint)")
        c.execute(f"CREATE INDEX {name}_kb ON {name} (k, b)")
        query = ("SELECT i.indkey FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                 "WHERE c.relname = %s")
        for binary in (False, True):
            cur = c.cursor(binary=binary)
            cur.execute(query, (f"{name}_kb",))
            assert cur.fetchall() == [([3, 2],)]
