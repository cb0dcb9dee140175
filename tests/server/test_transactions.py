"""Transactions over the wire (psycopg 3, psql) and the sans-IO transaction machine: reads in a
transaction at one timestamp, writes staged until COMMIT and discarded by ROLLBACK, Materialize's
refusals with their SQLSTATEs, failed transactions and savepoints."""

from __future__ import annotations

import time

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import errors
from tests.server.test_psql import psql

from twofold.server.transaction import (
    Access,
    Action,
    Kind,
    Staged,
    Transaction,
    TransactionError,
)
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples


def connect(server: ServerHandle, autocommit: bool = True) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=autocommit, connect_timeout=10)


def rows(c: psycopg.Connection, sql: str,
         params: list[object] | None = None) -> list[tuple[object, ...]]:
    return c.execute(sql, params).fetchall()


def until(fn: object, want: object, timeout: float = 20.0) -> None:
    """Wait until `fn()` gives `want` (another connection's write became visible)."""
    deadline = time.monotonic() + timeout
    while True:
        got = fn()  # type: ignore[operator]
        if got == want:
            return
        assert time.monotonic() < deadline, (got, want)
        time.sleep(0.02)


# -- reads at one timestamp --------------------------------------------------------------------


def test_reads_in_a_transaction_see_one_timestamp(server: ServerHandle, name: str) -> None:
    with connect(server, autocommit=False) as a, connect(server) as b:
        b.execute(f"CREATE TABLE {name} (k bigint, v text)")
        b.execute(f"INSERT INTO {name} VALUES (1, 'one'), (2, 'two')")
        until(lambda: rows(a, f"SELECT count(*) FROM {name}"), [(2,)])
        a.rollback()
        # psycopg's BEGIN, then the first read chooses the timestamp...
        first = rows(a, f"SELECT k, v FROM {name} ORDER BY k")
        assert first == [(1, "one"), (2, "two")]
        b.execute(f"INSERT INTO {name} VALUES (3, 'three')")
        b.execute(f"UPDATE {name} SET v = 'uno' WHERE k = 1")
        assert rows(b, f"SELECT k, v FROM {name} ORDER BY k") == [
            (1, "uno"), (2, "two"), (3, "three")]
        # ...and every later read, of any shape, reads there while the writes land.
        assert rows(a, f"SELECT k, v FROM {name} ORDER BY k") == first
        assert rows(a, f"SELECT count(*), max(k) FROM {name}") == [(2, 2)]
        assert rows(a, "SELECT 1") == [(1,)]  # a constant read is fine in any transaction
        a.commit()
        # A new transaction reads at a new timestamp.
        assert rows(a, f"SELECT k, v FROM {name} ORDER BY k") == [
            (1, "uno"), (2, "two"), (3, "three")]
        a.commit()


def test_a_write_after_a_read_is_refused(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        c.execute("BEGIN")
        c.execute(f"SELECT * FROM {name}")
        with pytest.raises(errors.ReadOnlySqlTransaction, match="read-only mode"):
            c.execute(f"INSERT INTO {name} VALUES (1)")
        with pytest.raises(errors.InFailedSqlTransaction):
            c.execute(f"SELECT * FROM {name}")
        c.execute("ROLLBACK")
        c.execute("BEGIN READ ONLY")
        with pytest.raises(errors.ReadOnlySqlTransaction):
            c.execute(f"DELETE FROM {name}")
        c.execute("ROLLBACK")
        assert rows(c, f"SELECT count(*) FROM {name}") == [(0,)]


# -- staged writes -----------------------------------------------------------------------------


def test_inserts_apply_at_commit_and_rollback_discards(server: ServerHandle,
                                                       name: str) -> None:
    with connect(server) as a, connect(server) as b:
        a.execute(f"CREATE TABLE {name} (k bigint, v double precision)")
        a.execute("BEGIN")
        assert a.execute(f"INSERT INTO {name} VALUES (1, 1.5), (2, NULL)").rowcount == 2
        assert a.execute(f"INSERT INTO {name} VALUES (%s, %s)", [3, 3.5]).rowcount == 1
        assert a.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert rows(b, f"SELECT count(*) FROM {name}") == [(0,)]
        a.execute("ROLLBACK")
        assert rows(a, f"SELECT count(*) FROM {name}") == [(0,)]
        a.execute("BEGIN")
        a.execute(f"INSERT INTO {name} VALUES (1, 1.5), (2, NULL)")
        a.execute(f"INSERT INTO {name} VALUES (3, 3.5)")
        assert rows(b, f"SELECT count(*) FROM {name}") == [(0,)]
        a.execute("COMMIT")
        # One write: whoever sees any row of it sees all of them.
        assert rows(b, f"SELECT k, v FROM {name} ORDER BY k") == [
            (1, 1.5), (2, None), (3, 3.5)]


def test_updates_and_deletes_are_staged_and_compose(server: ServerHandle, name: str) -> None:
    with connect(server) as a, connect(server) as b:
        a.execute(f"CREATE TABLE {name} (k bigint PRIMARY KEY, v bigint)")
        a.execute(f"INSERT INTO {name} VALUES (1, 10), (2, 20), (3, 30)")
        a.execute("BEGIN")
        assert a.execute(f"INSERT INTO {name} VALUES (4, 40)").rowcount == 1
        # Counts are planned with the transaction's earlier writes applied.
        assert a.execute(f"UPDATE {name} SET v = v + 1 WHERE k >= 3").rowcount == 2
        assert a.execute(f"DELETE FROM {name} WHERE v = 41").rowcount == 1
        assert a.execute(f"UPDATE {name} SET v = 0 WHERE k = 1").rowcount == 1
        assert a.execute(f"DELETE FROM {name} WHERE k = 99").rowcount == 0
        assert rows(b, f"SELECT k, v FROM {name} ORDER BY k") == [(1, 10), (2, 20), (3, 30)]
        a.execute("COMMIT")
        assert rows(b, f"SELECT k, v FROM {name} ORDER BY k") == [(1, 0), (2, 20), (3, 31)]
        a.execute("BEGIN")
        a.execute(f"DELETE FROM {name}")
        a.execute("ROLLBACK")
        assert rows(b, f"SELECT count(*) FROM {name}") == [(3,)]


def test_a_concurrent_change_fails_the_commit(server: ServerHandle, name: str) -> None:
    with connect(server) as a, connect(server) as b:
        a.execute(f"CREATE TABLE {name} (k bigint PRIMARY KEY, v bigint)")
        a.execute(f"INSERT INTO {name} VALUES (1, 10), (2, 20)")
        a.execute("BEGIN")
        assert a.execute(f"UPDATE {name} SET v = v * 2 WHERE k = 1").rowcount == 1
        b.execute(f"UPDATE {name} SET v = 11 WHERE k = 1")
        with pytest.raises(errors.SerializationFailure, match="nothing was written"):
            a.execute("COMMIT")
        assert a.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert rows(a, f"SELECT k, v FROM {name} ORDER BY k") == [(1, 11), (2, 20)]


def test_duplicate_keys_fail_the_insert_or_the_commit(server: ServerHandle, name: str) -> None:
    with connect(server) as a, connect(server) as b:
        a.execute(f"CREATE TABLE {name} (k bigint PRIMARY KEY, v text)")
        a.execute(f"INSERT INTO {name} VALUES (1, 'a')")
        a.execute("BEGIN")
        a.execute(f"INSERT INTO {name} VALUES (2, 'b')")
        with pytest.raises(errors.UniqueViolation):
            a.execute(f"INSERT INTO {name} VALUES (2, 'again')")  # twice in the transaction
        a.execute("ROLLBACK")
        a.execute("BEGIN")
        a.execute(f"INSERT INTO {name} VALUES (5, 'mine'), (6, 'mine')")
        b.execute(f"INSERT INTO {name} VALUES (5, 'theirs')")
        with pytest.raises(errors.UniqueViolation):
            a.execute("COMMIT")
        assert rows(b, f"SELECT k, v FROM {name} ORDER BY k") == [(1, "a"), (5, "theirs")]


def test_insert_select_in_a_transaction(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v bigint)")
        c.execute(f"INSERT INTO {name} VALUES (1, 10), (2, 20)")
        c.execute("BEGIN")
        # As the first write, its query reads the table as it is now; the rows wait for COMMIT.
        assert c.execute(f"INSERT INTO {name} SELECT k + 10, v FROM {name}").rowcount == 2
        # After it, another one could not see the transaction's own rows: refused, not wrong.
        with pytest.raises(errors.FeatureNotSupported, match="own writes"):
            c.execute(f"INSERT INTO {name} SELECT k + 100, v FROM {name}")
        c.execute("ROLLBACK")
        c.execute("BEGIN")
        c.execute(f"INSERT INTO {name} SELECT k + 10, v FROM {name}")
        c.execute(f"INSERT INTO {name} VALUES (3, 30)")
        c.execute("COMMIT")
        assert rows(c, f"SELECT k FROM {name} ORDER BY k") == [(1,), (2,), (3,), (11,), (12,)]


def test_mixing_reads_writes_and_tables_is_refused(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        c.execute(f"CREATE TABLE {name}_b (k bigint)")
        c.execute("BEGIN")
        c.execute(f"INSERT INTO {name} VALUES (1)")
        with pytest.raises(errors.InvalidTransactionState, match="write-only mode"):
            c.execute(f"SELECT * FROM {name}")
        c.execute("ROLLBACK")
        c.execute("BEGIN")
        c.execute(f"INSERT INTO {name} VALUES (1)")
        with pytest.raises(errors.InvalidTransactionState, match="single table"):
            c.execute(f"INSERT INTO {name}_b VALUES (1)")
        c.execute("COMMIT")  # of a failed transaction: reported as ROLLBACK, nothing written
        assert rows(c, f"SELECT count(*) FROM {name}") == [(0,)]
        assert rows(c, f"SELECT count(*) FROM {name}_b") == [(0,)]


def test_savepoints_over_staged_writes(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        c.execute("BEGIN")
        c.execute(f"INSERT INTO {name} VALUES (1)")
        c.execute("SAVEPOINT s1")
        c.execute(f"INSERT INTO {name} VALUES (2)")
        with pytest.raises(errors.UndefinedColumn):
            c.execute(f"UPDATE {name} SET nope = 1")
        with pytest.raises(errors.InFailedSqlTransaction):
            c.execute(f"INSERT INTO {name} VALUES (3)")
        c.execute("ROLLBACK TO SAVEPOINT s1")  # drops 2, clears the failure
        c.execute(f"INSERT INTO {name} VALUES (4)")
        c.execute("RELEASE SAVEPOINT s1")
        c.execute("COMMIT")
        assert rows(c, f"SELECT k FROM {name} ORDER BY k") == [(1,), (4,)]


def test_copy_from_stdin_in_a_transaction(server: ServerHandle, name: str) -> None:
    with connect(server) as a, connect(server) as b:
        a.execute(f"CREATE TABLE {name} (k bigint, s text)")
        a.execute("BEGIN")
        with a.cursor().copy(f"COPY {name} FROM STDIN") as cp:
            cp.write_row((1, "x"))
            cp.write_row((2, None))
        a.execute(f"INSERT INTO {name} VALUES (3, 'y')")
        assert rows(b, f"SELECT count(*) FROM {name}") == [(0,)]
        a.execute("COMMIT")
        assert rows(b, f"SELECT k, s FROM {name} ORDER BY k") == [(1, "x"), (2, None),
                                                                  (3, "y")]


def test_psql_transaction_script(server: ServerHandle, name: str) -> None:
    psql(server, f"CREATE TABLE {name} (k bigint, v text)")
    out = psql(server, f"BEGIN; INSERT INTO {name} VALUES (1, 'a'); INSERT INTO {name} "
                       f"VALUES (2, 'b'); COMMIT; BEGIN; INSERT INTO {name} VALUES (3, 'c'); "
                       f"ROLLBACK; SELECT k, v FROM {name} ORDER BY k").stdout
    assert "1 | a" in out and "2 | b" in out and "3 | c" not in out
    bad = psql(server, f"BEGIN; SELECT * FROM {name}; INSERT INTO {name} VALUES (9, 'z')",
               check=False)
    assert bad.returncode != 0 and "read-only mode" in bad.stderr


# -- the machine -------------------------------------------------------------------------------


def test_machine_decisions() -> None:
    t = Transaction()
    assert t.check(Kind.READ) is Action.RUN and t.status == "I"  # autocommit
    t.control("BEGIN", "BEGIN")
    assert t.status == "T"
    assert t.check(Kind.FREE) is Action.RUN
    assert t.check(Kind.READ) is Action.READ_CHOOSE
    t.pin(42)
    assert t.check(Kind.READ) is Action.READ_AT and t.timestamp == 42
    assert t.check(Kind.READ_AS_OF) is Action.RUN  # its own AS OF: exempt
    assert t.check(Kind.DDL) is Action.RUN
    with pytest.raises(TransactionError) as info:
        t.check(Kind.SUBSCRIBE)
    assert info.value.sqlstate == "25000"
    assert t.control("COMMIT", "COMMIT").tag == "COMMIT" and t.status == "I"
    t.control("BEGIN", "BEGIN")
    assert t.check(Kind.SUBSCRIBE) is Action.RUN and t.access is Access.SUBSCRIBE
    with pytest.raises(TransactionError, match="only read"):
        t.check(Kind.READ)
    t.control("ROLLBACK", "ROLLBACK")
    t.control("BEGIN", "START TRANSACTION READ ONLY")
    with pytest.raises(TransactionError) as info:
        t.check(Kind.WRITE, "t")
    assert info.value.sqlstate == "25006"
    t.fail()
    assert t.status == "E"
    with pytest.raises(TransactionError) as info:
        t.check(Kind.FREE)
    assert info.value.sqlstate == "25P02"
    assert t.control("COMMIT", "COMMIT").tag == "ROLLBACK" and t.status == "I"
    with pytest.raises(TransactionError) as info:
        t.control("ROLLBACK", "ROLLBACK TO SAVEPOINT nope")
    assert info.value.sqlstate == "25P01"


_ops = st.lists(st.one_of(
    st.sampled_from(["BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "ROLLBACK TO", "RELEASE",
                     "fail", "pin"]),
    st.tuples(st.sampled_from(list(Kind)), st.sampled_from(["a", "b"]))), max_size=30)


@settings(max_examples=examples(100), deadline=None)
@given(_ops)
def test_machine_invariants(ops: list[object]) -> None:
    """Whatever the statements: COMMIT hands back exactly the writes staged since BEGIN (less
    those rolled back to a savepoint), all of one table, none from a failed transaction; a
    transaction never both reads data and writes; outside BEGIN everything just runs."""
    t = Transaction()
    model: list[Staged] = []  # what a COMMIT now should apply
    marks: list[int] = []
    n = 0
    for op in ops:
        if isinstance(op, str):
            sql = {"ROLLBACK TO": "ROLLBACK TO SAVEPOINT sp", "SAVEPOINT": "SAVEPOINT sp",
                   "RELEASE": "RELEASE SAVEPOINT sp"}.get(op, op)
            word = {"ROLLBACK TO": "ROLLBACK"}.get(op, op)
            if op == "fail":
                t.fail()
                continue
            if op == "pin":
                t.pin(7)
                continue
            was_failed, was_explicit = t.failed, t.explicit
            try:
                done = t.control(word, sql)
            except TransactionError as e:
                assert (e.sqlstate == "25P02" and was_failed) or e.sqlstate in ("3B001",
                                                                                "25P01")
                continue
            if op == "COMMIT":
                assert done.writes == ([] if was_failed else model)
                assert done.tag == ("ROLLBACK" if was_failed else "COMMIT")
            if op in ("COMMIT", "ROLLBACK") or (op == "BEGIN" and not was_explicit):
                model, marks = [], []
            elif op == "SAVEPOINT":
                marks.append(len(model))
            elif op == "ROLLBACK TO":
                del model[marks[-1]:]
            elif op == "RELEASE":
                marks.pop()
            continue
        kind, table = op  # type: ignore[misc]
        try:
            action = t.check(kind, table)
        except TransactionError as e:
            assert t.explicit
            assert e.sqlstate in ("25P02", "25000", "25006")
            continue
        if not t.explicit:
            assert action is Action.RUN
        if action is Action.STAGE:
            n += 1
            w = Staged(table, "insert", n)
            t.stage(w)
            model.append(w)
        assert t.status in "ITE"
        assert len({w.table for w in t.writes}) <= 1
        assert not (t.writes and t.access in (Access.READ, Access.SUBSCRIBE))
        if action in (Action.READ_CHOOSE, Action.READ_AT):
            assert not t.writes and t.access is Access.READ


def test_a_transaction_holds_its_timestamp(server: ServerHandle, name: str) -> None:
    """The index a transaction reads stays readable at its timestamp longer than the index's
    retained history (1 s), and compacts again once the transaction ends or its session goes."""
    since = ("SELECT since FROM twofold_frontiers WHERE object = %s")
    with connect(server, autocommit=False) as a, connect(server) as b:
        b.execute(f"CREATE TABLE {name} (k bigint, v text)")
        b.execute(f"INSERT INTO {name} VALUES (1, 'old'), (2, 'two')")
        b.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        point = f"SELECT v FROM {name} WHERE k = 1"
        until(lambda: rows(b, point), [("old",)])
        assert rows(a, point) == [("old",)]  # chooses the timestamp, holds the index there
        b.execute(f"UPDATE {name} SET v = 'new' WHERE k = 1")
        until(lambda: rows(b, point), [("new",)])
        time.sleep(1.5)  # the index's since would have passed the transaction's time by now
        held = rows(b, since, [f"{name}_k"])[0][0]
        time.sleep(0.3)
        assert rows(b, since, [f"{name}_k"]) == [(held,)]  # it stopped there
        assert rows(a, point) == [("old",)]
        assert rows(a, f"SELECT k, v FROM {name} ORDER BY k") == [(1, "old"), (2, "two")]
        a.commit()
        until(lambda: rows(b, since, [f"{name}_k"])[0][0] > held, True)
        assert rows(a, point) == [("new",)]
        a.commit()
        # A session that goes away mid-transaction releases its hold too.
        with connect(server, autocommit=False) as c:
            assert rows(c, point) == [("new",)]
            time.sleep(1.2)
            held = rows(b, since, [f"{name}_k"])[0][0]
            time.sleep(0.3)
            assert rows(b, since, [f"{name}_k"]) == [(held,)]
        until(lambda: rows(b, since, [f"{name}_k"])[0][0] > held, True)


def test_asyncpg_transactions(server: ServerHandle, name: str) -> None:
    import asyncio

    import asyncpg

    async def main() -> None:
        async with server.asyncpg() as a, server.asyncpg() as b:
            await a.execute(f"CREATE TABLE {name} (k bigint, v text)")
            async with a.transaction():  # staged, applied together at COMMIT
                await a.executemany(f"INSERT INTO {name} VALUES ($1, $2)",
                                    [(1, "one"), (2, "two"), (3, "three")])
                assert await b.fetchval(f"SELECT count(*) FROM {name}") == 0
            assert await b.fetchval(f"SELECT count(*) FROM {name}") == 3
            with pytest.raises(RuntimeError):
                async with a.transaction():  # an exception rolls it back: nothing written
                    await a.execute(f"DELETE FROM {name} WHERE k = $1", 1)
                    raise RuntimeError("abandon")
            stmt = await a.prepare(f"SELECT v FROM {name} WHERE k = $1")
            async with a.transaction(readonly=True):
                assert await stmt.fetchval(1) == "one"
                await b.execute(f"UPDATE {name} SET v = 'uno' WHERE k = 1")
                assert await b.fetchval(f"SELECT v FROM {name} WHERE k = 1") == "uno"
                assert await stmt.fetchval(1) == "one"  # the transaction's timestamp
                with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
                    await a.execute(f"INSERT INTO {name} VALUES (9, 'nine')")
            assert await stmt.fetchval(1) == "uno"

    asyncio.run(main())


def test_read_only_characteristics(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        c.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        c.execute("BEGIN")
        with pytest.raises(errors.ReadOnlySqlTransaction):
            c.execute(f"INSERT INTO {name} VALUES (1)")
        c.execute("ROLLBACK")
        c.execute("BEGIN READ WRITE")  # an explicit mode wins over the session's
        c.execute(f"INSERT INTO {name} VALUES (1)")
        c.execute("COMMIT")
        c.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
        c.execute("BEGIN")
        c.execute("SET TRANSACTION READ ONLY")
        with pytest.raises(errors.ReadOnlySqlTransaction):
            c.execute(f"DELETE FROM {name}")
        c.execute("ROLLBACK")
        c.execute("BEGIN READ ONLY")
        c.execute(f"SELECT * FROM {name}")
        with pytest.raises(errors.ActiveSqlTransaction, match="before any query"):
            c.execute("SET TRANSACTION READ WRITE")
        c.execute("ROLLBACK")
        assert rows(c, f"SELECT k FROM {name}") == [(1,)]
    with psycopg.connect(server.dsn(), connect_timeout=10) as c:  # psycopg's own read_only
        c.read_only = True
        with pytest.raises(errors.ReadOnlySqlTransaction):
            c.execute(f"INSERT INTO {name} VALUES (2)")
