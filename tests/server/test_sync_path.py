"""The synchronous read path of a kept point lookup: `Controller.peek_now` (a replica in this
process answers from its published arrangement, nothing sent), `PreparedStatement.execute_now`
and the server handling Bind/Describe/Execute/Sync with no task — the same answers as the
awaited path, at a valid time, and only when it cannot differ from it."""

from __future__ import annotations

import struct
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.server.wire import Raw, msg, query

from twofold.server import run as run_module
from twofold.sql import prepared
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples


def connect(server: ServerHandle) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10)


@pytest.fixture(scope="module")
def kv(server: ServerHandle) -> str:
    db = server.db
    server.call(db.sql("CREATE TABLE sync_kv (k bigint, v double precision, s text)"))
    rows = [(k % 40, k / 4 if k % 5 else None, f"s{k}" if k % 7 else None) for k in range(120)]
    db.get("sync_kv").insert(rows)  # off the loop
    server.call(db.sql("CREATE INDEX sync_kv_k ON sync_kv (k)"))
    server.call(db.sql("CREATE INDEX sync_kv_ks ON sync_kv (k, s)"))
    return "sync_kv"


def test_peek_now_equals_peek(server: ServerHandle, kv: str) -> None:
    db = server.db
    idx = db.get("sync_kv_k")

    async def both(keys: list[list[Any]]) -> tuple[Any, Any, int]:
        t = db._choose_time(idx, None)
        await db._ctl.peek(idx.id, timestamp=t, literal_constraints=keys)  # published there
        now = db._ctl.peek_now(idx.id, timestamp=t, literal_constraints=keys)
        awaited = await db._ctl.peek(idx.id, timestamp=t, literal_constraints=keys)
        return now, awaited, t

    for keys in ([[3]], [[1], [2], [39]], [[40]], [[0], [0]]):
        now, awaited, _ = server.call(both(keys))
        assert now is not None
        assert sorted(now, key=repr) == sorted(awaited, key=repr)


def test_peek_now_declines_what_it_cannot_answer_at_once(server: ServerHandle, kv: str) -> None:
    db = server.db
    ctl = db._ctl
    idx, table = db.get("sync_kv_k"), db.get("sync_kv")

    async def go() -> list[Any]:
        since = ctl.since(idx.id).time
        upper = ctl.frontier(idx.id).time
        assert since is not None and upper is not None
        return [
            ctl.peek_now(table.id, literal_constraints=[[1]]),  # a table, not an index
            ctl.peek_now(ctl.new_transient_id(), literal_constraints=[[1]]),  # unknown
            ctl.peek_now(idx.id, timestamp=since - 1, literal_constraints=[[1]])
            if since > 0 else None,  # before its since
            ctl.peek_now(idx.id, timestamp=upper + 10**9, literal_constraints=[[1]]),  # ahead
        ]

    assert server.call(go()) == [None, None, None, None]


def test_no_local_replica_means_no_synchronous_read() -> None:
    import asyncio

    import twofold

    async def go() -> Any:
        async with twofold.open_async("memory://sync-one", runtimes="one") as db:
            await db.sql("CREATE TABLE t (k bigint)")
            await db.sql("INSERT INTO t VALUES (1)")
            idx = await db.create_index("t_k", db.get("t"), ["k"])
            await db.lookup(idx, 1)
            t = db._choose_time(idx, None)
            return db._ctl.peek_now(idx.id, timestamp=t, literal_constraints=[[1]])

    assert asyncio.run(go()) is None  # one runtime: no published arrangement to read


_TEXTS = ["SELECT k, v, s FROM {t} WHERE k = $1",
          "SELECT s, k FROM {t} WHERE k = $1",
          "SELECT v * 2 AS w FROM {t} WHERE k = $1 AND v > 1",
          "SELECT k, s FROM {t} WHERE k = $1 ORDER BY s DESC",
          "SELECT v FROM {t} WHERE k = $1 AND s = $2",
          "SELECT k FROM {t} WHERE k = $1 LIMIT 1"]
_VALUES = st.one_of(st.integers(-3, 45), st.none(), st.sampled_from([1.0, 2.5, 0.0, -0.0]),
                    st.sampled_from(["s1", "s2", "x", ""]))
# Mostly a key (an int), sometimes anything; the second parameter mostly a string.
_PARAMS = st.tuples(st.one_of(st.integers(-3, 45), st.integers(0, 39), _VALUES),
                    st.one_of(st.sampled_from(["s1", "s2", "s8", "x"]), _VALUES)).map(list)


@settings(max_examples=examples(30), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=st.sampled_from(_TEXTS), runs=st.lists(_PARAMS, min_size=1, max_size=4))
def test_execute_now_equals_execute(server: ServerHandle, kv: str, text: str,
                                    runs: list[list[Any]]) -> None:
    sql = text.format(t=kv)
    stmt = prepared.PreparedStatement(server.db, sql)
    n = sql.count("$")

    async def both(params: list[Any]) -> tuple[Any, Any]:
        try:
            awaited = await stmt.execute(params)
        except Exception as e:  # the synchronous path declines what errs
            return type(e), stmt.execute_now(params)
        return awaited, stmt.execute_now(params)

    for params in runs:
        awaited, now = server.call(both(params[:n]))
        if now is None:
            continue
        assert not isinstance(awaited, type)
        assert list(now.schema.names) == list(awaited.schema.names)
        assert sorted(now.rows, key=repr) == sorted(awaited.rows, key=repr), (sql, params)
        assert now.timestamp >= awaited.timestamp  # never before a read made before it


def test_a_kept_lookup_is_answered_at_once(server: ServerHandle, kv: str) -> None:
    stmt = prepared.PreparedStatement(server.db, f"SELECT s, k FROM {kv} WHERE k = $1")

    async def go() -> Any:
        assert stmt.execute_now([3]) is None  # not planned yet
        first = await stmt.execute([3])
        return first, stmt.execute_now([3]), stmt.execute_now([3.5])

    first, now, other_type = server.call(go())
    assert now is not None and sorted(now.rows, key=repr) == sorted(first.rows, key=repr)
    assert other_type is None  # another parameter type: no kept plan for it yet


def test_psycopg_lookups_take_the_synchronous_path(server: ServerHandle, kv: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    q = f"SELECT k, s FROM {kv} WHERE k = %s"
    with connect(server) as c:
        for _ in range(3):
            c.execute(q, [1], prepare=True).fetchall()
        awaited: list[str] = []
        real = run_module.run

        async def run(s: Any, sql: str, params: list[Any]) -> Any:
            awaited.append(sql)
            return await real(s, sql, params)

        monkeypatch.setattr(run_module, "run", run)
        want = server.call(server.db.sql(f"SELECT k, s FROM {kv} WHERE k = 7"))
        for _ in range(5):
            got = c.execute(q, [7], prepare=True).fetchall()
            assert sorted(got, key=repr) == sorted(want.rows, key=repr)
        assert awaited == []  # no statement task: Bind/Describe/Execute/Sync answered at once
        c.execute(f"INSERT INTO {kv} VALUES (7, 1.25, 'fresh')")  # read-your-writes
        assert (7, "fresh") in c.execute(q, [7], prepare=True).fetchall()
        with c.transaction():  # inside BEGIN: the transaction's path, pinned reads
            assert (7, "fresh") in c.execute(q, [7], prepare=True).fetchall()
        assert any(f"FROM {kv}" in s for s in awaited)


def _bind(stmt: bytes, value: bytes, limit: int = 0) -> bytes:
    return (msg(b"B", b"\0" + stmt + b"\0" + struct.pack("!hhi", 0, 1, len(value)) + value
                + struct.pack("!h", 0))
            + msg(b"D", b"P\0") + msg(b"E", b"\0" + struct.pack("!i", limit)) + msg(b"S"))


def test_row_limits_and_errors_on_the_synchronous_path(server: ServerHandle, kv: str) -> None:
    raw = Raw(server.host, server.port)
    raw.login()
    sql = f"SELECT k, s FROM {kv} WHERE k = $1".encode()
    raw.send(msg(b"P", b"q\0" + sql + b"\0\0\0") + msg(b"S"))
    raw.until(b"Z")
    for _ in range(2):  # planned, then kept
        raw.send(_bind(b"q", b"4"))
        raw.until(b"Z")
    want = sorted(server.call(server.db.sql(f"SELECT k, s FROM {kv} WHERE k = 4")).rows,
                  key=repr)
    assert len(want) == 3
    raw.send(_bind(b"q", b"4", limit=2))  # a row limit: PortalSuspended after two rows
    got = raw.until(b"Z")
    kinds = [k for k, _ in got]
    assert kinds == [b"2", b"T", b"D", b"D", b"s", b"Z"], kinds
    # A Bind that fails (the wrong number of parameters): an error, skipped to Sync.
    bad = msg(b"B", b"\0q\0" + struct.pack("!hh", 0, 0) + struct.pack("!h", 0))
    raw.send(bad + msg(b"D", b"P\0") + msg(b"E", b"\0\0\0\0\0") + msg(b"S"))
    got = raw.until(b"Z")
    assert [k for k, _ in got] == [b"E", b"Z"]
    assert b"08P01" in got[0][1]
    raw.send(_bind(b"q", b"4"))  # and the connection goes on
    got = raw.until(b"Z")
    assert [k for k, _ in got] == [b"2", b"T", b"D", b"D", b"D", b"C", b"Z"]
    assert got[-2][1].startswith(b"SELECT 3")
    raw.close()


def test_the_loop_takes_over_where_the_synchronous_path_cannot(server: ServerHandle,
                                                              kv: str) -> None:
    """In one packet: kept lookups answered at once, then a simple query the loop runs, then a
    lookup again — replies in order, the connection still serving."""
    raw = Raw(server.host, server.port)
    raw.login()
    sql = f"SELECT k FROM {kv} WHERE k = $1".encode()
    raw.send(msg(b"P", b"q\0" + sql + b"\0\0\0") + msg(b"S"))
    raw.until(b"Z")
    raw.send(_bind(b"q", b"5"))
    raw.until(b"Z")
    raw.send(_bind(b"q", b"5") + query("SELECT 41 + 1") + _bind(b"q", b"6"))
    got = raw.until(b"Z") + raw.until(b"Z") + raw.until(b"Z")
    rows = [body for kind, body in got if kind == b"D"]
    assert [r[-1:] for r in rows] == [b"5"] * 3 + [b"2"] + [b"6"] * 3, rows
    raw.close()


def test_inbox_hands_over_bytes_in_order_and_pauses_a_fast_sender() -> None:
    import asyncio

    from twofold.server.inbox import LIMIT, Inbox

    class Transport:
        paused = 0

        def pause_reading(self) -> None:
            self.paused += 1

        def resume_reading(self) -> None:
            self.paused -= 1

        def is_closing(self) -> bool:
            return False

    async def go() -> None:
        inbox = Inbox()
        transport = Transport()
        inbox.transport = transport  # type: ignore[assignment]
        taken: list[bytes] = []
        inbox.now = lambda data: taken.append(data) or data == b"mine"
        inbox.feed(b"mine")  # taken by the synchronous handler
        inbox.feed(b"a")  # declined: kept for the read, and from now on in order
        inbox.now = None
        inbox.feed(b"b" * LIMIT)
        assert transport.paused == 1  # past LIMIT unread: reading stops
        assert await inbox.read() == b"a" + b"b" * LIMIT
        assert transport.paused == 0
        inbox.poke()
        assert await inbox.read() is None
        inbox.feed_eof()
        assert await inbox.read() == b""
        assert taken == [b"mine", b"a"]

    asyncio.run(go())


@settings(max_examples=examples(300), deadline=None)
@given(x=st.one_of(st.floats(), st.floats(1e-5, 1e16), st.floats(-1e16, -1e-5),
                   st.integers(-10**15, 10**15).map(float)))
def test_float_text_is_postgresql_output(x: float) -> None:
    """float8 text as PostgreSQL writes it (extra_float_digits 1): the shortest round-trip
    digits, positional for decimal exponents -4..14, else d.ddde+XX — against a reference
    built from those digits with `decimal`; the fast path and the general one agree."""
    import decimal
    import math

    from twofold.server.types import _float_text, float_text

    if math.isnan(x) or math.isinf(x) or x == 0:
        want = {True: "NaN"}.get(math.isnan(x)) or (
            ("Infinity" if x > 0 else "-Infinity") if math.isinf(x) else
            ("-0" if math.copysign(1.0, x) < 0 else "0"))
    else:
        sign, digits, exponent = decimal.Decimal(repr(x)).normalize().as_tuple()
        assert isinstance(exponent, int)
        text = "".join(map(str, digits))
        e10 = len(text) + exponent - 1
        if -4 <= e10 < 15:
            want = f"{decimal.Decimal(repr(x)):f}"
            want = want.rstrip("0").rstrip(".") if "." in want else want
        else:
            mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
            want = f"{'-' if sign else ''}{mantissa}e{'+' if e10 >= 0 else '-'}{abs(e10):02d}"
    assert float_text(x) == want
    assert _float_text(x, repr(x)) == want


def test_serve_asks_for_the_latency_slice_on_its_event_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`twofold serve`'s event loop thread answers every request: it asks for the read path's
    latency slice (the thread `ready` is called on), and `TWOFOLD_LATENCY_SLICE_US=0` keeps
    the default."""
    import asyncio
    import threading

    from tests.runtime.test_sched import CUSTOM_SLICES_UNSUPPORTED, SLICE_SUPPORTED

    from twofold.runtime import sched
    from twofold.server.serve import serve

    if not SLICE_SUPPORTED or CUSTOM_SLICES_UNSUPPORTED is not None:
        pytest.skip(f"custom latency slices cannot be seen here: {CUSTOM_SLICES_UNSUPPORTED}")

    def slice_seen(env: str | None) -> int | None:
        if env is None:
            monkeypatch.delenv("TWOFOLD_LATENCY_SLICE_US", raising=False)
        else:
            monkeypatch.setenv("TWOFOLD_LATENCY_SLICE_US", env)
        seen: list[int | None] = []

        async def main() -> None:
            stop = asyncio.Event()

            def ready(host: str, port: int) -> None:
                seen.append(sched.current_slice_ns())
                stop.set()

            await serve("127.0.0.1", 0, storage="memory://", ready=ready, stop=stop)

        def run() -> None:
            # A new thread inherits its creator's slice: another test in this process may
            # have given the main thread one, so start from the kernel's default.
            sched._set_slice(threading.get_native_id(), 0)
            asyncio.run(main())

        t = threading.Thread(target=run)
        t.start()
        t.join(60)
        return seen[0]

    def kernel_default() -> int | None:
        got: list[int | None] = []

        def run() -> None:
            sched._set_slice(threading.get_native_id(), 0)
            got.append(sched.current_slice_ns())

        t = threading.Thread(target=run)
        t.start()
        t.join(10)
        return got[0]

    default = kernel_default()
    assert slice_seen(None) == sched.DEFAULT_LATENCY_SLICE_US * 1000 != default
    assert slice_seen("0") == default


@settings(max_examples=examples(60), deadline=None)
@given(kinds=st.lists(st.sampled_from("BDESHC"), min_size=1, max_size=12), data=st.data())
def test_the_machine_frames_any_split_of_a_stream_alike(kinds: list[str],
                                                        data: st.DataObject) -> None:
    """Messages taken from a stream received in any chunks are the stream's messages, in
    order; `has_message` and `alone_until_sync` look only at what is not yet taken."""
    from twofold.server.machine import Machine, Phase

    encoded = {"B": msg(b"B", b"\0s\0" + struct.pack("!hhh", 0, 0, 0)),
               "D": msg(b"D", b"P\0"), "E": msg(b"E", b"\0" + struct.pack("!i", 0)),
               "S": msg(b"S"), "H": msg(b"H"), "C": msg(b"C", b"Sx\0")}
    stream = b"".join(encoded[k] for k in kinds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    mc = Machine()
    mc.phase = Phase.EXTENDED
    letter = {"Bind": "B", "Describe": "D", "Execute": "E", "Sync": "S", "Flush": "H",
              "Close": "C"}
    got: list[str] = []
    received = 0
    for chunk in chunks:
        mc.receive_data(chunk)
        received += len(chunk)
        while (m := mc.next_message()) is not None:
            got.append(letter[type(m).__name__])
            mc.phase = Phase.EXTENDED  # as the session leaves it after a Sync's reply
            rest = kinds[len(got):]
            assert mc.has_message() == (received - sum(len(encoded[k]) for k in got)
                                        >= (len(encoded[rest[0]]) if rest else 1))
            if received == len(stream):  # all received: the check reads exactly the rest
                until = rest[:rest.index("S")] if "S" in rest else None
                assert mc.alone_until_sync("") == (until is not None and "B" not in until)
    assert got == kinds
    assert not mc.has_message()
