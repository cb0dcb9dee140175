"""A simple-protocol Query of several statements is one implicit transaction, PostgreSQL's
rule ("Multiple Statements in a Simple Query"): the statements run in order with their own
results; an error skips the rest and discards the implicit transaction's writes (one
ErrorResponse, then ReadyForQuery); BEGIN inside makes a block, COMMIT/ROLLBACK end it.

Where twofold's transaction rules (Materialize's) refuse a combination — a read of data after
a staged write, writes to two tables — the refusal is the same typed error as inside BEGIN and
nothing is written. The shapes PostgreSQL and twofold both run are checked message by message
against a throwaway PostgreSQL 15 (`twofold.testing.pgcluster`) when one can be started."""

from __future__ import annotations

import shutil

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import errors
from tests.server.test_psql import psql
from tests.server.wire import Raw, msg, query, startup

from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

Reply = tuple[str, str]


def _summary(raw: Raw) -> list[Reply]:
    """The replies up to ReadyForQuery, as comparable pairs: ('C', tag), ('E'/'N', SQLSTATE),
    ('D', first value), ('Z', status); RowDescription and the like left out."""
    out: list[Reply] = []
    for kind, body in raw.until(b"Z"):
        if kind == b"C":
            out.append(("C", body.rstrip(b"\0").decode()))
        elif kind in (b"E", b"N"):
            fields = dict((f[:1], f[1:]) for f in body.split(b"\0") if f)
            out.append((kind.decode(), fields[b"C"].decode()))
        elif kind == b"D":
            n = int.from_bytes(body[2:6], "big", signed=True)
            out.append(("D", body[6:6 + n].decode() if n >= 0 else "NULL"))
        elif kind == b"Z":
            out.append(("Z", body.decode()))
    return out


class Peer:
    """A raw connection to twofold or PostgreSQL, and the table the scripts write."""

    def __init__(self, host: str, port: int, user: str, database: str, table: str) -> None:
        self.raw = Raw(host, port)
        self.raw.send(startup(user, database))
        self.raw.until(b"Z")
        self.table = table

    def run(self, sql: str) -> list[Reply]:
        self.raw.send(query(sql.replace("{t}", self.table)))
        return _summary(self.raw)

    def keys(self) -> list[str]:
        return [v for k, v in self.run("SELECT k FROM {t} ORDER BY k") if k == "D"]


def _peers(server: ServerHandle, postgres: tuple[str, int], name: str,
           exist_ok: bool = False) -> list[Peer]:
    tf = Peer(server.host, server.port, "twofold", "twofold", name)
    pg = Peer(*postgres, "postgres", "postgres", name)
    for p in (tf, pg):
        create = "CREATE TABLE IF NOT EXISTS {t} (k bigint)" if exist_ok else \
            "CREATE TABLE {t} (k bigint)"
        assert p.run(create)[-1] == ("Z", "I")
    return [tf, pg]


# Scripts both run; each followed by the table's keys. `{t}` is the test's table.
SCRIPTS = [
    # several INSERTs: each its own CommandComplete, all applied at the end
    ["INSERT INTO {t} VALUES (1); INSERT INTO {t} VALUES (2), (3); SELECT 7"],
    # an error: the rest skipped, the implicit transaction's writes discarded
    ["INSERT INTO {t} VALUES (1); INSERT INTO {t} VALUES (2); SELECT 1/0; "
     "INSERT INTO {t} VALUES (3)"],
    # an explicit block inside: committed by its COMMIT; what follows is a new implicit one
    ["BEGIN; INSERT INTO {t} VALUES (3); COMMIT; INSERT INTO {t} VALUES (4); SELECT 1/0"],
    # BEGIN after a write takes the write into the block (retroactively), COMMIT in a later Query
    ["INSERT INTO {t} VALUES (5); BEGIN; INSERT INTO {t} VALUES (6)", "SELECT 1", "COMMIT"],
    # ... and its fate: the block fails, COMMIT reports ROLLBACK, neither write lands
    ["INSERT INTO {t} VALUES (5); BEGIN; INSERT INTO {t} VALUES (6); SELECT 1/0", "COMMIT"],
    # an error in a block leaves it failed (the ROLLBACK after the error is not reached)
    ["BEGIN; INSERT INTO {t} VALUES (1); SELECT 1/0; ROLLBACK", "SELECT 1", "ROLLBACK"],
    # COMMIT/ROLLBACK outside a block: PostgreSQL's warning; ROLLBACK discards the implicit one
    ["INSERT INTO {t} VALUES (7); ROLLBACK; INSERT INTO {t} VALUES (8); COMMIT; SELECT 2"],
    ["COMMIT", "ROLLBACK", "BEGIN; BEGIN; COMMIT"],
    # savepoints need a block
    ["SAVEPOINT a", "INSERT INTO {t} VALUES (9); SAVEPOINT a"],
    ["BEGIN; INSERT INTO {t} VALUES (1); SAVEPOINT a; INSERT INTO {t} VALUES (2); "
     "ROLLBACK TO SAVEPOINT a; COMMIT"],
    # UPDATE and DELETE stage with the INSERTs, and compose in order
    ["INSERT INTO {t} VALUES (1), (2), (3); UPDATE {t} SET k = k * 10 WHERE k > 1; "
     "DELETE FROM {t} WHERE k = 1; INSERT INTO {t} VALUES (4)"],
    ["INSERT INTO {t} VALUES (1); UPDATE {t} SET k = k + 1; DELETE FROM {t} WHERE k = 9; "
     "SELECT 1/0"],
    # a read before the first write runs (and the write after it lands)
    ["INSERT INTO {t} VALUES (1)", "SELECT count(*) FROM {t}; INSERT INTO {t} VALUES (2)"],
    # DDL, then a read of what it created
    ["CREATE TABLE {t}_b (k bigint); SELECT count(*) FROM {t}_b; DROP TABLE {t}_b"],
    # the whole message is parsed first: a syntax error anywhere runs none of it
    ["BEGIN; INSERT INTO {t} VALUES (1); COMMIT; SELCT 1", "SELECT 1"],
    ["CREATE TABLE {t}_c (k bigint); SELECT FROM WHERE", "SELECT count(*) FROM {t}_c"],
    ["INSERT INTO {t} VALUES (1); SHOW client_encoding; SELECT 1/0"],
    # DISCARD ALL cannot run in a transaction block, nor in a Query of several statements
    ["SELECT 1; DISCARD ALL", "BEGIN; DISCARD ALL", "ROLLBACK", "DISCARD ALL"],
]


@pytest.mark.parametrize("script", SCRIPTS, ids=[" | ".join(s)[:60] for s in SCRIPTS])
def test_same_replies_as_postgres(server: ServerHandle, postgres: tuple[str, int],
                                  name: str, script: list[str]) -> None:
    tf, pg = _peers(server, postgres, name)
    for text in script:
        assert tf.run(text) == pg.run(text), text
    assert tf.keys() == pg.keys()
    assert tf.run("SELECT 1")[-1] == pg.run("SELECT 1")[-1] == ("Z", "I")


def test_refused_combinations_write_nothing(server: ServerHandle, name: str) -> None:
    """A read of data after a staged write is 25000 (Materialize refuses it the same way: the
    read could not see the write); writes to two tables 25000; nothing of either is written."""
    p = Peer(server.host, server.port, "twofold", "twofold", name)
    p.run("CREATE TABLE {t} (k bigint); CREATE TABLE {t}_2 (k bigint)")
    assert p.run("INSERT INTO {t} VALUES (1); SELECT k FROM {t}") == [
        ("C", "INSERT 0 1"), ("E", "25000"), ("Z", "I")]
    assert p.run("INSERT INTO {t} VALUES (1); INSERT INTO {t}_2 VALUES (1); SELECT 1") == [
        ("C", "INSERT 0 1"), ("E", "25000"), ("Z", "I")]
    assert p.keys() == [] and p.run("SELECT count(*) FROM {t}_2")[0] == ("D", "0")
    # a read of no data after a write is fine
    assert p.run("INSERT INTO {t} VALUES (2); SELECT 1 + 1; SHOW search_path") == [
        ("C", "INSERT 0 1"), ("D", "2"), ("C", "SELECT 1"), ("D", "public"), ("C", "SHOW"),
        ("Z", "I")]
    assert p.keys() == ["2"]
    # a duplicate key among the staged writes fails there; none lands
    p.run("CREATE TABLE {t}_3 (k bigint PRIMARY KEY)")
    got = p.run("INSERT INTO {t}_3 VALUES (1); INSERT INTO {t}_3 VALUES (1); SELECT 1")
    assert got[-2:] == [("E", "23505"), ("Z", "I")]
    assert p.run("SELECT count(*) FROM {t}_3")[0] == ("D", "0")
    # ... or against a key already there, as the last statement
    p.run("INSERT INTO {t}_3 VALUES (5)")
    assert p.run("INSERT INTO {t}_3 VALUES (6); INSERT INTO {t}_3 VALUES (5)") == [
        ("C", "INSERT 0 1"), ("E", "23505"), ("Z", "I")]
    assert p.run("SELECT k FROM {t}_3")[0] == ("D", "5")


def test_copy_from_stdin_inside_a_query_of_several(server: ServerHandle, name: str) -> None:
    """COPY FROM STDIN in the middle of a Query: the statements after it run after CopyDone,
    in the same implicit transaction; a bad line discards the INSERT before it too."""
    p = Peer(server.host, server.port, "twofold", "twofold", name)
    p.run("CREATE TABLE {t} (k bigint)")
    p.raw.send(query(f"INSERT INTO {name} VALUES (1); COPY {name} FROM STDIN; SELECT 5"))
    assert [k for k, _ in p.raw.until(b"G")] == [b"C", b"G"]
    p.raw.send(msg(b"d", b"2\n3\n") + msg(b"c"))
    assert _summary(p.raw) == [("C", "COPY 2"), ("D", "5"), ("C", "SELECT 1"), ("Z", "I")]
    assert p.keys() == ["1", "2", "3"]
    p.raw.send(query(f"INSERT INTO {name} VALUES (4); COPY {name} FROM STDIN; SELECT 5"))
    p.raw.until(b"G")
    p.raw.send(msg(b"d", b"x\n") + msg(b"c"))
    assert _summary(p.raw) == [("E", "22P02"), ("Z", "I")]
    p.raw.send(query(f"INSERT INTO {name} VALUES (4); COPY {name} FROM STDIN"))
    p.raw.until(b"G")
    p.raw.send(msg(b"f", b"no\0"))
    assert _summary(p.raw) == [("E", "57014"), ("Z", "I")]
    assert p.keys() == ["1", "2", "3"]


def test_psql_and_psycopg(server: ServerHandle, name: str) -> None:
    if shutil.which("psql") is None and shutil.which("apt-get") is None:
        pytest.skip("no psql")
    out = psql(server, f"CREATE TABLE {name} (k bigint, v text); "
               f"INSERT INTO {name} VALUES (1, 'a'); INSERT INTO {name} VALUES (2, 'b')").stdout
    assert "INSERT 0 1" in out
    done = psql(server, f"INSERT INTO {name} VALUES (3, 'c'); SELECT 1/0", check=False)
    assert done.returncode != 0 and "division by zero" in done.stderr
    done = psql(server, f"INSERT INTO {name} VALUES (3, 'c'); SELECT * FROM {name}",
                check=False)
    assert done.returncode != 0 and "write-only" in done.stderr
    out = psql(server, f"BEGIN; INSERT INTO {name} VALUES (4, 'd'); COMMIT; "
               f"SELECT count(*) AS n FROM {name}").stdout
    assert "COMMIT" in out and " 3" in out
    with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10) as c:
        # psycopg sends a statement without parameters as a simple Query
        c.execute(f"INSERT INTO {name} VALUES (5, 'e'); INSERT INTO {name} VALUES (6, 'f')")
        with pytest.raises(errors.DivisionByZero):
            c.execute(f"INSERT INTO {name} VALUES (7, 'g'); SELECT 1/0")
        with pytest.raises(errors.InvalidTransactionState):
            c.execute(f"INSERT INTO {name} VALUES (7, 'g'); SELECT k FROM {name}")
        assert [r[0] for r in c.execute(f"SELECT k FROM {name} ORDER BY k")] == [
            1, 2, 4, 5, 6]  # 3 and 7: refused each time, never written


_STATEMENTS = st.one_of(
    st.integers(0, 3).map(lambda k: f"INSERT INTO {{t}} VALUES ({k})"),
    st.integers(0, 3).map(lambda k: f"UPDATE {{t}} SET k = k + 10 WHERE k = {k}"),
    st.integers(0, 3).map(lambda k: f"DELETE FROM {{t}} WHERE k = {k}"),
    st.sampled_from(["SELECT 1", "SELECT 1/0", "BEGIN", "COMMIT", "ROLLBACK"]))


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(_STATEMENTS, min_size=1, max_size=5), min_size=1, max_size=3))
def test_random_scripts_as_postgres(server: ServerHandle, postgres: tuple[str, int],
                                    name: str, messages: list[list[str]]) -> None:
    """Random Query messages of writes to one table, errors and transaction control: the same
    replies as PostgreSQL's, message by message, and the same table after them."""
    tf, pg = _peers(server, postgres, name, exist_ok=True)
    for p in (tf, pg):
        p.run("ROLLBACK; DELETE FROM {t}")  # a fresh table (the ROLLBACK may warn)
    for statements in messages:
        text = "; ".join(statements)
        assert tf.run(text) == pg.run(text), text
    for p in (tf, pg):
        p.raw.close()  # a block left open ends with its session, as a ROLLBACK
    tf, pg = _peers(server, postgres, name, exist_ok=True)
    assert tf.keys() == pg.keys()
    for p in (tf, pg):
        p.raw.close()
