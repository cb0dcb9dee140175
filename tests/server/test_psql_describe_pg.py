"""psql's `\\d` of a view and a materialized view, and `\\d+`'s Storage column, as against
PostgreSQL 15: a view's columns have no NOT NULL constraint (PostgreSQL shows them nullable,
and so does SQLAlchemy's reflection of them), a text column is stored `extended`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from tests.server.test_psql import _psql

from twofold.testing.pgwire import ServerHandle

_DDL = ["CREATE TABLE pd_t (k bigint PRIMARY KEY, v text NOT NULL, n integer, b bytea)",
        "CREATE VIEW pd_v AS SELECT k, v, n FROM pd_t",
        "CREATE MATERIALIZED VIEW pd_m AS SELECT v, count(*) AS c FROM pd_t GROUP BY v"]


def _run(host: str, port: int, user: str, command: str) -> str:
    done = subprocess.run([_psql(), "-X", "-P", "pager=off", "-h", host, "-p", str(port),
                           "-U", user, "-v", "ON_ERROR_STOP=1", "-c", command,
                           "postgres" if user == "postgres" else "twofold"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def both(postgres: tuple[str, int], server: ServerHandle
         ) -> Iterator[tuple[tuple[str, int, str], tuple[str, int, str]]]:
    host, port = postgres
    with psycopg.connect(host=host, port=port, user="postgres", dbname="postgres",
                         autocommit=True) as pg:
        pg.execute("DROP MATERIALIZED VIEW IF EXISTS pd_m")
        pg.execute("DROP VIEW IF EXISTS pd_v")
        pg.execute("DROP TABLE IF EXISTS pd_t")
        for s in _DDL:
            pg.execute(s)
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as tf:
        for s in _DDL:
            tf.execute(s)
    yield (host, port, "postgres"), (server.host, server.port, "twofold")


@pytest.mark.parametrize("command", ["\\d pd_v", "\\d pd_m"])
def test_describe_a_view_as_postgres(both: tuple[tuple[str, int, str], ...],
                                     command: str) -> None:
    pg, tf = both
    assert _run(*tf, command) == _run(*pg, command)


def test_storage_column_as_postgres(both: tuple[tuple[str, int, str], ...]) -> None:
    pg, tf = both

    def columns(out: str) -> list[str]:
        return [ln for ln in out.splitlines() if ln.startswith((" k ", " v ", " n ", " b "))]

    assert columns(_run(*tf, "\\d+ pd_t")) == columns(_run(*pg, "\\d+ pd_t"))


def test_reflected_view_columns_as_postgres(both: tuple[tuple[str, int, str], ...]) -> None:
    got = []
    for host, port, user in both:
        engine = sa.create_engine(f"postgresql+psycopg://{user}@{host}:{port}/"
                                  f"{'postgres' if user == 'postgres' else 'twofold'}")
        try:
            insp = sa.inspect(engine)
            got.append([(c["name"], c["nullable"]) for name in ("pd_t", "pd_v", "pd_m")
                        for c in insp.get_columns(name)])
        finally:
            engine.dispose()
    assert got[0] == got[1]


def test_show_a_view_definition(both: tuple[tuple[str, int, str], ...]) -> None:
    """`\\sv` looks the view up as `'pd_v'::pg_catalog.regclass` and reads its reloptions
    with array_remove and `= ANY`: it was a 0A000 catalog query."""
    pg, tf = both
    got, want = _run(*tf, "\\sv pd_v"), _run(*pg, "\\sv pd_v")
    assert got.splitlines()[0] == want.splitlines()[0] == \
        "CREATE OR REPLACE VIEW public.pd_v AS"
    assert "FROM pd_t" in got
    looked_up = _run(*tf, "SELECT 'pd_v'::regclass::oid = oid AS a, '\"pd_v\"'::regclass::oid "
                          "= oid AS b, 'public.PD_V'::regclass::oid = oid AS c FROM pg_class "
                          "WHERE relname = 'pd_v'")
    assert [v.strip() for v in looked_up.splitlines()[2].split("|")] == ["t", "t", "t"]


@pytest.mark.parametrize("command", ["\\drds", "\\dRp", "\\dRs", "\\dX"])
def test_empty_lists_as_postgres(both: tuple[tuple[str, int, str], ...],
                                 command: str) -> None:
    """psql's lists of role settings, publications, subscriptions and extended statistics:
    twofold has none, and says so as PostgreSQL does (they were 0A000 catalog queries)."""
    pg, tf = both
    assert _run(*tf, command) == _run(*pg, command)
