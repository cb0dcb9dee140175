"""Random SQL through `db.sql` against DuckDB, equal as multisets: as one-off queries, and as
materialized views read after random inserts and deletes (`querygen` draws both).
`TWOFOLD_SQL_EXAMPLES` sets how many queries each test draws (default 40)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest
from tests.sql.querygen import COLUMNS, TABLES, Gen, normalize, random_rows

import twofold
from twofold.testing.helpers import churn

EXAMPLES = int(os.environ.get("TWOFOLD_SQL_EXAMPLES", "40"))


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.005, timeout=60) as database:
        yield database


def _duck(contents: dict[str, list[tuple[Any, ...]]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET integer_division = true")
    for name, rows in contents.items():
        cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
        con.execute(f"CREATE TABLE {name} ({cols})")
        if rows:
            con.executemany(f"INSERT INTO {name} VALUES (?, ?, ?, ?)", rows)
    return con


def _setup(db: twofold.Database, prefix: str, rng: random.Random
           ) -> dict[str, list[tuple[Any, ...]]]:
    contents = {}
    cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
    for name in TABLES:
        db.sql(f"CREATE TABLE {prefix}{name} ({cols})")
        rows = random_rows(rng, rng.randint(0, 8))
        if rows:
            db.table(f"{prefix}{name}").insert(rows)
        contents[name] = rows
    return contents


def _qualify(sql: str, prefix: str) -> str:
    for name in TABLES:
        for before in ("FROM ", "JOIN ", ", "):
            sql = sql.replace(f"{before}{name} ", f"{before}{prefix}{name} ")
    return sql


def _check(db_rows: list[tuple[Any, ...]], con: duckdb.DuckDBPyConnection, sql: str) -> None:
    expected = normalize([tuple(r) for r in con.execute(sql).fetchall()])
    got = normalize(db_rows)
    assert got == expected, f"{sql}\n twofold: {sorted(got.items(), key=repr)[:10]}\n" \
                            f" duckdb:  {sorted(expected.items(), key=repr)[:10]}"


def test_one_off_queries(db: twofold.Database) -> None:
    rng = random.Random(1234)
    contents = _setup(db, "q_", rng)
    con = _duck(contents)
    gen = Gen(rng)
    for _ in range(EXAMPLES):
        sql = gen.query()
        _check(db.sql(_qualify(sql, "q_")).rows, con, sql)


@pytest.mark.parametrize("seed", range(max(EXAMPLES // 10, 1)))
def test_materialized_views_after_writes(db: twofold.Database, seed: int) -> None:
    rng = random.Random(seed)
    prefix = f"m{seed}_"
    contents = _setup(db, prefix, rng)
    gen = Gen(rng)
    queries = [gen.query() for _ in range(3)]
    for j, sql in enumerate(queries):
        db.sql(f"CREATE MATERIALIZED VIEW {prefix}v{j} AS {_qualify(sql, prefix)}")
    for _ in range(3):
        for name in TABLES:
            table = db.table(f"{prefix}{name}")
            churn(table, contents[name], rng, random_rows(rng, rng.randint(0, 4)))
        con = _duck(contents)
        for j, sql in enumerate(queries):
            _check(db.sql(f"SELECT * FROM {prefix}v{j}").rows, con, sql)
