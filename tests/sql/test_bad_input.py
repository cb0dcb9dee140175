"""Bad SQL — random garbage, every prefix of valid statements, unsupported constructs — gives a
typed `TwofoldError` with a SQLSTATE, promptly, and leaves the database as it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import twofold
from twofold.sql.errors import FeatureNotSupported, sqlstate_of
from twofold.testing.profiles import examples

STATEMENTS = [
    "CREATE TABLE z (a int PRIMARY KEY, b text NOT NULL)",
    "INSERT INTO t (k, s) VALUES (10, 'x'), (11, NULL)",
    "UPDATE t SET v = v * 2 WHERE k IN (1, 2)",
    "DELETE FROM t WHERE s LIKE 'a%'",
    "CREATE MATERIALIZED VIEW mv AS SELECT s, count(*) FROM t GROUP BY s",
    "CREATE INDEX ix ON t (s)",
    "SELECT t.k, (SELECT max(k) FROM t AS u WHERE u.k < t.k) FROM t LEFT JOIN t AS w "
    "ON t.k = w.k WHERE EXISTS (SELECT 1 FROM t AS x WHERE x.s = t.s) ORDER BY 1 LIMIT 2",
    "WITH c AS (SELECT k FROM t) SELECT k FROM c UNION SELECT 1 EXCEPT SELECT 2",
]

UNSUPPORTED = [
    ("SELECT sum(k) OVER (PARTITION BY s) FROM t", "window functions"),
    # An aggregate inside OVER is no aggregate of the query: not a grouping error.
    ("SELECT k, sum(v) OVER (PARTITION BY k) FROM t", "window functions"),
    ("SELECT k, rank() OVER (ORDER BY k) FROM t", "window functions"),
    ("SELECT lag(k) OVER (ORDER BY k) FROM t", "window functions"),
    ("WITH RECURSIVE r AS (SELECT 1) SELECT * FROM r", "RECURSIVE"),
    ("SELECT * FROM t, LATERAL (SELECT k) AS l", "LATERAL"),
    ("SELECT CAST(k AS numeric) FROM t", "numeric"),
    ("SELECT string_agg(s, ',' ORDER BY k) FROM t", "ORDER BY"),
    ("SELECT string_agg(s, s) FROM t", "separator"),
    ("CREATE OR REPLACE VIEW t AS SELECT 1 AS one", "OR REPLACE"),
    ("SELECT * FROM generate_series(1, 3)", "table functions"),
    ("CREATE TABLE y (a int DEFAULT 1)", "DEFAULT"),
    ("INSERT INTO t VALUES (20, 1.0, 'q') ON CONFLICT DO NOTHING", "ON CONFLICT"),
    ("SELECT 1; SELECT 2", "several statements"),
    ("VACUUM t", "VACUUM"),
    ("SELECT k FROM t WHERE k = ANY (SELECT k FROM t)", ""),
    ("SELECT md5('\\x01'::bytea) FROM t", "md5(bytea)"),
    ("SELECT log(2, v) FROM t", "log(b, x)"),
    ("SELECT trunc(v, 1) FROM t", "trunc(x, d)"),
    ("CREATE INDEX ix2 ON t (k + 1)", "expressions"),
]


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.005, timeout=30) as database:
        database.sql("CREATE TABLE t (k int, v double precision, s text)")
        database.sql("INSERT INTO t VALUES (1, 2.5, 'a'), (2, NULL, 'b'), (2, NULL, 'b')")
        yield database


def _state(db: twofold.Database) -> tuple[object, ...]:
    return (db.core.objects(), sorted(db.sql("SELECT * FROM t").rows, key=repr))


def _refused(db: twofold.Database, sql: str) -> twofold.TwofoldError | None:
    before = _state(db)
    try:
        db.sql(sql)
    except twofold.TwofoldError as e:
        assert len(sqlstate_of(e)) == 5
        assert _state(db) == before, f"{sql!r} failed but changed the database"
        return e
    return None


@pytest.mark.parametrize(("sql", "feature"), UNSUPPORTED)
def test_unsupported_constructs_name_themselves(db: twofold.Database, sql: str,
                                                feature: str) -> None:
    e = _refused(db, sql)
    assert e is not None, f"{sql!r} was accepted"
    assert feature.lower() in str(e).lower()
    if feature and "several" not in feature:
        assert isinstance(e, FeatureNotSupported) or sqlstate_of(e) in ("0A000", "42883")


@pytest.mark.parametrize("stmt", STATEMENTS)
def test_truncated_statements_fail_typed(db: twofold.Database, stmt: str) -> None:
    words = stmt.split(" ")
    for n in range(1, len(words)):
        prefix = " ".join(words[:n])
        e = _refused(db, prefix)
        if e is None:  # a prefix that is itself a valid statement ran: undo nothing needed
            continue


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(alphabet=st.sampled_from(list("SELECT FROMWHERE t k,()*'=<>;$1.-+\"\n")),
               max_size=40) | st.text(max_size=30))
def test_random_garbage_fails_typed(db: twofold.Database, text: str) -> None:
    _refused(db, text)
