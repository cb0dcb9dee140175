"""Helpers for tests that compare twofold with PostgreSQL (the session's `servers.pg()`).

- `fresh_database(servers, prefix, options)`: a throwaway database in the session's cluster
  (dropped after), as an autocommit psycopg connection; skips with the reason when no
  PostgreSQL can be started (the `servers` fixture does).
- `postgres_with(servers, prefix, *statements)` / `twofold_with(*statements, storage=...)`: the
  same schema (and rows) in a fresh PostgreSQL database and in an embedded twofold database
  with fast ticks, for a module's pair of fixtures; `wire_with(dsn, *statements)` the same
  schema through a twofold pgwire server (`server.dsn()`), as an autocommit psycopg connection.
- `fixture_pair(prefix, *statements, rows={table: rows}, storage=...)`: a module's `pg, db`
  fixtures (module-scoped) over `postgres_with` / `twofold_with`, with `rows` inserted into
  each system (PostgreSQL through `executemany`, twofold through `db.table(t).insert`).
- `rows_or_same_error(db, sql, states)`: twofold's rows of `sql`, or `None` when it failed
  with one of `states` — the SQLSTATEs PostgreSQL raised for the same rows; any other outcome
  (an error PostgreSQL does not raise, an answer where PostgreSQL fails) is an assertion error.
- `load_both(db, pg, table, rows)`: replace `table`'s rows in both systems by `rows`, each
  prefixed with its index as an id column; returns the ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

import twofold
from twofold.sql.errors import sqlstate_of


@contextmanager
def fresh_database(servers: Any, prefix: str, options: str = "") -> Iterator[Any]:
    import psycopg

    cluster = servers.pg()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(cluster.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} {options}")
    try:
        with psycopg.connect(cluster.url_for(name), autocommit=True) as con:
            yield con
    finally:
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name}")


@contextmanager
def postgres_with(servers: Any, prefix: str, *statements: str) -> Iterator[Any]:
    """`fresh_database(servers, prefix)` after `statements`."""
    with fresh_database(servers, prefix) as con:
        for sql in statements:
            con.execute(sql)
        yield con


@contextmanager
def twofold_with(*statements: str, storage: str | None = None) -> Iterator[twofold.Database]:
    """An embedded twofold database (ticks every 5 ms, 60 s timeouts) after `statements`
    (through `db.sql`); `storage` as `twofold.open`'s (the default placement when None)."""
    with twofold.open(storage, tick_interval=0.005, timeout=60) as database:
        for sql in statements:
            database.sql(sql)
        yield database


def fixture_pair(prefix: str, *statements: str,
                 rows: Mapping[str, Sequence[tuple[Any, ...]]] | None = None,
                 storage: str | None = None) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `pg, db` module fixtures of a PostgreSQL comparison: `statements` run in a fresh
    PostgreSQL database and in an embedded twofold one, then each table's `rows` inserted."""
    seeded = dict(rows or {})

    @pytest.fixture(scope="module")
    def pg(servers: Any) -> Iterator[Any]:
        with postgres_with(servers, prefix, *statements) as con:
            for table, values in seeded.items():
                if values:
                    marks = ", ".join(["%s"] * len(values[0]))
                    with con.cursor() as cur:
                        cur.executemany(f"INSERT INTO {table} VALUES ({marks})", list(values))
            yield con

    @pytest.fixture(scope="module")
    def db() -> Iterator[twofold.Database]:
        with twofold_with(*statements, storage=storage) as database:
            for table, values in seeded.items():
                if values:
                    database.table(table).insert(list(values))
            yield database

    return pg, db


@contextmanager
def wire_with(dsn: str, *statements: str) -> Iterator[Any]:
    """An autocommit psycopg connection to `dsn` (a twofold server's) after `statements`."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        for sql in statements:
            con.execute(sql)
        yield con


def same_error(db: twofold.Database, pg: Any, sql: str) -> str:
    """`sql` fails on PostgreSQL (connection `pg`) and on `db` with one SQLSTATE: that state."""
    import psycopg

    with pytest.raises(psycopg.Error) as p:
        pg.execute(sql)
    with pytest.raises(twofold.TwofoldError) as e:
        db.sql(sql)
    state = p.value.sqlstate
    assert sqlstate_of(e.value) == state, f"{sql}: {e.value}; PostgreSQL: {p.value}"
    assert state is not None
    return state


def rows_or_same_error(db: twofold.Database, sql: str, states: set[str]
                       ) -> list[tuple[Any, ...]] | None:
    try:
        rows = db.sql(sql).rows
    except twofold.TwofoldError as e:
        assert states, f"{sql}: twofold failed ({e}), PostgreSQL answers every row"
        assert sqlstate_of(e) in states, f"{sql}: {sqlstate_of(e)} {e}; PostgreSQL: {states}"
        return None
    assert not states, f"{sql}: PostgreSQL fails ({states}), twofold answered {rows}"
    return rows


def load_both(db: twofold.Database, pg: Any, table: str, rows: list[tuple[Any, ...]]
              ) -> list[int]:
    full = [(i, *r) for i, r in enumerate(rows)]
    pg.execute(f"DELETE FROM {table}")
    if full:
        marks = ", ".join(["%s"] * len(full[0]))
        with pg.cursor() as cur:
            cur.executemany(f"INSERT INTO {table} VALUES ({marks})", full)
    db.sql(f"DELETE FROM {table}")
    db.table(table).insert(full)
    return [r[0] for r in full]
