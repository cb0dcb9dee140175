"""A read at a time that is not readable gets `ReadBeforeSince` — naming the object, the time
and the since, promptly — on every path that can meet it, never the untyped `QueryFailed` /
`SubscribeEnded` the replica's failure arrives as (`twofold.api.queries`):

- a since that passes the read's time after the read's checks, before the replica reads the
  shard (memory/SQLite: an explicit `downgrade_since`; made deterministic by a hook at the
  controller's `peek` / `create_dataflow`, which is where the replica's read follows). Before:
  `QueryFailed: reading table 't' failed: shard 'table/t': cannot read at T, before since ...`
  (a peek of the table), `... dataflow 'peek-t2': shard 'table/t': cannot listen from T, before
  since ...` (a query over it; `copy-to-t2` for a copy-to), `SubscribeEnded: subscribe to table
  't' ended: dataflow 'subscribe-t2': ...`. A default time is chosen again instead (a query, a
  copy-to) or gets the typed error (a subscribe, whose failure comes with its first batch);
- on PostgreSQL, a given `as_of` at or after the shard's since but before the controller's own
  reader's (a listener keeps the shard's since lower): refused up front. Before: answered while
  that listener stayed, and failed untyped as above when it went meanwhile;
- on PostgreSQL, a later controller on the same storage taking the tables' hold over and
  moving it past a read of the first as the read reaches the controller (the same failures
  before, on PostgreSQL);
- the same over pgwire: `SELECT ... AS OF t` and `COPY (SELECT ... AS OF t) TO STDOUT` get
  SQLSTATE 22000 with the message, not XX000.

And a property over random histories of writes, explicit compactions and reads at random times
(some racing a compaction), of the table and of an index of it: each read either is exactly the
table at its time or raises `ReadBeforeSince` for a time that is before the since, never another
error, never a wait."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.api.test_read_holds import READS, ROWS, once, opened, parts, read, since_of

import twofold
from twofold.api.errors import ReadBeforeSince
from twofold.testing.profiles import examples
from twofold.testing.pytest_servers import Servers

pytestmark = pytest.mark.timeout(180)

PROMPT = 5.0
"""Seconds a refused read may take at most (the database's timeout is 10 s)."""


@contextlib.contextmanager
def racing(ctl: Any, hook: Callable[[], None]) -> Iterator[list[int]]:
    """Runs `hook` as a read reaches controller `ctl` (a peek, or a dataflow's creation:
    after every check of the API, right before the replica reads); yields the list of those
    calls seen."""
    create, peek = ctl.create_dataflow, ctl.peek
    calls: list[int] = []

    async def racing_create(desc: Any, **kw: Any) -> Any:
        calls.append(1)
        hook()
        return await create(desc, **kw)

    async def racing_peek(target: Any, **kw: Any) -> Any:
        calls.append(1)
        hook()
        return await peek(target, **kw)

    ctl.create_dataflow, ctl.peek = racing_create, racing_peek
    try:
        yield calls
    finally:
        del ctl.create_dataflow, ctl.peek


def refused(db: twofold.Database, kind: str, tmp_path: Path, as_of: int | None
            ) -> ReadBeforeSince:
    t0 = time.monotonic()
    with pytest.raises(ReadBeforeSince) as info:
        read(db, kind, tmp_path, as_of)
    assert time.monotonic() - t0 < PROMPT
    return info.value


@pytest.mark.parametrize("kind", READS)
@pytest.mark.parametrize("at_since", [False, True], ids=["now", "at-since"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_since_passing_the_time_after_the_checks_is_read_before_since(
        backend: str, kind: str, at_since: bool, servers: Servers, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(backend, servers, tmp_path, monkeypatch) as (db, _, advance):
        before = since_of(db)
        with racing(db.core.controller, once(advance)) as calls:
            if at_since:
                e = refused(db, kind, tmp_path, before)
                assert (e.name, e.time) == ("table 't'", before)
                assert e.since is not None and before < e.since <= since_of(db)
                assert f"at time {before}" in str(e) and f"from time {e.since} on" in str(e)
            elif kind == "subscribe":  # its failure comes with its first batch: typed
                e = refused(db, kind, tmp_path, None)
                assert e.since is not None and e.time < e.since <= since_of(db)
            else:  # a default time is chosen again, from the new since
                assert read(db, kind, tmp_path) == ROWS
            assert calls  # it did reach the controller: the replica failed it
        assert since_of(db) > before
        assert read(db, kind, tmp_path) == ROWS  # and the database reads on


@pytest.mark.parametrize("kind", READS)
@pytest.mark.parametrize("listener_goes", [False, True], ids=["stays", "goes"])
def test_an_as_of_before_the_controllers_reader_is_refused_up_front(
        kind: str, listener_goes: bool, servers: Servers, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with opened("postgres+file", servers, tmp_path, monkeypatch) as (db, _, advance):
        _, _, shard = parts(db)
        low = since_of(db)
        listener = shard.listen(low)  # another reader (a lease) keeps the shard's since here
        try:
            for _ in range(3):
                advance()  # the controller's reader moves on; the shard's since stays
            holds = db.core.holds
            assert holds is not None
            high = holds._readers[shard.shard_id].since.time
            assert high is not None and high > low == since_of(db)
            hook = once(listener.close) if listener_goes else (lambda: None)
            with racing(db.core.controller, hook) as calls:
                for as_of in (low, high - 1):
                    e = refused(db, kind, tmp_path, as_of)
                    assert (e.name, e.time, e.since) == ("table 't'", as_of, high)
                assert not calls  # refused before anything reached the controller
            assert read(db, kind, tmp_path, high) == ROWS  # the held since itself reads
        finally:
            listener.close()


@pytest.mark.parametrize("kind", READS)
def test_a_later_controller_moving_the_since_past_a_read_is_read_before_since(
        kind: str, servers: Servers, tmp_path: Path) -> None:
    """A second database on the same PostgreSQL storage takes the tables' hold over (fencing
    the first's reader, whose holds then protect nothing) and moves it past a read of the
    first as it reaches the controller: the replica's failure is `ReadBeforeSince`."""
    url = servers.storage_url("postgres+file", tmp_path)
    options: dict[str, Any] = {"runtimes": "one", "tick_interval": 0.005,
                               "retain_history": 0.0, "timeout": 10}
    with twofold.open(url, **options) as first:
        first.sql("CREATE TABLE t (a int, b int)")
        first.sql("INSERT INTO t VALUES " + ", ".join(map(str, ROWS)))
        core, ticker, _ = parts(first)
        assert core.holds is not None
        step = core.holds.step
        core.holds.step = dict  # type: ignore[method-assign]  # only the test moves it
        assert ticker.wait_for_ticks(2, timeout=10)
        ticker.tick()
        step()
        at = since_of(first)
        assert at > 0
        with twofold.open(url, **options) as second:
            other = second.core
            assert other.holds is not None and other.ticker is not None
            step2 = other.holds.step
            other.holds.step = dict  # type: ignore[method-assign]
            ticker2 = other.ticker

            def take_over() -> None:  # until the since is past `at`
                deadline = time.monotonic() + PROMPT
                while since_of(first) <= at and time.monotonic() < deadline:
                    ticker2.tick()
                    step2()
                    time.sleep(0.01)
                assert since_of(first) > at

            with racing(core.controller, once(take_over)) as calls:
                e = refused(first, kind, tmp_path, at)
            assert calls  # it reached the controller: the replica failed it
            assert (e.name, e.time) == ("table 't'", at) and e.since is not None
            assert at < e.since <= since_of(first)
            since = since_of(first)
            assert read(first, kind, tmp_path, since) == ROWS  # the first reads on


def test_over_pgwire_a_read_before_the_since_is_sqlstate_22000(tmp_path: Path) -> None:
    """The plain path (refused by the API's check): every read kind over the wire, a table's
    and a materialized view's (before its `as_of`), and an index lookup's, which reads the
    table instead when the index cannot answer at the time."""
    psycopg = pytest.importorskip("psycopg")
    from twofold.testing.pgwire import running_server

    with running_server(f"memory://{tmp_path.name}-plain") as server, \
            psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("CREATE TABLE t (a int, b int)")
        c.execute("INSERT INTO t VALUES (1, 10)")
        db = server.db
        shard = db.storage.table("t").shard
        t = db.now()
        c.execute(f"SELECT * FROM t AS OF {t}")  # complete at t
        shard.downgrade_since(t)
        c.execute("CREATE MATERIALIZED VIEW v AS SELECT a FROM t")
        c.execute("CREATE INDEX t_a ON t (a)")
        view = db.get("v")
        cases = [(f"SELECT * FROM t AS OF {t - 1}", "table 't'", t - 1, t),
                 (f"SELECT * FROM t WHERE b > 0 AS OF {t - 1}", "table 't'", t - 1, t),
                 (f"SELECT * FROM t WHERE a = 1 AS OF {t - 1}", "table 't'", t - 1, t),
                 (f"COPY (SELECT * FROM t AS OF {t - 1}) TO STDOUT", "table 't'", t - 1, t),
                 (f"COPY (SUBSCRIBE t AS OF {t - 1}) TO STDOUT", "table 't'", t - 1, t),
                 (f"SELECT * FROM v AS OF {view.as_of - 1}", "materialized view 'v'",
                  view.as_of - 1, view.as_of)]
        for sql, name, at, since in cases:
            t0 = time.monotonic()
            with pytest.raises(psycopg.Error) as info:
                if sql.startswith("COPY"):
                    with c.cursor().copy(sql) as cp:
                        list(cp)
                else:
                    c.execute(sql)
            assert time.monotonic() - t0 < PROMPT
            assert info.value.sqlstate == "22000", (sql, info.value)
            assert f"cannot read {name} at time {at}: it is readable from time {since} on" \
                in str(info.value), sql
        assert c.execute(f"SELECT a, b FROM t AS OF {t}").fetchall() == [(1, 10)]


def test_over_pgwire_a_read_at_a_passed_since_is_sqlstate_22000(tmp_path: Path) -> None:
    """`SELECT ... AS OF t` and `COPY (SELECT ... AS OF t) TO STDOUT` whose since passes t
    after the checks (memory: an explicit compaction as the read reaches the controller)."""
    psycopg = pytest.importorskip("psycopg")
    from twofold.testing.pgwire import running_server

    with running_server(f"memory://{tmp_path.name}-wire") as server, \
            psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("CREATE TABLE t (a int, b int)")
        c.execute("INSERT INTO t VALUES (1, 10)")
        db = server.db
        shard = db.storage.table("t").shard
        ctl = db.controller
        for sql in ("SELECT * FROM t AS OF {t}", "SELECT * FROM t WHERE a > 0 AS OF {t}",
                    "COPY (SELECT * FROM t AS OF {t}) TO STDOUT",
                    "COPY (SUBSCRIBE t AS OF {t}) TO STDOUT"):
            while (t := db.now()) < (shard.since.time or 0):
                time.sleep(0.01)  # past the last statement's compaction
            c.execute(f"SELECT * FROM t AS OF {t}")  # readable now (waits until complete)

            def compact(t: int = t) -> None:
                shard.downgrade_since(t + 1)

            with racing(ctl, compact), pytest.raises(psycopg.Error) as info:
                if sql.startswith("COPY"):
                    with c.cursor().copy(sql.format(t=t)) as cp:
                        list(cp)
                else:
                    c.execute(sql.format(t=t))
            assert info.value.sqlstate == "22000", (sql, info.value)
            assert f"cannot read table 't' at time {t}" in str(info.value), sql
            assert f"readable from time {t + 1} on" in str(info.value), sql
        assert c.execute("SELECT a, b FROM t").fetchall() == [(1, 10)]


def test_over_pgwire_an_as_of_before_the_controllers_reader_is_sqlstate_22000(
        servers: Servers, tmp_path: Path) -> None:
    psycopg = pytest.importorskip("psycopg")
    from twofold.testing.pgwire import running_server

    url = servers.storage_url("postgres+file", tmp_path)
    with running_server(url) as server, psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("CREATE TABLE t (a int, b int)")
        c.execute("INSERT INTO t VALUES (1, 10)")
        db = server.db
        shard = db.storage.table("t").shard
        holds = db.holds
        deadline = time.monotonic() + 30
        while shard.since.time in (None, 0) and time.monotonic() < deadline:
            time.sleep(0.05)  # the controller's first step registers its reader
        low = shard.since.time
        assert low is not None and low > 0
        listener = shard.listen(low)
        try:
            while holds._readers[shard.shard_id].since.time == low:
                assert time.monotonic() < deadline
                time.sleep(0.05)  # the controller's reader moves past low; the since stays
            high = holds._readers[shard.shard_id].since.time
            assert shard.since.time == low
            for sql in (f"SELECT * FROM t AS OF {low}", f"SELECT * FROM t WHERE a > 0 AS OF {low}",
                        f"COPY (SELECT * FROM t AS OF {low}) TO STDOUT"):
                with pytest.raises(psycopg.Error) as info:
                    if sql.startswith("COPY"):
                        with c.cursor().copy(sql) as cp:
                            list(cp)
                    else:
                        c.execute(sql)
                assert info.value.sqlstate == "22000", (sql, info.value)
                assert f"cannot read table 't' at time {low}" in str(info.value), sql
                assert high is not None and shard.since.time == low
        finally:
            listener.close()


def test_a_read_only_transaction_holds_its_tables_at_its_timestamp(
        servers: Servers, tmp_path: Path) -> None:
    """On PostgreSQL storage a transaction's later reads of a table, at the timestamp its first
    read chose, are answered however long it stays open (the server holds the tables' shards
    with it, as it holds the indexes), and the since moves on once it ends. Before: 22000
    "cannot read table 't' at time T: it is readable from time S on" once `retain_history`
    (1 s) had passed since the first read."""
    psycopg = pytest.importorskip("psycopg")
    from twofold.testing.pgwire import running_server

    url = servers.storage_url("postgres+file", tmp_path)
    with running_server(url) as server, psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("CREATE TABLE t (a int, b int)")
        c.execute("INSERT INTO t VALUES (1, 10)")
        shard = server.db.storage.table("t").shard
        deadline = time.monotonic() + 30
        while not shard.since.time:
            assert time.monotonic() < deadline
            time.sleep(0.05)  # the controller's reader is registered and moving
        c.execute("BEGIN READ ONLY")
        assert c.execute("SELECT a, b FROM t").fetchall() == [(1, 10)]
        ts = server.db.now()
        time.sleep(2.5)  # past retain_history (1 s) and more than one step of the reader
        with psycopg.connect(server.dsn(), autocommit=True) as other:
            other.execute("INSERT INTO t VALUES (2, 20)")  # after the timestamp: not seen
        assert c.execute("SELECT a, b FROM t").fetchall() == [(1, 10)]
        assert c.execute("SELECT a, b FROM t WHERE a > 0").fetchall() == [(1, 10)]
        since = shard.since.time
        assert since is not None and since <= ts
        c.execute("COMMIT")
        assert sorted(c.execute("SELECT a, b FROM t").fetchall()) == [(1, 10), (2, 20)]
        while shard.since.time is not None and shard.since.time <= ts:
            assert time.monotonic() < deadline + 30
            time.sleep(0.05)  # released: the since moves on


# -- any as_of reads exactly the table at that time, or is ReadBeforeSince ---------------------


def read_at(db: twofold.Database, kind: str, tmp_path: Path, as_of: int | None
            ) -> list[tuple[Any, ...]]:
    """`read`, but a subscribe's rows are its snapshot only (its first batch may carry later
    times too), and `index`: a read of the table's index `i`."""
    if kind == "index":  # a peek of an index of the table (held by the controller)
        return sorted(db.query(db.get("i"), as_of=as_of).rows)  # type: ignore[arg-type]
    if kind != "subscribe":
        return read(db, kind, tmp_path, as_of)
    with db.subscribe(db.get("t"), as_of=as_of) as sub:  # type: ignore[arg-type]
        batch = sub.next(timeout=20)
        return sorted(r for t, r, d in batch.updates if t <= sub.as_of for _ in range(d))


writes = st.lists(st.tuples(st.integers(1, 3), st.integers(-9, 9)), min_size=1, max_size=3)
steps = st.lists(st.one_of(
    st.tuples(st.just("write"), writes),
    st.tuples(st.just("compact"), st.integers(0, 8)),
    st.tuples(st.just("read"), st.sampled_from([*READS, "index"]), st.integers(-1, 8),
              st.sampled_from([-1, 0, 1]), st.one_of(st.none(), st.integers(0, 8))),
), min_size=2, max_size=10)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@settings(max_examples=examples(20), deadline=None, suppress_health_check=list(HealthCheck))
@given(history=steps)
def test_any_as_of_reads_the_snapshot_or_is_read_before_since(
        backend: str, servers: Servers, tmp_path_factory: pytest.TempPathFactory,
        history: list[tuple[Any, ...]]) -> None:
    """`read` steps: `(kind, which, offset, race)` reads at the `which`th write's time plus
    `offset` (-1: now, the default time), racing a compaction to the `race`th write's time
    (None: none) as the read reaches the controller."""
    tmp_path = tmp_path_factory.mktemp("prop")
    url = servers.storage_url(backend, tmp_path)
    with twofold.open(url, runtimes="one", tick_interval=0.005, timeout=10) as db:
        db.sql("CREATE TABLE t (a int, b int)")
        table = db.get("t")
        assert isinstance(table, twofold.Table)
        shard = parts(db)[2]
        index = db.create_index("i", table, key="a")
        ctl = db.core.controller
        assert ctl is not None
        times: list[int] = [db.now()]
        contents: list[list[tuple[int, int]]] = [[]]

        def at(t: int) -> list[tuple[int, int]]:
            i = max(i for i, ts in enumerate(times) if ts <= t) if t >= times[0] else 0
            return sorted(contents[i])

        def time_of(i: int) -> int:
            return times[min(i, len(times) - 1)]

        def index_past(t: int) -> None:
            """Wait until the index has read the table past `t`: an explicit compaction past
            what a live dataflow has read fails that dataflow (on memory/SQLite nothing
            holds since for it), which is not what this property is about."""
            deadline = time.monotonic() + PROMPT
            while ctl.frontier(index.id).contains(t):
                assert time.monotonic() < deadline
                time.sleep(0.005)

        for step in history:
            if step[0] == "write":
                times.append(table.insert(step[1]).timestamp)
                contents.append(contents[-1] + list(step[1]))
            elif step[0] == "compact":
                index_past(time_of(step[1]))
                shard.downgrade_since(time_of(step[1]))
            else:
                _, kind, which, offset, race = step
                as_of = None if which < 0 else max(0, time_of(which) + offset)
                target = None if race is None else time_of(race)
                if target is not None:
                    index_past(target)

                def compact(target: int | None = target) -> None:
                    if target is not None:
                        shard.downgrade_since(target)

                before = since_of(db) if shard.since.time else 0
                t0 = time.monotonic()
                with racing(db.core.controller, once(compact)):
                    try:
                        got = read_at(db, kind, tmp_path, as_of)
                    except ReadBeforeSince as e:
                        event(f"{kind}: ReadBeforeSince")
                        if kind == "index":  # before the index's own since
                            since = ctl.since(index.id).time
                            assert since is not None and e.since is not None
                            assert e.name == "index 'i'" and as_of == e.time < e.since <= since
                            continue
                        since = shard.since.time
                        assert since is not None and e.since is not None
                        assert e.name == "table 't'" and e.time < e.since <= since
                        assert as_of is None or e.time == as_of
                        # refused only for a time the since is (now) past
                        assert (as_of is None and kind == "subscribe") or (
                            as_of is not None and (as_of < before or (
                                target is not None and as_of < target)))
                    else:
                        want = at(as_of) if as_of is not None else sorted(contents[-1])
                        assert got == want, (as_of, kind)
                        assert as_of is None or kind == "index" or as_of >= max(
                            before, target or 0)
                        event(f"{kind}: read")
                assert time.monotonic() - t0 < PROMPT
