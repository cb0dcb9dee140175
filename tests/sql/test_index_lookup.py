"""Point queries over an indexed table are answered by an index lookup (`twofold.sql.lookup`),
with the filter path's results: the same random rows (duplicates, NULLs) in a table with
indexes and one without, random key constants (present, absent, NULL, other types) as
literals and `$1` parameters, compared with each other and with DuckDB, now and `AS OF` an
earlier time; EXPLAIN names the lookup exactly when it is taken.
`TWOFOLD_SQL_EXAMPLES` sets how many queries each seed draws (default 40)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest
from tests.sql.querygen import normalize

import twofold

EXAMPLES = int(os.environ.get("TWOFOLD_SQL_EXAMPLES", "40"))
COLS = "k bigint, j text, v double precision"


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.005, timeout=60) as database:
        yield database


def _rows(rng: random.Random, n: int) -> list[tuple[Any, ...]]:
    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.15 else v

    rows = [(maybe(rng.randint(-2, 4)), maybe(rng.choice("xyz")),
             maybe(rng.choice([0.0, -0.0, 1.5, -2.0, 3.25]))) for _ in range(n)]
    return rows + rng.sample(rows, min(len(rows), 3))  # duplicates


def _key(rng: random.Random) -> str:
    return rng.choice(["-2", "0", "1", "3", "4", "9", "NULL", "1.0", "'1'", "3.5",
                       "$1"])


def _query(rng: random.Random, t: str) -> str:
    k, j = _key(rng), rng.choice(["'x'", "'y'", "'w'", "NULL"])
    v = rng.choice(["0.0", "-0.0", "1.5", "3.25", "2", "NULL"])
    return rng.choice([
        f"SELECT * FROM {t} WHERE k = {k}",
        f"SELECT v, k FROM {t} WHERE {k} = k",
        f"SELECT j FROM {t} WHERE k = {k} AND v > 0",
        f"SELECT v * 2 AS w, j FROM {t} WHERE k = {k} ORDER BY w NULLS FIRST",
        f"SELECT * FROM {t} WHERE k = {k} AND j = {j}",
        f"SELECT j || 'a' AS s FROM {t} WHERE j = {j} AND k = {k}",
        f"SELECT k FROM {t} WHERE j = {j}",
        f"SELECT k, j FROM {t} WHERE v = {v}",
        f"SELECT DISTINCT j FROM {t} WHERE k = {k}",
        f"SELECT count(*) FROM {t} WHERE k = {k}",
        f"SELECT * FROM {t} WHERE k = {k} ORDER BY v DESC NULLS LAST, j NULLS FIRST "
        "LIMIT 2",
    ])


def _duck(rows: list[tuple[Any, ...]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    for t in ("a", "b"):
        con.execute(f"CREATE TABLE {t} ({COLS})")
        if rows:
            con.executemany(f"INSERT INTO {t} VALUES (?, ?, ?)", rows)
    return con


def _setup(db: twofold.Database, p: str, rows: list[tuple[Any, ...]]) -> None:
    db.sql(f"CREATE TABLE {p}a ({COLS})")
    db.sql(f"CREATE TABLE {p}b ({COLS})")
    db.sql(f"CREATE INDEX {p}a_k ON {p}a (k)")
    db.sql(f"CREATE INDEX {p}a_jk ON {p}a (j, k)")
    db.sql(f"CREATE INDEX {p}a_j ON {p}a (j)")
    db.sql(f"CREATE INDEX {p}a_v ON {p}a (v)")
    if rows:
        db.table(f"{p}a").insert(rows)
        db.table(f"{p}b").insert(rows)


def _compare(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], sql: str) -> None:
    assert normalize(got) == normalize(want), f"{sql}\n got {got}\n want {want}"
    if "ORDER BY w" in sql:  # the ordered column's sequence is determined
        assert [r[0] for r in got] == [r[0] for r in want], sql


@pytest.mark.parametrize("seed", range(3))
def test_lookup_equals_filter_path_and_duckdb(db: twofold.Database, seed: int) -> None:
    rng = random.Random(seed)
    p = f"lk{seed}_"
    rows = _rows(rng, rng.randint(0, 25))
    _setup(db, p, rows)
    con = _duck(rows)
    before = db.sql(f"SELECT * FROM {p}a").timestamp
    queries = [_query(rng, "a") for _ in range(EXAMPLES)]
    param = [rng.choice([1, 3, 9, None])]
    for sql in queries:
        fast = db.sql(sql.replace("FROM a", f"FROM {p}a"), param).rows
        slow = db.sql(sql.replace("FROM a", f"FROM {p}b"), param).rows
        duck = con.execute(sql.replace("$1", "?") if "$1" in sql else sql,
                           param if "$1" in sql else []).fetchall()
        if "LIMIT" in sql:  # ties make the chosen rows differ; each side's count and order
            assert len(fast) == len(slow) == len(duck), sql
            continue
        _compare(fast, slow, sql)
        _compare(fast, [tuple(r) for r in duck], sql)
    # Rows written later are invisible AS OF the earlier time, on both paths.
    more = _rows(rng, 6)
    db.table(f"{p}a").insert(more)
    db.table(f"{p}b").insert(more)
    for sql in queries[:10]:
        if "LIMIT" in sql:
            continue
        fast = db.sql(sql.replace("FROM a", f"FROM {p}a") + f" AS OF {before}", param).rows
        slow = db.sql(sql.replace("FROM a", f"FROM {p}b") + f" AS OF {before}", param).rows
        _compare(fast, slow, sql + " AS OF")
        duck = con.execute(sql.replace("$1", "?") if "$1" in sql else sql,
                           param if "$1" in sql else []).fetchall()
        _compare(fast, [tuple(r) for r in duck], sql + " AS OF")


def _plan(db: twofold.Database, sql: str, params: Any = None) -> list[str]:
    return [r[0] for r in db.sql("EXPLAIN " + sql, params).rows]


def test_explain_shows_the_lookup(db: twofold.Database) -> None:
    _setup(db, "ex_", [(1, "x", 1.5), (1, None, 2.0), (2, "y", None)])
    plan = _plan(db, "SELECT v + 1 FROM ex_a WHERE k = 1")
    assert plan[-1].strip().startswith("Lookup index 'ex_a_k' (k) = (1)"), plan
    assert not any("Get table" in ln for ln in plan), plan
    assert "Lookup index 'ex_a_k' (k) = (3)" in _plan(db, "SELECT * FROM ex_a WHERE k = $1",
                                                       [3])[-1]
    assert "Lookup index 'ex_a_jk' (j, k) = ('x', 1)" in _plan(
        db, "SELECT * FROM ex_a WHERE k = 1 AND j = 'x'")[-1]
    assert db.sql("SELECT v FROM ex_a WHERE k = 1 ORDER BY v").rows == [(1.5,), (2.0,)]
    # Not taken: no index, NULL, another type, a zero float, a map over a non-key filter.
    for sql in ["SELECT * FROM ex_b WHERE k = 1", "SELECT * FROM ex_a WHERE k = NULL",
                "SELECT * FROM ex_a WHERE k = 1.0", "SELECT * FROM ex_a WHERE v = 0.0",
                "SELECT v + 1 FROM ex_a WHERE k = 1 AND v > 0",
                "SELECT v + 1 FROM ex_a WHERE k = 1 AND k = 1.0",
                "SELECT * FROM ex_a WHERE k = 1 LIMIT 1"]:
        plan = _plan(db, sql)
        assert not any("Lookup" in ln for ln in plan), (sql, plan)
        assert any("Get table" in ln for ln in plan), (sql, plan)
    assert db.sql("SELECT * FROM ex_a WHERE k = $1", [None]).rows == []
