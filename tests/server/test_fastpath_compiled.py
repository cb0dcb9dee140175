"""The kept lookup compiled per template (`sql/prepared._NowLookup`, `rows_now`) and its
change check (`_CatalogWatch` over SQLite's WAL-index header): answers what the session's
path answers — read-your-writes across connections, DROP INDEX / DROP TABLE between two
executions of a kept statement, another process's commits seen — and reads at the time
`db._choose_time` gives."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twofold.server import fastpath
from twofold.sql import prepared
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples


class Counted:
    """The fast path off for the sessions whose backend pid is in `off`; counts what it
    answered."""

    def __init__(self) -> None:
        self.off: set[int] = set()
        self.hits = 0
        self.real = fastpath.answer

    def answer(self, s: Any, data: bytes, at: int) -> tuple[bytes, int] | None:
        if s.pid in self.off:
            return None
        got = self.real(s, data, at)
        self.hits += got is not None
        return got


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counted]:
    c = Counted()
    monkeypatch.setattr(fastpath, "answer", c.answer)
    yield c


def _outcome(c: psycopg.Connection, sql: str, params: list[Any]) -> Any:
    try:
        return ("rows", c.execute(sql, params, prepare=True).fetchall())
    except psycopg.Error as e:
        return ("error", e.sqlstate, str(e).split("\n")[0])


def test_reads_its_writes_across_connections(server: ServerHandle, name: str,
                                             counted: Counted) -> None:
    """An INSERT acknowledged on one connection is in the next kept lookup on another: at
    once (the fast path declines while the index has not reached the write: its read time
    is never before the database's latest write, and the published arrangement is read only
    where it is complete), and once the index caught up, answered by the fast path."""
    with psycopg.connect(server.dsn(), autocommit=True) as w, \
            psycopg.connect(server.dsn(), autocommit=True) as r:
        w.execute(f"CREATE TABLE {name} (k bigint, v double precision)")
        w.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        q = f"SELECT k, v FROM {name} WHERE k = %s"
        for _ in range(3):
            assert r.execute(q, [0], prepare=True).fetchall() == []
        before = counted.hits
        for k in range(20):
            w.execute(f"INSERT INTO {name} VALUES (%s, %s)", [k % 5, k * 0.5])
            want = sorted((k % 5, j * 0.5) for j in range(k + 1) if j % 5 == k % 5)
            for wait in (0.0, 0.0, 0.03, 0.0):
                time.sleep(wait)
                assert sorted(r.execute(q, [k % 5], prepare=True).fetchall()) == want
        assert counted.hits - before >= 20  # the later reads: answered at once


@pytest.mark.parametrize("ddl", ["DROP INDEX {t}_k", "DROP TABLE {t} CASCADE",
                                 "DROP INDEX {t}_k; CREATE INDEX {t}_k ON {t} (k)",
                                 "DROP TABLE {t} CASCADE; CREATE TABLE {t} (k bigint, v text)"])
def test_ddl_between_executions_gives_the_session_paths_answer(
        server: ServerHandle, name: str, counted: Counted, ddl: str) -> None:
    """A kept statement executed again after its index or table was dropped (or dropped and
    made again) declines the fast path: the same rows, or the same error, as a connection
    without it."""
    dsn = server.dsn()
    with psycopg.connect(dsn, autocommit=True) as fast, \
            psycopg.connect(dsn, autocommit=True) as slow:
        counted.off.add(slow.info.backend_pid)
        fast.execute(f"CREATE TABLE {name} (k bigint, v text)")
        fast.execute(f"INSERT INTO {name} VALUES (1, 'a'), (1, NULL), (2, 'b')")
        fast.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        q = f"SELECT v, k FROM {name} WHERE k = %s"
        for c in (fast, slow):
            for _ in range(3):
                _outcome(c, q, [1])
        hits = counted.hits
        assert _outcome(fast, q, [1]) == _outcome(slow, q, [1])
        assert counted.hits > hits  # kept: the fast path answered
        for stmt in ddl.format(t=name).split("; "):
            fast.execute(stmt)
        for key in (1, 2, 3):
            got = _outcome(fast, q, [key])
            assert got == _outcome(slow, q, [key]), key
            assert got == _outcome(fast, q, [key])  # and again, kept or not
        if "CREATE" not in ddl or "INDEX" not in ddl:
            fast.execute(f"DROP TABLE IF EXISTS {name} CASCADE")


@settings(max_examples=examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(st.integers(0, 3), min_size=1, max_size=6))
def test_index_time_is_choose_time(server: ServerHandle, writes: list[int]) -> None:
    """The kept lookup's read time (`Controller.peek_now_latest`, as `rows_now` calls it) is
    `db._choose_time(index, None)` after every write: the index's latest complete time, never
    before the latest write — also right after a write the index has not reached yet (the
    read then declines, waiting being the session path's)."""
    db = server.db
    if db._catalog.get("itime") is None:
        server.call(db.sql("CREATE TABLE itime (k bigint)"))
        server.call(db.sql("CREATE INDEX itime_k ON itime (k)"))
    idx = db.get("itime_k")
    ps = prepared.statement(db, "SELECT k FROM itime WHERE k = $1")
    server.call(ps.execute([1]))  # planned: the kept lookup
    ctl = db._ctl
    asked: list[int] = []

    async def both() -> tuple[list[int], int, int | None]:
        del asked[:]
        real = dict(ctl._local_reads)

        def spy(read: Any) -> Any:
            def read_at(gid: Any, t: int, *rest: Any) -> Any:
                asked.append(t)
                return read(gid, t, *rest)
            return read_at

        ctl._local_reads = {r: spy(f) for r, f in real.items()}
        try:
            got = ps.rows_now([1])
        finally:
            ctl._local_reads = real
        return list(asked), db._choose_time(idx, None), None if got is None else got[1]

    for n in writes:
        for _ in range(n):
            server.call(db.sql("INSERT INTO itime VALUES (1)"))
        times, want, answered = server.call(both())
        assert times == [want]
        assert answered in (None, want)


def _commit_elsewhere(path: str) -> None:
    subprocess.run([sys.executable, "-c",
                    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    "c.execute('INSERT INTO t VALUES (2)'); c.commit()", path],
                   check=True, timeout=60)


def test_the_watch_on_sqlite_sees_another_process_commit(tmp_path: Any) -> None:
    """The watch's probe stays while nothing commits and moves at a commit by another
    process (what tells the watch to read the catalog)."""
    import twofold

    with twofold.open(f"sqlite:///{tmp_path}/db.sqlite") as db:
        adb = db.core
        prepared.refresh_catalog(adb)
        watch = adb.__dict__[prepared._WATCH_ATTR]
        first = watch._probe()
        assert watch._probe() == first
        path = str(tmp_path / "db.sqlite")
        subprocess.run([sys.executable, "-c",
                        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                        "c.execute('CREATE TABLE IF NOT EXISTS elsewhere (x)'); "
                        "c.execute('INSERT INTO elsewhere VALUES (2)'); c.commit()", path],
                       check=True, timeout=60)
        assert watch._probe() != first


def _held_locks(path: str) -> list[str]:
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        return [line for line in f if f":{ino} " in line and f" {os.getpid()} " in line]


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="reads Linux's /proc/locks")
def test_the_watch_keeps_sqlites_locks_on_the_wal_index(tmp_path: Any) -> None:
    """Watching the catalog never opens and closes the database's files itself: closing any
    descriptor of the `-shm` file drops every POSIX lock this process holds on it, SQLite's
    shared lock that tells other processes the WAL index is in use included; another
    process's connection then reinitialises it under this one (a bus error in a test run
    when a `-shm` mapping did this)."""
    import twofold

    with twofold.open(f"sqlite:///{tmp_path}/db.sqlite") as db:
        db.sql("CREATE TABLE t (k bigint)")
        adb = db.core
        shm = str(tmp_path / "db.sqlite-shm")
        adb._storage.backend.data_version()  # type: ignore[attr-defined]  # opens this thread's connection
        assert _held_locks(shm), "SQLite holds its lock on the WAL index while open"
        for _ in range(3):
            prepared.refresh_catalog(adb)
        assert _held_locks(shm), "the catalog watch dropped SQLite's lock on the WAL index"


def test_kept_lookups_are_answered_after_the_loop_turns(server: ServerHandle, name: str,
                                                        counted: Counted) -> None:
    """Many executions of one kept statement: every one after planning is the fast path's
    (the compiled lookup stays valid while nothing changes)."""
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v text)")
        c.execute(f"INSERT INTO {name} VALUES (1, 'x')")
        c.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        q = f"SELECT v FROM {name} WHERE k = %s"
        for _ in range(3):
            c.execute(q, [1], prepare=True).fetchall()
        asyncio.run(asyncio.sleep(0))
        before = counted.hits
        for _ in range(50):
            assert c.execute(q, [1], prepare=True).fetchall() == [("x",)]
        assert counted.hits - before == 50


@pytest.mark.parametrize("new_type", ["integer", "bigint", "real", "double precision"])
def test_a_table_made_again_with_a_declared_type_gives_the_session_paths_answer(
        server: ServerHandle, name: str, counted: Counted, new_type: str) -> None:
    """A kept statement over a bigint/float8 table that is dropped and made again with a
    column of a declared type (int4, float4: the same engine scalar, another wire type) is
    answered as a connection without the fast path answers it — `0A000` where the client was
    told other columns — never with the old wire type's bytes."""
    dsn = server.dsn()
    with psycopg.connect(dsn, autocommit=True) as fast, \
            psycopg.connect(dsn, autocommit=True) as slow, \
            psycopg.connect(dsn, autocommit=True) as ddl:  # psycopg forgets its own
        # prepared statements at a DDL on their connection: another one runs it
        counted.off.add(slow.info.backend_pid)
        ddl.execute(f"CREATE TABLE {name} (k bigint, v double precision)")
        ddl.execute(f"INSERT INTO {name} VALUES (1, 1.5)")
        ddl.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        q = f"SELECT k, v FROM {name} WHERE k = %s"
        for c in (fast, slow):
            for _ in range(3):
                assert _outcome(c, q, [1]) == ("rows", [(1, 1.5)])
        ddl.execute(f"DROP TABLE {name} CASCADE")
        kind = new_type if new_type in ("integer", "bigint") else "bigint"
        vtype = new_type if new_type in ("real", "double precision") else "double precision"
        ddl.execute(f"CREATE TABLE {name} (k {kind}, v {vtype})")
        ddl.execute(f"INSERT INTO {name} VALUES (1, 2.5)")
        ddl.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        for _ in range(4):
            assert _outcome(fast, q, [1]) == _outcome(slow, q, [1])
        ddl.execute(f"DROP TABLE {name} CASCADE")
