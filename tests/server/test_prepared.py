"""Prepared statements keep their parsed and planned form (`twofold.sql.prepared`) and never
answer from a stale one: the same answers as an unprepared `db.sql` for any parameters, and
after CREATE INDEX, DROP INDEX, DROP TABLE and a new table of the same name — over psycopg
prepared statements and in process."""

from __future__ import annotations

import asyncio
import math
import struct
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import errors
from tests.server.wire import Raw, msg, query

from twofold.server import extended
from twofold.sql import prepared
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples


def connect(server: ServerHandle) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10)


def _get(c: psycopg.Connection, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    return c.execute(sql, params, prepare=True).fetchall()


def test_prepared_statement_follows_ddl(server: ServerHandle, name: str) -> None:
    q = f"SELECT v FROM {name} WHERE k = %s"
    with connect(server) as c, connect(server) as ddl:
        ddl.execute(f"CREATE TABLE {name} (k bigint, v text)")
        ddl.execute(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')")
        for _ in range(3):
            assert _get(c, q, [1]) == [("a",)]
        ddl.execute(f"CREATE INDEX {name}_k ON {name} (k)")  # the plan becomes a lookup
        assert _get(c, q, [2]) == [("b",)]
        ddl.execute(f"INSERT INTO {name} VALUES (3, 'c'), (2, 'b2')")
        assert sorted(_get(c, q, [2])) == [("b",), ("b2",)]
        assert _get(c, q, [3]) == [("c",)]
        ddl.execute(f"DROP INDEX {name}_k")
        assert _get(c, q, [3]) == [("c",)]
        ddl.execute(f"DROP TABLE {name}")
        with pytest.raises(errors.UndefinedTable):
            _get(c, q, [1])
        ddl.execute(f"CREATE TABLE {name} (k bigint, v text)")
        ddl.execute(f"INSERT INTO {name} VALUES (1, 'new')")
        assert _get(c, q, [1]) == [("new",)]
        assert _get(c, q, [2]) == []
        ddl.execute(f"CREATE INDEX {name}_k2 ON {name} (k)")
        assert _get(c, q, [1]) == [("new",)]
        ddl.execute(f"DROP TABLE {name} CASCADE")
        ddl.execute(f"CREATE TABLE {name} (k bigint, v double precision)")
        ddl.execute(f"INSERT INTO {name} VALUES (1, 1.5)")
        with pytest.raises(errors.FeatureNotSupported, match="must not change result type"):
            _get(c, q, [1])  # another result type: refused, as PostgreSQL does
        assert c.execute(q, [1], prepare=False).fetchall() == [(1.5,)]


def test_unnamed_statements_share_the_plan(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint, v text)")
        c.execute(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')")
        c.execute(f"CREATE INDEX ON {name} (k)")
        q = f"SELECT v FROM {name} WHERE k = %s"
        assert c.execute(q, [1]).fetchall() == [("a",)]  # unnamed Parse each time
        assert c.execute(q, [2]).fetchall() == [("b",)]
        stmt = prepared.statement(server.db, f"SELECT v FROM {name} WHERE k = $1")
        (template,) = stmt._plans.values()
        assert template is not None and template.lookup is not None


def test_second_execution_neither_parses_nor_plans(server: ServerHandle, name: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import twofold.sql as sql_mod
    import twofold.sql.parser as parser_mod

    db = server.db
    server.call(db.sql(f"CREATE TABLE {name} (k bigint, v text)"))
    server.call(db.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')"))
    server.call(db.sql(f"CREATE INDEX ON {name} (k)"))
    stmt = prepared.PreparedStatement(db, f"SELECT v FROM {name} WHERE k = $1")
    assert server.call(stmt.execute([1])).rows == [("a",)]
    calls = {"parse": 0, "plan": 0}
    real_parse, real_compile = parser_mod.parse, sql_mod.compile_query

    def parse(text: str) -> Any:
        calls["parse"] += 1
        return real_parse(text)

    def compile_query(*args: Any, **kw: Any) -> Any:
        calls["plan"] += 1
        return real_compile(*args, **kw)

    monkeypatch.setattr(parser_mod, "parse", parse)
    monkeypatch.setattr(sql_mod, "compile_query", compile_query)
    for k, v in [(2, "b"), (1, "a"), (3, None)]:
        assert server.call(stmt.execute([k])).rows == ([] if v is None else [(v,)])
    assert calls == {"parse": 0, "plan": 0}
    server.call(db.sql(f"INSERT INTO {name} VALUES (3, 'c')"))  # a write is no DDL
    assert server.call(stmt.execute([3])).rows == [("c",)]
    assert calls == {"parse": 0, "plan": 0}
    server.call(db.sql(f"CREATE TABLE {name}_other (x bigint)"))  # any DDL: planned again
    assert server.call(stmt.execute([3])).rows == [("c",)]
    assert calls["plan"] > 0


# -- the same answers as unprepared db.sql, for any parameters ---------------------------------

_QUERIES = [
    ("SELECT k, f, s FROM {t} WHERE k = $1", ["int"]),
    ("SELECT k, s FROM {t} WHERE f = $1", ["float"]),
    ("SELECT s FROM {t} WHERE k = $1 AND f > $2", ["int", "float"]),
    ("SELECT k FROM {t} WHERE s = $1", ["str"]),
    ("SELECT k, -$1 FROM {t} WHERE k = $2", ["int", "int"]),
    ("SELECT k + $1, f * $2 FROM {t} WHERE k = $3", ["int", "float", "int"]),
    ("SELECT k FROM {t} WHERE k = $1 ORDER BY f LIMIT $2", ["int", "limit"]),
    ("SELECT k FROM {t} ORDER BY k LIMIT $1 OFFSET $2", ["limit", "limit"]),
    ("SELECT count(*), sum(f) FROM {t} WHERE k > $1", ["int"]),
    ("SELECT k FROM {t} WHERE k IN ($1, $2) ORDER BY k", ["int", "int"]),
    ("SELECT CASE WHEN $1 THEN k ELSE -k END FROM {t} WHERE k = $2", ["bool", "int"]),
    ("SELECT k, $1 FROM {t} WHERE k = $2", ["any", "int"]),
    ("SELECT $1, $2", ["any", "any"]),
    ("VALUES ($1, 1)", ["int"]),
    ("SELECT k FROM {t} WHERE k = $1 UNION SELECT k FROM {t} WHERE k = $2", ["int", "int"]),
    ("SELECT k FROM {t} WHERE f = $1 AND k = $2", ["float", "int"]),
    ("SELECT k FROM {t} WHERE s = $1 OR k = $2 ORDER BY k", ["str", "int"]),
]

_ints = st.one_of(st.integers(-3, 12), st.sampled_from([0, -1, 2**63 - 1, -(2**63), 2**63]))
_floats = st.one_of(st.sampled_from([0.0, -0.0, 0.5, 1.5, -2.5, math.inf, -math.inf, math.nan]),
                    st.floats(-5, 5, width=32))
_strs = st.sampled_from(["a", "b", "", "v3", "\x00twofold-a0"])
_any = st.one_of(_ints, _floats, _strs, st.booleans(), st.binary(max_size=3))


def _param(kind: str) -> st.SearchStrategy[Any]:
    base = {"int": _ints, "float": st.one_of(_floats, _ints), "str": _strs,
            "bool": st.booleans(), "limit": st.integers(0, 4), "any": _any}[kind]
    return st.one_of(st.none(), base) if kind != "limit" else base


@st.composite
def _case(draw: st.DrawFn) -> tuple[str, list[list[Any]]]:
    text, kinds = draw(st.sampled_from(_QUERIES))
    runs = draw(st.lists(st.tuples(*[_param(k) for k in kinds]), min_size=1, max_size=4))
    return text, [list(r) for r in runs]


def _outcome(server: ServerHandle, aw: Any) -> Any:
    try:
        result = server.call(aw)
    except Exception as e:
        return ("error", type(e).__name__)
    rows = [tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in r)
            for r in result.rows]
    return sorted(rows, key=repr), list(result.schema.names), \
        [t.scalar for t in result.schema.types]


@pytest.fixture(scope="module")
def table(server: ServerHandle) -> str:
    db = server.db
    t = "prepared_diff"
    server.call(db.sql(f"CREATE TABLE {t} (k bigint, f double precision, s text)"))
    rows = [(k, k / 2 if k % 3 else None, f"v{k}" if k % 4 else None) for k in range(-2, 10)]
    rows += [(3, 1.5, "a"), (0, 0.0, "b"), (5, math.inf, ""), (7, math.nan, "a")]
    db.get(t).insert(rows)  # off the loop, as COPY does
    server.call(db.sql(f"CREATE INDEX {t}_k ON {t} (k)"))
    server.call(db.sql(f"CREATE INDEX {t}_f ON {t} (f)"))
    server.call(db.sql(f"CREATE INDEX {t}_fk ON {t} (f, k)"))
    return t


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=_case())
def test_prepared_equals_unprepared(server: ServerHandle, table: str,
                                    case: tuple[str, list[list[Any]]]) -> None:
    text, runs = case
    sql = text.format(t=table)
    stmt = prepared.PreparedStatement(server.db, sql)
    for params in runs:  # one statement, executed again with other values and types
        want = _outcome(server, server.db.sql(sql, params))
        got = _outcome(server, stmt.execute(params))
        assert got == want, (sql, params)


def test_concurrent_lookups_share_a_peek(server: ServerHandle, name: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    db = server.db
    server.call(db.sql(f"CREATE TABLE {name} (k bigint, v text, f double precision)"))
    server.call(db.sql(f"INSERT INTO {name} VALUES (1, 'a', 0.5), (1, 'a', 0.5), (2, 'b', NULL), "
                       "(3, NULL, 1.5), (1, 'c', 2.5)"))
    server.call(db.sql(f"CREATE INDEX ON {name} (k)"))
    stmt = prepared.PreparedStatement(db, f"SELECT v, k FROM {name} WHERE k = $1")
    assert server.call(stmt.execute([2])).rows == [("b", 2)]
    want = {1: [("a", 1), ("a", 1), ("c", 1)], 2: [("b", 2)], 3: [(None, 3)], 4: []}
    peeks = []
    real, real_now = db._ctl.peek, db._ctl.peek_now

    async def peek(*args: Any, **kw: Any) -> Any:
        peeks.append(kw.get("literal_constraints"))
        return await real(*args, **kw)

    def peek_now(*args: Any, **kw: Any) -> Any:  # answered at once: counted as one peek
        got = real_now(*args, **kw)
        if got is not None:
            peeks.append(kw.get("literal_constraints"))
        return got

    monkeypatch.setattr(db._ctl, "peek", peek)
    monkeypatch.setattr(db._ctl, "peek_now", peek_now)
    keys = [1, 2, 3, 4, 1, 2] * 5

    async def together() -> list[Any]:
        return list(await asyncio.gather(*[stmt.execute([k]) for k in keys]))

    for k, result in zip(keys, server.call(together()), strict=True):
        assert sorted(result.rows, key=repr) == want[k]
        assert list(result.schema.names) == ["v", "k"]
    assert 1 <= len(peeks) < len(keys)  # batches of distinct keys, not a peek per execution
    assert all(len(c) == len({tuple(x) for x in c}) for c in peeks)

    async def write_then_read() -> list[Any]:  # each sees the write made before it
        await db.sql(f"INSERT INTO {name} VALUES (4, 'd', 0.0)")
        return list(await asyncio.gather(*[stmt.execute([4]) for _ in range(8)]))

    assert all(r.rows == [("d", 4)] for r in server.call(write_then_read()))


def test_pipelined_replies_go_out_in_one_write(server: ServerHandle, name: str) -> None:
    before = set(server.server._live)
    raw = Raw(server.host, server.port)
    raw.login()
    (conn,) = set(server.server._live) - before
    writes: list[int] = []
    real = conn.writer.write

    def write(data: bytes) -> None:
        writes.append(len(data))
        real(data)

    async def patch() -> None:
        conn.writer.write = write

    server.call(patch())
    stmt = msg(b"P", b"s\0SELECT $1::bigint + 1\0" + b"\0\0")
    execs = b"".join(msg(b"B", b"\0s\0" + b"\0\0" + b"\0\1" + len(str(i)).to_bytes(4, "big")
                         + str(i).encode() + b"\0\0") + msg(b"E", b"\0\0\0\0\0")
                     for i in range(20))
    raw.send(stmt + execs + msg(b"S") + query("SELECT 2"))
    got = raw.until(b"Z") + raw.until(b"Z")
    rows = [body for kind, body in got if kind == b"D"]
    assert len(rows) == 21 and rows[0].endswith(b"1") and rows[-1].endswith(b"2")
    assert len(writes) <= 3, writes  # not one per message (there are 43 of them)
    raw.sock.close()


def _kept_lookup_follows_ddl(url: str, run_ddl: Any) -> None:
    """A kept lookup on a server over `url` answers from the table that `run_ddl(url,
    *statements)` — DDL committed by another database on the same storage — re-created, and
    is 42P01 once it dropped it."""
    from twofold.server import fastpath
    from twofold.testing.pgwire import running_server

    real, hits = fastpath.answer, [0]

    def counted(s: Any, data: bytes, at: int) -> Any:
        got = real(s, data, at)
        hits[0] += got is not None
        return got

    fastpath.answer = counted  # type: ignore[assignment]
    try:
        with running_server(storage=url) as server, connect(server) as c:
            c.execute("CREATE TABLE kv (k bigint, v text)")
            c.execute("INSERT INTO kv VALUES (1, 'old')")
            c.execute("CREATE INDEX kv_k ON kv (k)")
            q = "SELECT v, k FROM kv WHERE k = %s"
            for _ in range(4):
                assert _get(c, q, [1]) == [("old", 1)]
            assert hits[0] > 0  # kept: answered from the request's bytes (`fastpath`)
            run_ddl(url, "DROP TABLE kv CASCADE", "CREATE TABLE kv (k bigint, v text)",
                    "INSERT INTO kv VALUES (1, 'new')", "CREATE INDEX kv_k ON kv (k)")
            for _ in range(3):  # the first plans again; the others are kept again
                assert _get(c, q, [1]) == [("new", 1)]
            _after_ddl(c, q, url, run_ddl)
    finally:
        fastpath.answer = real  # type: ignore[assignment]


def _after_ddl(c: psycopg.Connection, q: str, url: str, run_ddl: Any) -> None:
    assert c.execute(q, [1]).fetchall() == [("new", 1)]  # the unnamed statement too
    run_ddl(url, "DROP TABLE kv CASCADE")
    with pytest.raises(errors.UndefinedTable):
        _get(c, q, [1])


def _in_this_process(url: str, *statements: str) -> None:
    import twofold

    with twofold.open(url) as other:
        for stmt in statements:
            other.sql(stmt)


def test_another_process_ddl_is_seen() -> None:
    """DDL committed by another database on the same storage (as another process would) is
    seen by the next execution of a kept lookup, batched or not."""
    _kept_lookup_follows_ddl("memory://prepared-other-process", _in_this_process)


def test_inferred_parameter_types_follow_ddl(server: ServerHandle, name: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = extended.infer_param_types

    def infer(db: Any, sql: str, given: tuple[int, ...]) -> tuple[int, ...]:
        calls.append(sql)
        return real(db, sql, given)

    monkeypatch.setattr(extended, "infer_param_types", infer)
    raw = Raw(server.host, server.port)
    raw.login()
    sql = f"SELECT * FROM {name} WHERE k = $1".encode()

    def param_oids() -> tuple[int, ...]:
        raw.send(msg(b"P", b"\0" + sql + b"\0\0\0") + msg(b"D", b"S\0") + msg(b"S"))
        (desc,) = [body for kind, body in raw.until(b"Z") if kind == b"t"]
        (n,) = struct.unpack_from("!h", desc)
        return struct.unpack_from(f"!{n}i", desc, 2)

    with connect(server) as c:
        c.execute(f"CREATE TABLE {name} (k bigint)")
        assert param_oids() == (20,)
        assert param_oids() == (20,)  # the unnamed statement parsed again: types kept
        assert len(calls) == 1
        c.execute(f"DROP TABLE {name}")
        c.execute(f"CREATE TABLE {name} (k text)")
        assert param_oids() == (25,)
    raw.sock.close()


def test_kept_statements_do_not_keep_their_database_alive() -> None:
    import gc
    import weakref

    import twofold

    async def use() -> weakref.ref[Any]:
        async with twofold.open_async("memory://prepared-lifetime") as db:
            await db.sql("CREATE TABLE t (k bigint)")
            await db.sql("CREATE INDEX ON t (k)")
            assert (await prepared.statement(db, "SELECT k FROM t WHERE k = $1")
                    .execute([1])).rows == []
            return weakref.ref(db)

    ref = asyncio.run(use())
    gc.collect()
    assert ref() is None


def test_a_cancelled_batch_cancels_its_waiters(server: ServerHandle, name: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    db = server.db
    server.call(db.sql(f"CREATE TABLE {name} (k bigint, v text)"))
    server.call(db.sql(f"CREATE INDEX ON {name} (k)"))
    stmt = prepared.PreparedStatement(db, f"SELECT k, v FROM {name} WHERE k = $1")
    assert server.call(stmt.execute([1])).rows == []

    async def stuck(*args: Any, **kw: Any) -> Any:
        await asyncio.Event().wait()

    monkeypatch.setattr(db._ctl, "peek", stuck)
    monkeypatch.setattr(db._ctl, "peek_now", lambda *args, **kw: None)  # never ready at once

    async def cancel_while_waiting() -> list[bool]:
        runs = [asyncio.ensure_future(stmt.execute([k])) for k in (1, 2, 3)]
        await asyncio.sleep(0.05)
        (template,) = stmt._plans.values()
        assert template is not None and template.batch is not None
        assert template.batch.task is not None
        template.batch.task.cancel()
        done, _ = await asyncio.wait(runs, timeout=5)
        return [r in done and r.cancelled() for r in runs]

    assert server.call(cancel_while_waiting()) == [True, True, True]


def test_asyncpg_prepares_again_when_the_result_type_changes(server: ServerHandle,
                                                            name: str) -> None:
    import asyncpg

    async def run() -> None:
        c = await asyncpg.connect(host=server.host, port=server.port, user="twofold",
                                  database="twofold")
        try:
            await c.execute(f"CREATE TABLE {name} (k bigint, v text)")
            await c.execute(f"INSERT INTO {name} VALUES (1, 'a')")
            q = f"SELECT v FROM {name} WHERE k = $1"
            assert [tuple(r) for r in await c.fetch(q, 1)] == [("a",)]
            stmt = await c.prepare(q)
            await c.execute(f"DROP TABLE {name}")
            await c.execute(f"CREATE TABLE {name} (k bigint, v double precision)")
            await c.execute(f"INSERT INTO {name} VALUES (1, 1.5)")
            # its statement cache: told 0A000, asyncpg prepares again and gets the new type
            assert [tuple(r) for r in await c.fetch(q, 1)] == [(1.5,)]
            with pytest.raises(asyncpg.exceptions.InvalidCachedStatementError):
                await stmt.fetch(1)  # decoded as text, the float would be misread
        finally:
            await c.close()

    asyncio.run(run())


_OTHER_PROCESS_DDL = """
import sys, twofold
with twofold.open(sys.argv[1]) as db:
    for stmt in sys.argv[2:]:
        db.sql(stmt)
"""


def _in_another_process(url: str, *statements: str) -> None:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-c", _OTHER_PROCESS_DDL, url, *statements], check=True,
                   timeout=120)


def test_another_process_ddl_on_sqlite_is_seen(tmp_path: Any) -> None:
    """DDL committed by another process on the same SQLite file — which this process's
    notifier never hears of; SQLite's data_version does — is seen by the next execution of
    a kept lookup, batched or not."""
    _kept_lookup_follows_ddl(f"sqlite:///{tmp_path}/db.sqlite", _in_another_process)


@pytest.mark.parametrize("storage", ["memory", "sqlite"])
def test_an_unchanged_catalog_is_not_read_again(tmp_path: Any, storage: str) -> None:
    """`refresh_catalog` reads the catalog only when a change may have been committed since
    its last read: in this process (the notifier) or, on SQLite, by another connection."""
    import twofold

    url = ("memory://prepared-unchanged-catalog" if storage == "memory"
           else f"sqlite:///{tmp_path}/db.sqlite")
    with twofold.open(url) as db:
        adb = db.core
        reads = 0
        real = adb._refresh

        def counted() -> Any:
            nonlocal reads
            reads += 1
            return real()

        adb._refresh = counted
        prepared.refresh_catalog(adb)
        assert reads == 1
        for _ in range(5):
            prepared.refresh_catalog(adb)
        if storage == "memory":  # the ticker's commits move SQLite's data_version
            assert reads == 1
        before = reads
        version = prepared.catalog_version(adb)
        with twofold.open(url) as other:  # another database in this process: the notifier
            other.sql("CREATE TABLE t (k bigint)")
        prepared.refresh_catalog(adb)
        assert reads == before + 1
        assert prepared.catalog_version(adb) != version
