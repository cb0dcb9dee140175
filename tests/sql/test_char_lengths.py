"""`varchar(n)` and `char(n)` lengths as PostgreSQL 15 enforces them (`docs/sql.md`, "Declared
column types"): a text written into such a column (INSERT ... VALUES, INSERT ... SELECT,
UPDATE, COPY) with more than `n` characters is `22001` `value too long for type character
varying(n)` / `character(n)` and nothing of the statement is written — unless the characters
past the `n`-th are all spaces, which are dropped; an explicit cast truncates without error;
lengths count characters. `char(n)` values are kept without trailing spaces, which PostgreSQL
ignores in comparisons, `length`, `||`, casts to text and grouping. Compared with a real
PostgreSQL (`servers` fixture)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.sql.pgcompare import fixture_pair

import twofold
from twofold.sql.errors import sqlstate_of
from twofold.testing.profiles import examples

COLS = "id bigint, v varchar(3), c char(3), w varchar(6), tx text"
STATE = "SELECT id, v, c::text, length(c), c || '|', w, tx FROM t ORDER BY id"


# memory://: both runtimes on threads, no SQLite round trips or maintenance process
# (the default placement: tests/replica, tests/storage)
pg, db = fixture_pair("chr", f"CREATE TABLE t ({COLS})", storage="memory://")


def _pg(pg: Any, sql: str, params: Any = None) -> Any:
    import psycopg

    try:
        cur = pg.execute(sql, params)
        return [tuple(r) for r in cur.fetchall()] if cur.description else "ok"
    except psycopg.Error as e:
        return (str(e.sqlstate), str(e.diag.message_primary))


def _tf(db: twofold.Database, sql: str, params: Any = None) -> Any:
    try:
        r = db.sql(sql, params)
        return list(r.rows) if hasattr(r, "rows") else "ok"
    except twofold.TwofoldError as e:
        return (sqlstate_of(e), str(e))


def _same(db: twofold.Database, pg: Any, sql: str, params: Any = None) -> None:
    want, got = _pg(pg, sql, params), _tf(db, sql, params)
    if isinstance(want, tuple):
        assert isinstance(got, tuple), f"{sql}: PostgreSQL fails {want}, twofold gave {got}"
        assert got[0] == want[0] and (got[1].endswith(want[1]) or f"{want[1]} (in" in got[1]), \
            f"{sql}: {got}; PostgreSQL {want}"
    else:
        assert got == want, sql
    assert _tf(db, STATE) == _pg(pg, STATE), f"after {sql}"  # nothing half-written


def _reset(db: twofold.Database, pg: Any) -> None:
    pg.execute("DELETE FROM t")
    db.sql("DELETE FROM t")


SCRIPT = [
    "INSERT INTO t (id, v) VALUES (1, 'abcd')",
    "INSERT INTO t (id, v) VALUES (1, 'abc   ')",
    "INSERT INTO t (id, v) VALUES (2, 'ab'), (3, 'ab  '), (4, 'ééé')",
    "INSERT INTO t (id, v) VALUES (5, 'éééé')",
    "INSERT INTO t (id, v) VALUES (6, 'a'), (7, 'abcdef')",  # all or nothing
    "INSERT INTO t (id, v) VALUES (6, 'ab\t')",
    "INSERT INTO t (id, v) VALUES (6, 'ab\t ')",
    "INSERT INTO t (id, c) VALUES (8, 'abcd')",
    "INSERT INTO t (id, c) VALUES (8, 'a'), (9, 'ab   '), (10, '  '), (11, '')",
    "INSERT INTO t (id, c) VALUES (12, 'a  b')",
    "INSERT INTO t (id, c, w) VALUES (12, 'x', 'abcdefg ')",
    "INSERT INTO t (id, c, w) VALUES (13, 'x', 'abcdefgh')",
    "INSERT INTO t (id, v) VALUES (14, 'abcdefgh'::varchar(10))",
    "INSERT INTO t (id, v) VALUES (14, 'abcdef'::varchar(3))",
    "INSERT INTO t (id, v, tx) VALUES (15, NULL, 'long text here')",
    "UPDATE t SET v = 'abcd' WHERE id = 2",
    "UPDATE t SET v = v || 'xx' WHERE id = 2",
    "UPDATE t SET v = 'x' || v",
    "UPDATE t SET v = 'abc      ' WHERE id = 2",
    "UPDATE t SET c = 'toolong'",
    "UPDATE t SET c = 'ok    ' WHERE id = 8",
    "UPDATE t SET w = tx",
    "UPDATE t SET v = w WHERE id = 12",
    "UPDATE t SET v = c, w = c || '   ' WHERE c IS NOT NULL",
    "UPDATE t SET v = left(tx, 3) WHERE tx IS NOT NULL",
    "INSERT INTO t (id, v) SELECT 20, 'abcd'",
    "INSERT INTO t (id, v) SELECT 21, 'abc  '",
    "INSERT INTO t (id, v) SELECT id + 100, tx FROM t",
    "INSERT INTO t (id, v) SELECT id + 100, v FROM t WHERE v IS NOT NULL",
    "INSERT INTO t (id, c) SELECT id + 200, w FROM t WHERE w IS NOT NULL",
    "INSERT INTO t (id, c) SELECT id + 300, v || '   ' FROM t WHERE v IS NOT NULL AND id < 100",
    "INSERT INTO t (id, w) SELECT id + 400, tx FROM t WHERE tx IS NOT NULL",
]


def test_writes_equal_postgres(db: twofold.Database, pg: Any) -> None:
    """Each statement in turn against both: the same SQLSTATE and message, or the same table
    afterwards (so a failed statement wrote nothing)."""
    _reset(db, pg)
    for sql in SCRIPT:
        _same(db, pg, sql)


def test_parameters_are_checked(db: twofold.Database, pg: Any) -> None:
    """`$1` written into a varchar(3) column is checked as a literal is."""
    _reset(db, pg)
    for value in ["abc", "abcd", "ab   ", "éé€"]:
        want = _pg(pg, "INSERT INTO t (id, v) VALUES (1, %s)", [value])
        got = _tf(db, "INSERT INTO t (id, v) VALUES (1, $1)", [value])
        assert (got == "ok") == (want == "ok"), (value, got, want)
        if want != "ok":
            assert got[0] == want[0] == "22001", (value, got)
        assert _tf(db, STATE) == _pg(pg, STATE), value
        _reset(db, pg)


@pytest.mark.parametrize("sql", [
    "SELECT 'abcdef'::varchar(3), 'abcdef'::char(3)::text, 'a'::char(3) || '|', "
    "'ab  '::varchar(3) || '|', 'ééééé'::varchar(2), CAST('abcdef' AS varchar(3))",
    "SELECT CAST('a' AS character(3)) = 'a', 'a'::char(3) = 'a  '::char(3), "
    "length('a  '::char(3)), length('a  '::varchar(3)), 'a   '::char(3) || 'b'",
    "SELECT 'abc'::varchar, 'abc  '::varchar(10) || '|', 'abc'::char::text",
    "SELECT NULL::varchar(2), NULL::char(2) IS NULL",
    "SELECT v::varchar(2), c::varchar(1), w::char(2)::text FROM t ORDER BY id",
    "SELECT c = 'a', c = 'a  ', 'a  ' = c, c <> 'a ', c IS NOT DISTINCT FROM 'a ' "
    "FROM t WHERE c IS NOT NULL ORDER BY id",
    "SELECT c::text, count(*) FROM t WHERE c IS NOT NULL GROUP BY c ORDER BY 1",
    "SELECT DISTINCT c::text FROM t WHERE c IS NOT NULL ORDER BY 1",
])
def test_reads_equal_postgres(db: twofold.Database, pg: Any, sql: str) -> None:
    _reset(db, pg)
    for s in ["INSERT INTO t (id, v, c, w) VALUES (1, 'ab ', 'a', 'abcdef'), "
              "(2, 'a', 'a  ', 'a '), (3, 'abc', 'ab', 'x'), (4, NULL, '', NULL)"]:
        pg.execute(s)
        db.sql(s)
    assert _tf(db, sql) == _pg(pg, sql), sql


TEXTS = st.text(st.sampled_from("ab é€\t"), max_size=6)
SETTINGS = settings(max_examples=examples(60), deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@SETTINGS
@given(rows=st.lists(st.tuples(TEXTS, TEXTS), min_size=1, max_size=4),
       column=st.sampled_from(["v", "c", "w"]))
def test_random_multirow_inserts_equal_postgres(db: twofold.Database, pg: Any,
                                                rows: list[tuple[str, str]],
                                                column: str) -> None:
    """Random texts (trailing spaces, tabs, multibyte characters) in one multi-row INSERT,
    then UPDATE from another text and an explicit cast: all of it or nothing, as PostgreSQL."""
    _reset(db, pg)
    values = ", ".join(f"({i}, '{a}', '{b}')" for i, (a, b) in enumerate(rows))
    _same(db, pg, f"INSERT INTO t (id, {column}, tx) VALUES {values}")
    _same(db, pg, f"INSERT INTO t (id, {column}, tx) VALUES (100, '', '')")
    _same(db, pg, f"UPDATE t SET {column} = tx")
    _same(db, pg, f"INSERT INTO t (id, {column}) SELECT id + 10, tx FROM t")
    sql = "SELECT id, tx::varchar(2), tx::char(2)::text, length(tx::char(4)) FROM t"
    assert sorted(_tf(db, sql)) == sorted(_pg(pg, sql)), sql


def test_maintained_view_of_casts_equals_one_off(db: twofold.Database) -> None:
    """A materialized view and an index over explicit casts to varchar(n)/char(n) hold the
    one-off query's rows, through inserts and deletes."""
    db.sql("CREATE TABLE m (k bigint, s text)")
    db.sql("CREATE MATERIALIZED VIEW mc AS SELECT k, s::varchar(2) AS a, s::char(3) AS b, "
           "length(s::char(3)) AS n FROM m")
    db.sql("CREATE INDEX mc_k ON mc (k)")
    one_off = "SELECT k, s::varchar(2), s::char(3), length(s::char(3)) FROM m"
    for step in ["INSERT INTO m VALUES (1, 'abcdef'), (2, 'a    '), (3, 'é€€€'), (4, NULL)",
                 "DELETE FROM m WHERE k = 1", "INSERT INTO m VALUES (5, ' x ')"]:
        db.sql(step)
        want = sorted(db.sql(one_off).rows, key=repr)
        assert sorted(db.sql("SELECT * FROM mc").rows, key=repr) == want, step
        assert db.sql("SELECT a, b FROM mc WHERE k = 2").rows == [("a ", "a  ")]  # padded


def test_copy_checks_lengths() -> None:
    """COPY FROM STDIN (text and binary) into varchar(n)/char(n) columns: too long is 22001
    and nothing is written; trailing spaces past n are dropped."""
    import psycopg

    from twofold.testing.pgwire import running_server

    with running_server() as server, psycopg.connect(server.dsn(), autocommit=True) as con:
        con.execute("CREATE TABLE cp (id bigint, v varchar(3), c char(2))")
        for fmt in ["", " (FORMAT binary)"]:
            with pytest.raises(psycopg.Error) as e, \
                    con.cursor().copy(f"COPY cp FROM STDIN{fmt}") as cp:
                cp.write_row((1, "abc", "ab"))
                cp.write_row((2, "abcd", "a"))
            assert e.value.sqlstate == "22001", e.value
            assert "value too long for type character varying(3)" in str(e.value)
            with pytest.raises(psycopg.Error) as e, \
                    con.cursor().copy(f"COPY cp FROM STDIN{fmt}") as cp:
                cp.write_row((1, "a", "abc"))
            assert e.value.sqlstate == "22001"
            assert "value too long for type character(2)" in str(e.value)
            assert con.execute("SELECT count(*) FROM cp").fetchall() == [(0,)]
        with con.cursor().copy("COPY cp FROM STDIN") as cp:
            cp.write_row((1, "ab     ", "a   "))
            cp.write_row((2, "é€é", None))
        rows = con.execute("SELECT id, v, c::text, length(c) FROM cp ORDER BY id").fetchall()
        assert rows == [(1, "ab ", "a", 1), (2, "é€é", None, None)]
