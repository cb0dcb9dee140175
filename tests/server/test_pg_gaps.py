"""Small things psql and driver users hit: boolean input as PostgreSQL reads it (`'yes'`,
`'on'`, `'t'`, `'1'`, prefixes), dollar-quoted strings, `now()` refused by name (twofold has
no time types), and `pg_stat_activity`."""

from __future__ import annotations

import time

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import errors
from tests.server.wire import Raw, query

from twofold.engine.boolinput import parse_bool
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

_WORDS = ["t", "tr", "tru", "true", "truee", "f", "fa", "false", "y", "ye", "yes", "yess",
          "n", "no", "non", "o", "on", "onn", "of", "off", "offf", "1", "0", "01", "10", "2",
          "", " ", "TRUE", "YeS", " on ", "\toff\n", "\vt\f", "\u00a0t", "t\u00a0", "tr ue",
          "+1", "-0", "yes!", "nO", "On", "oF"]


def _pg_bool(con: psycopg.Connection[tuple[object, ...]], text: str) -> bool | None:
    try:
        return con.execute("SELECT %s::text::boolean", (text,)).fetchone()[0]  # type: ignore
    except errors.InvalidTextRepresentation:
        return None


@pytest.fixture(scope="module")
def pg(postgres: tuple[str, int]) -> psycopg.Connection[tuple[object, ...]]:
    host, port = postgres
    return psycopg.connect(host=host, port=port, user="postgres", dbname="postgres",
                           autocommit=True)


def test_boolean_words_as_postgres(pg: psycopg.Connection[tuple[object, ...]]) -> None:
    for w in _WORDS:
        assert parse_bool(w) == _pg_bool(pg, w), repr(w)


@settings(max_examples=examples(150), deadline=None)
@given(st.text(alphabet="tTrRuUeEyYsSnNoOfFaAlL01 \t\n\u00a0x", max_size=6))
def test_boolean_input_property(pg: psycopg.Connection[tuple[object, ...]], text: str) -> None:
    assert parse_bool(text) == _pg_bool(pg, text), repr(text)


def test_boolean_input_over_the_wire(server: ServerHandle, name: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        assert c.execute("SELECT 'yes'::boolean, 'on'::boolean, 't'::boolean, "
                         "'1'::boolean, CAST(' Of ' AS boolean), 'n'::boolean"
                         ).fetchone() == (True, True, True, True, False, False)
        with pytest.raises(errors.InvalidTextRepresentation):
            c.execute("SELECT 'o'::boolean")
        c.execute(f"CREATE TABLE {name} (k bigint, b boolean)")
        c.execute(f"INSERT INTO {name} VALUES (1, 'yes'), (2, 'off')")
        c.execute(f"INSERT INTO {name} VALUES (%s, %s)", (3, "on"))  # a text parameter
        with c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
            cp.write("4\tye\n5\tFALS\n")  # the batch parser
        with c.cursor().copy(f"COPY {name} FROM STDIN") as cp:
            cp.write("6\t\\N\n7\ttr\n8\tn\n")  # a NULL: the row parser
        rows = c.execute(f"SELECT k, b FROM {name} WHERE b = 'on' OR NOT b ORDER BY k")
        assert rows.fetchall() == [(1, True), (2, False), (3, True), (4, True), (5, False),
                                   (7, True), (8, False)]


def test_dollar_quoted_strings(server: ServerHandle) -> None:
    raw = Raw(server.host, server.port)
    raw.login()
    # split at top-level semicolons only: the one inside the quote stays
    raw.send(query("SELECT $$it's; here$$ AS a; SELECT $tag$x$$y$tag$ AS b, $q$$q$ AS c"))
    got = raw.until(b"Z")
    values = [body for kind, body in got if kind == b"D"]
    assert b"it's; here" in values[0] and b"x$$y" in values[1]
    assert [k for k, _ in got].count(b"E") == 0
    raw.close()
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        assert c.execute("SELECT length($a$ $b$ $a$), $$x$$ || %s", ("y",)).fetchone() == (
            5, "xy")


def test_now_is_refused_by_name(server: ServerHandle) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        for q in ("SELECT now()", "SELECT current_timestamp", "SELECT current_date"):
            with pytest.raises(errors.FeatureNotSupported, match="no date or time types"):
                c.execute(q)


def test_pg_stat_activity(server: ServerHandle, name: str) -> None:
    other = psycopg.connect(server.dsn(application_name="watcher"), autocommit=True,
                            connect_timeout=10)
    other.execute("SELECT 41 + 1")
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        me = c.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        cols = ("pid, datname, usename, application_name, client_addr, state, query, "
                "backend_type, backend_start IS NOT NULL, client_port > 0")
        rows = {r[0]: r[1:] for r in c.execute(f"SELECT {cols} FROM pg_stat_activity")}
        mine = rows.pop(me)
        assert mine[:6] == ("twofold", "twofold", "", "127.0.0.1", "active",
                            f"SELECT {cols} FROM pg_stat_activity")
        assert mine[6:] == ("client backend", True, True)
        watcher = [r for r in rows.values() if r[2] == "watcher"]
        assert len(watcher) == 1 and watcher[0][4:6] == ("idle", "SELECT 41 + 1")
        other.execute("BEGIN")
        got = c.execute("SELECT state FROM pg_catalog.pg_stat_activity "
                        "WHERE application_name = 'watcher'").fetchall()
        assert got == [("idle in transaction",)]
        other.close()
        left = c.execute("SELECT count(*) FROM pg_stat_activity "
                         "WHERE application_name = 'watcher'").fetchone()
        for _ in range(50):  # the server ends the closed session as its socket closes
            if left == (0,):
                break
            time.sleep(0.05)
            left = c.execute("SELECT count(*) FROM pg_stat_activity "
                             "WHERE application_name = 'watcher'").fetchone()
        assert left == (0,)


def _value_or_state(con: psycopg.Connection[tuple[object, ...]], sql: str) -> object:
    try:
        return con.execute(sql.encode()).fetchall()  # bytes: sent as it is, no parameters
    except psycopg.Error as e:
        return e.sqlstate


_ESCAPE_CASES = ["a\\'b", "it''s", "tab\\there", "\\303\\251", "\\xc3\\xa9", "\\xff", "\\0",
                 "\\u00e9\\U0001F600", "\\uD83D\\uDE00", "\\uD83D", "\\uDE00x", "\\u12",
                 "\\q\\\\", "\\101\\x4", "\\777", "\\U00110000", "\\u0000", "new\\nline",
                 "\\b\\f\\r", "a;b", "\\';"]


def test_escape_strings_as_postgres(server: ServerHandle,
                                    pg: psycopg.Connection[tuple[object, ...]]) -> None:
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        for body in _ESCAPE_CASES:
            sql = f"SELECT E'{body}' AS s"
            assert _value_or_state(c, sql) == _value_or_state(pg, sql), sql
        # a quote escaped by a backslash does not end the statement when the message is split
        sql = "SELECT E'x\\';y' AS a; SELECT e'\\\\' AS b"
        assert _value_or_state(c, sql) == _value_or_state(pg, sql) == [("x';y",)]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.sampled_from(["\\", "'", "''", "\\'", "0", "3", "7", "x", "f", "c", "u",
                                 "U", "D", "8", "n", "t", "a", "é", "00e9", ";"]),
                max_size=8))
def test_escape_string_property(server: ServerHandle,
                                pg: psycopg.Connection[tuple[object, ...]],
                                parts: list[str]) -> None:
    body = "".join(parts)
    sql = f"SELECT E'{body}' AS s"
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        got, want = _value_or_state(c, sql), _value_or_state(pg, sql)
    if got != want and not _closes_at_end(body):
        # Not one well-formed literal: an error either way, nothing runs; PostgreSQL's lexer
        # may report what it met on the way (a bad escape 22025, a NUL 22021) first.
        assert got == "42601" and isinstance(want, str), (sql, got, want)
        return
    assert got == want, sql


def _closes_at_end(body: str) -> bool:
    """Whether `E'<body>'` is one escape string ending at its last quote."""
    text, i = body + "'", 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "'":
            if text.startswith("''", i):
                i += 2
                continue
            return i == len(text) - 1
        else:
            i += 1
    return False


def test_copy_options_as_escape_strings(server: ServerHandle, name: str,
                                        pg: psycopg.Connection[tuple[object, ...]]) -> None:
    """`DELIMITER E'\\t'` (how psql users write a tab) and a NULL string with a doubled quote
    read as PostgreSQL reads them."""
    data = "1\tn'a\tx\n2\t\"a\tb\"\tn'a\n"
    got = []
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        for con in (c, pg):
            con.execute(f"DROP TABLE IF EXISTS {name}")
            con.execute(f"CREATE TABLE {name} (k bigint, a text, b text)")
            with con.cursor().copy(f"COPY {name} FROM STDIN WITH (FORMAT csv, "
                                   "DELIMITER E'\\t', NULL 'n''a')") as cp:
                cp.write(data)
            got.append(con.execute(f"SELECT k, a, b FROM {name} ORDER BY k").fetchall())
    assert got[0] == got[1] == [(1, None, "x"), (2, "a\tb", None)]
