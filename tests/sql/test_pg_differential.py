"""Random SQL through `db.sql` against a real PostgreSQL 15 (`servers` fixture), equal as
multisets (`querygen.normalize`) or failing with the same SQLSTATE: `querygen`'s queries, plus
`round`, casts of doubles to `integer`, unary minus and comparisons with quoted float
literals, over tables whose doubles include -0.0, NaN, +-infinity and ties (2.5, -0.5), and as
materialized views read after random writes. The database uses the C collation (the
generator's `string_agg ... ORDER BY` and comparisons of texts are byte order in twofold).
Zeros compare without their sign (`normalize`): PostgreSQL's `min`/`max` over both -0.0 and
0.0 answer whichever came first, so the sign is not PostgreSQL's to check there; the sign of
`round`, casts and negation is checked in `test_rounding.py`, and of `min`/`max` over only
-0.0 below.
`TWOFOLD_SQL_EXAMPLES` sets how many queries each table contents draws (default 40)."""

from __future__ import annotations

import math
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest
from tests.sql.pgcompare import fresh_database
from tests.sql.querygen import COLUMNS, TABLES, WORDS, Gen, normalize

import twofold
from twofold.sql.errors import sqlstate_of

EXAMPLES = int(os.environ.get("TWOFOLD_SQL_EXAMPLES", "40"))
FLOATS = (0.5, -0.5, 2.5, -2.5, 1.5, 3.75, 0.0, -0.0, 1e3, math.nan, math.inf, -math.inf)


def pg_row(rng: random.Random) -> tuple[Any, ...]:
    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.15 else v

    return (maybe(rng.randint(0, 4)), maybe(rng.randint(-5, 5)), maybe(rng.choice(FLOATS)),
            maybe(rng.choice(WORDS)))


def pg_rows(rng: random.Random, n: int) -> list[tuple[Any, ...]]:
    rows = [pg_row(rng) for _ in range(n)]
    return rows + [rng.choice(rows) for _ in range(n // 4)] if rows else rows


class PgGen(Gen):
    """`Gen` with doubles' rounding and signs in play: `round(f)`, `f::integer`,
    `round(<decimal literal>)`, `-f`, comparisons with `'NaN'`/`'-0'`/`'inf'`."""

    def num_expr(self, q: list[str], depth: int = 0) -> str:
        r = self.rng
        if r.random() < 0.7:
            return super().num_expr(q, depth)
        return self.double_expr(q)

    def double_expr(self, q: list[str]) -> str:
        r = self.rng
        f = f"{r.choice(q)}.f"
        lit = r.choice(("2.5", "-2.5", "0.5", "1.5", "-0.5", "3.5"))
        return self.pick(f"round({f})", f"round({f} * 3)", f"round({f} + 0.5)",
                         f"(-{f})", f"round({lit})", f"round({lit} * 1)", f"round(-({lit}))",
                         f"CASE WHEN {f} = 'NaN' THEN -1.0 ELSE {f} END",
                         f"CASE WHEN abs({f}) < 1e6 THEN {f}::integer END",
                         f"CASE WHEN abs({f}) < 1e6 THEN ({f} * 3)::integer END",
                         f"{lit}::integer", f"({lit} * 3)::integer", f"{f} * 0",
                         f"{f}::integer")  # 22003 over NaN and infinities

    def select_list(self, q: list[str]) -> str:
        out = super().select_list(q)
        return f"{out}, {self.double_expr(q)} AS p" if self.rng.random() < 0.6 else out

    def pred(self, q: list[str], depth: int = 0) -> str:
        r = self.rng
        if r.random() < 0.15:
            f = f"{r.choice(q)}.f"
            return self.pick(f"{f} = 'NaN'", f"{f} = '-0'", f"{f} > 'inf'", f"{f} < '-inf'",
                             f"{f} = 0", f"{f} >= 'inf'", f"{f} IN (2.5, -0.0)")
        return super().pred(q, depth)


@pytest.fixture(scope="module")
def pg(servers: Any) -> Iterator[Any]:
    with fresh_database(servers, "pgd", "TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'") \
            as con:
        cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
        for name in TABLES:
            con.execute(f"CREATE TABLE {name} ({cols})")
        yield con


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.005, timeout=60) as database:
        cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
        for name in TABLES:
            database.sql(f"CREATE TABLE {name} ({cols})")
        yield database


def _load(db: twofold.Database, pg: Any, prefix: str, contents: dict[str, list[Any]]) -> None:
    for name, rows in contents.items():
        pg.execute(f"DELETE FROM {prefix}{name}")
        db.sql(f"DELETE FROM {prefix}{name}")
        if rows:
            with pg.cursor() as cur:
                cur.executemany(f"INSERT INTO {prefix}{name} VALUES (%s, %s, %s, %s)", rows)
            db.table(f"{prefix}{name}").insert(rows)


def _pg(pg: Any, sql: str) -> Any:
    import psycopg

    try:
        return normalize([tuple(r) for r in pg.execute(sql).fetchall()])
    except psycopg.Error as e:
        return str(e.sqlstate)


def _tf(db: twofold.Database, sql: str) -> Any:
    try:
        return normalize(db.sql(sql).rows)
    except twofold.TwofoldError as e:
        return sqlstate_of(e)


def _show(v: Any) -> Any:
    return sorted(v.items(), key=repr)[:10] if not isinstance(v, str) else v


def _check(got: Any, want: Any, sql: str) -> None:
    assert got == want, f"{sql}\n twofold:    {_show(got)}\n PostgreSQL: {_show(want)}"


@pytest.mark.parametrize("seed", range(3))
def test_one_off_queries_equal_postgres(db: twofold.Database, pg: Any, seed: int) -> None:
    rng = random.Random(7000 + seed)
    contents = {name: pg_rows(rng, rng.randint(0, 8)) for name in TABLES}
    _load(db, pg, "", contents)
    gen = PgGen(rng)
    for _ in range(EXAMPLES):
        sql = gen.query()
        _check(_tf(db, sql), _pg(pg, sql), sql)


def test_materialized_views_equal_postgres(db: twofold.Database, pg: Any) -> None:
    """A few random queries as materialized views in twofold, read after random inserts and
    deletes, equal the same queries run by PostgreSQL over the same rows."""
    rng = random.Random(99)
    prefix = "m_"
    cols = ", ".join(f"{c} {t}" for c, t in COLUMNS)
    contents: dict[str, list[Any]] = {}
    for name in TABLES:
        db.sql(f"CREATE TABLE {prefix}{name} ({cols})")
        pg.execute(f"CREATE TABLE {prefix}{name} ({cols})")
        contents[name] = pg_rows(rng, rng.randint(0, 8))
    _load(db, pg, prefix, contents)
    gen = PgGen(rng)
    queries = []
    while len(queries) < max(EXAMPLES // 8, 2):
        sql = _prefixed(gen.query(), prefix)
        if isinstance(_tf(db, sql), str):
            continue  # one that fails over these rows says nothing about maintenance
        db.sql(f"CREATE MATERIALIZED VIEW {prefix}v{len(queries)} AS {sql}")
        queries.append(sql)
    for _ in range(2):
        for name in TABLES:
            _churn(db.table(f"{prefix}{name}"), contents[name], rng, pg_rows(rng, 3))
        _load_pg(pg, prefix, contents)
        for j, sql in enumerate(queries):
            _check(_tf(db, f"SELECT * FROM {prefix}v{j}"), _pg(pg, sql), sql)


def _churn(table: Any, rows: list[Any], rng: random.Random, new: list[Any]) -> None:
    """Delete about 30% of `rows` from `table` and insert `new`; the model `rows` follows by
    position (`list.remove` would take a 0.0 row for a -0.0 one, which `delete` does not)."""
    gone = [i for i in range(len(rows)) if rng.random() < 0.3]
    if gone:
        table.delete([rows[i] for i in gone])
        for i in reversed(gone):
            del rows[i]
    if new:
        table.insert(new)
        rows.extend(new)


def _load_pg(pg: Any, prefix: str, contents: dict[str, list[Any]]) -> None:
    for name, rows in contents.items():
        pg.execute(f"DELETE FROM {prefix}{name}")
        if rows:
            with pg.cursor() as cur:
                cur.executemany(f"INSERT INTO {prefix}{name} VALUES (%s, %s, %s, %s)", rows)


def _prefixed(sql: str, prefix: str) -> str:
    for name in TABLES:
        for before in ("FROM ", "JOIN ", ", "):
            sql = sql.replace(f"{before}{name} ", f"{before}{prefix}{name} ")
    return sql


def test_is_distinct_from_fails_with_its_operands(db: twofold.Database, pg: Any) -> None:
    """Found by the random queries: `f::integer IS DISTINCT FROM 5` over an infinite `f` is
    PostgreSQL's 22003 (both operands are evaluated); twofold's expansion into `and`/`or`
    dropped the error where the other side decided, and answered rows."""
    rows = [(1, 1, math.inf, "a"), (2, 2, 2.5, None), (None, None, None, None)]
    _load(db, pg, "", {"r0": rows, "r1": [], "r2": []})
    for sql in ["SELECT k FROM r0 WHERE f::integer IS DISTINCT FROM 5",
                "SELECT k FROM r0 WHERE 5 IS NOT DISTINCT FROM f::integer",
                "SELECT k, a IS DISTINCT FROM NULL, f IS NOT DISTINCT FROM 2.5 FROM r0",
                "SELECT k FROM r0 WHERE CASE WHEN f < 3 THEN f::integer END "
                "IS DISTINCT FROM a"]:
        _check(_tf(db, sql), _pg(pg, sql), sql)


def test_aggregates_of_negative_zeros_equal_postgres(db: twofold.Database, pg: Any) -> None:
    """Found by the random queries with zeros compared by sign: `max`/`min` of a group whose
    zeros are all -0.0 are -0 in PostgreSQL (float8larger/smaller keep the value); twofold
    canonicalized them to 0.0. A group with both zeros is left out: PostgreSQL's min/max then
    answer whichever zero came first. One-off and maintained. (`sum` of only -0.0 is 0.0 in
    twofold, -0 in PostgreSQL: its accumulator holds no sign of zero; left, docs/sql.md.)"""
    rows = [(1, 1, -0.0, "a"), (1, 2, -0.0, "b"), (2, 1, -0.0, None), (2, 2, -1.0, None),
            (3, 1, -0.0, None), (3, 2, 1.0, None), (4, 1, None, None), (4, 2, -0.0, None)]
    _load(db, pg, "", {"r0": rows, "r1": [], "r2": []})
    sql = "SELECT k, max(f) AS a, min(f) AS b, max(-f) AS d, count(f) AS n FROM r0 GROUP BY k"
    db.sql(f"CREATE MATERIALIZED VIEW nz AS {sql}")

    def signs(rows: Any) -> list[Any]:
        return sorted(([math.copysign(1, v) if isinstance(v, float) else v for v in r]
                       for r in rows), key=repr)

    want = signs(pg.execute(sql).fetchall())
    assert _tf(db, sql) == _pg(pg, sql), sql
    assert signs(db.sql(sql).rows) == want, sql
    assert signs(db.sql("SELECT * FROM nz").rows) == want, "maintained"
