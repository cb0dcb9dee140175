"""psql (Debian's postgresql-client) over the wire: DDL, DML, `\\dt`, `\\d NAME`, `\\di`, `\\dv`,
`\\dm`, errors, several statements in one message."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from twofold.testing.pgwire import ServerHandle


def _psql() -> str:
    found = shutil.which("psql")
    if found is None and shutil.which("apt-get") is not None:
        subprocess.run(["apt-get", "install", "-y", "-q", "postgresql-client"],
                       capture_output=True, timeout=600, check=False)
        found = shutil.which("psql")
    if found is None:
        pytest.skip("psql is not installed and apt-get could not install postgresql-client")
    return found


def psql(server: ServerHandle, *commands: str,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    args = [_psql(), "-X", "-h", server.host, "-p", str(server.port), "-U", "twofold",
            "-v", "ON_ERROR_STOP=1", "twofold"]
    for c in commands:
        args += ["-c", c]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_ddl_dml_and_query(server: ServerHandle) -> None:
    out = psql(server, "CREATE TABLE p1 (k bigint PRIMARY KEY, v text)",
               "INSERT INTO p1 VALUES (1, 'one'), (2, 'two')",
               "SELECT k, v FROM p1 ORDER BY k").stdout
    assert "CREATE TABLE" in out and "INSERT 0 2" in out
    assert " 1 | one" in out and " 2 | two" in out and "(2 rows)" in out


def test_several_statements_in_one_message(server: ServerHandle) -> None:
    out = psql(server, "CREATE TABLE p2 (k bigint); INSERT INTO p2 VALUES (5); "
               "INSERT INTO p2 VALUES (6)", "SELECT sum(k) * 2 AS d FROM p2").stdout
    assert " 22" in out
    # A read after a write in one message (one implicit transaction) is refused, as in
    # Materialize: it could not see the write (tests/server/test_simple_implicit_tx.py).
    done = psql(server, "INSERT INTO p2 VALUES (7); SELECT k FROM p2", check=False)
    assert "transaction in write-only mode" in done.stderr and "HINT:" in done.stderr


def test_describe_commands(server: ServerHandle) -> None:
    psql(server, "CREATE TABLE p3 (k bigint NOT NULL, v double precision, s text)",
         "CREATE INDEX p3_k ON p3 (k)",
         "CREATE MATERIALIZED VIEW p3_mv AS SELECT k, count(*) AS n FROM p3 GROUP BY k",
         "CREATE VIEW p3_v AS SELECT s FROM p3")
    dt = psql(server, "\\dt").stdout
    assert "p3 " in dt and "table" in dt and "p3_mv" not in dt
    d = psql(server, "\\d p3").stdout
    assert 'Table "public.p3"' in d
    for line in ("k      | bigint", "v      | double precision", "s      | text"):
        assert line in d, d
    assert "not null" in d
    assert "p3_k" in d  # its index
    di = psql(server, "\\di").stdout
    assert "p3_k" in di and "index" in di and "| p3\n" in di
    assert "p3_v" in psql(server, "\\dv").stdout
    assert "p3_mv" in psql(server, "\\dm").stdout
    dmv = psql(server, "\\d p3_mv").stdout
    assert "n      | bigint" in dmv, dmv


def test_error_has_sqlstate(server: ServerHandle) -> None:
    done = subprocess.run([_psql(), "-X", "-h", server.host, "-p", str(server.port), "-U",
                           "twofold", "-v", "VERBOSITY=verbose", "-c", "SELECT * FROM nowhere",
                           "twofold"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "42P01" in done.stderr and "nowhere" in done.stderr


def test_describe_shows_declared_types(server: ServerHandle) -> None:
    """`\\d` shows each column as declared (docs/sql.md, "Types"), as PostgreSQL's psql does."""
    psql(server, "CREATE TABLE p_decl (a smallint, b integer, c bigint, d real, "
                 "e double precision, f varchar(5), g char(2), h text, i boolean, j bytea)")
    d = psql(server, "\\d p_decl").stdout
    for line in ("a      | smallint", "b      | integer", "c      | bigint", "d      | real",
                 "e      | double precision", "f      | character varying",
                 "g      | character", "h      | text", "i      | boolean", "j      | bytea"):
        assert line in d, d
    done = psql(server, "INSERT INTO p_decl (b) VALUES (3000000000)", check=False)
    assert "integer out of range" in done.stderr


def test_a_materialized_views_definition_is_shown(server: ServerHandle) -> None:
    """`\\d+` of a materialized view prints its query under "View definition:", as psql does
    against PostgreSQL (pg_get_viewdef: the query, not the CREATE statement); before, a
    materialized view recorded no text and the section was empty."""
    psql(server, "CREATE TABLE p9 (k bigint, v text)",
         "CREATE MATERIALIZED VIEW p9_mv AS SELECT k, count(*) AS n FROM p9 GROUP BY k")
    out = psql(server, "\\d+ p9_mv").stdout
    assert "View definition:" in out
    definition = out.split("View definition:", 1)[1]
    assert "SELECT k, count(*) AS n FROM p9 GROUP BY k" in definition
