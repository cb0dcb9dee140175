"""`SELECT DISTINCT ON (...)`: per distinct value of its expressions, the first row in ORDER BY
order — one-off and maintained in a materialized view over random inserts and deletes, against
DuckDB (the ORDER BY breaks every tie there, with NULL placement spelled out, so both engines
must give the same rows)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import twofold
from twofold.testing.profiles import examples

QUERIES = [
    "SELECT DISTINCT ON (g) g, x, s FROM {t} ORDER BY g NULLS LAST, x DESC NULLS FIRST, "
    "s NULLS LAST",
    "SELECT DISTINCT ON (s, g) s, x FROM {t} ORDER BY s NULLS FIRST, g NULLS LAST, "
    "x NULLS LAST",
    "SELECT DISTINCT ON (g % 2) g, s FROM {t} ORDER BY g % 2 NULLS LAST, s DESC NULLS LAST, "
    "g NULLS LAST",
    "SELECT DISTINCT ON (g) g, count(*) AS c FROM {t} GROUP BY g, s "
    "ORDER BY g NULLS LAST, c DESC, max(x) NULLS LAST",
]
_ROW = st.tuples(st.one_of(st.none(), st.integers(-2, 3)),
                 st.one_of(st.none(), st.sampled_from([0.5, 1.0, -1.0, 2.5])),
                 st.one_of(st.none(), st.sampled_from(["a", "b", "ab"])))
_HISTORY = st.lists(st.tuples(st.lists(_ROW, max_size=6), st.lists(st.integers(0, 50),
                                                                    max_size=3)),
                    min_size=1, max_size=3)
_NAMES = itertools.count()


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.005, timeout=60) as database:
        yield database


def _duck(rows: list[tuple[Any, ...]], sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (g BIGINT, x DOUBLE, s TEXT)")
    if rows:
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    return [tuple(r) for r in con.execute(sql.format(t="t")).fetchall()]


@settings(max_examples=examples(4), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=_HISTORY)
def test_distinct_on_one_off_and_maintained_against_duckdb(
        db: twofold.Database, history: list[tuple[list[tuple[Any, ...]], list[int]]]) -> None:
    name = f"don{next(_NAMES)}"
    db.sql(f"CREATE TABLE {name} (g int, x double precision, s text)")
    table = db.table(name)
    rows: list[tuple[Any, ...]] = []
    try:
        for j, q in enumerate(QUERIES):
            db.sql(f"CREATE MATERIALIZED VIEW {name}_{j} AS {q.format(t=name)}")
        for new, deletes in history:
            for r in {rows[i % len(rows)] for i in deletes} if rows else set():
                table.delete([r])
                rows.remove(r)
            if new:
                table.insert(new)
                rows.extend(new)
            for j, q in enumerate(QUERIES):
                want = _duck(rows, q)
                # ORDER BY orders the distinct rows totally, so the lists are equal.
                assert db.sql(q.format(t=name)).rows == want, q
                assert Counter(db.sql(f"SELECT * FROM {name}_{j}").rows) == Counter(want), q
    finally:
        db.sql(f"DROP TABLE {name} CASCADE")
