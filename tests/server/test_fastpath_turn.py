"""A loop turn's received requests answered together (`server/inbox.Turn`): held until the turn
ends, offered in the order they arrived, their replies sent after the turn's last answer, and
nothing reordered around them (more bytes, end of stream, a declined offer, a failing one);
and over the wire, a turn's lookups on many connections each see every write acknowledged
before they were sent."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from tests.server.wire import Raw, msg, startup

from twofold.server import inbox as inbox_module
from twofold.server.inbox import Inbox, Turn
from twofold.testing.pgwire import ServerHandle, running_server


class _Transport:
    def __init__(self, name: str, events: list[tuple[str, str, bytes]]) -> None:
        self.name = name
        self.events = events
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.events.append(("sent", self.name, data))

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_a_turns_bytes_are_offered_together_in_order_and_replied_to_after() -> None:
    events: list[tuple[str, str, bytes]] = []

    def replying(turn: Turn, t: _Transport) -> Callable[[bytes], bool]:
        def now(data: bytes) -> bool:
            events.append(("offered", t.name, data))
            turn.write(t, data.upper())  # type: ignore[arg-type]
            return True
        return now

    async def go() -> None:
        turn = Turn()
        a, b, c = Inbox(turn), Inbox(turn), Inbox(turn)
        ta, tb, tc = _Transport("a", events), _Transport("b", events), _Transport("c", events)
        for box, t in ((a, ta), (b, tb), (c, tc)):
            box.transport = t  # type: ignore[assignment]
            box.now = replying(turn, t)
        loop = asyncio.get_running_loop()
        # Nothing else to run in this turn: offered at once (holding would only cost a turn).
        await asyncio.sleep(0)
        assert not loop._ready  # type: ignore[attr-defined]
        a.feed(b"o")
        assert events == [("offered", "a", b"o"), ("sent", "a", b"O")]
        events.clear()
        loop.call_soon(lambda: None)  # as a turn's other receives: more callbacks to run
        a.feed(b"x")
        b.feed(b"y")
        a.feed(b"z")  # more for a in the same turn: offered with what it holds
        assert events == []  # held until the turn ends
        await asyncio.sleep(0)
        assert events == [("offered", "a", b"xz"), ("offered", "b", b"y"),
                          ("sent", "a", b"XZ"), ("sent", "b", b"Y")]
        # End of stream after held bytes: they are offered first (and, outside a turn's
        # settling, the reply is written at once).
        events.clear()
        loop.call_soon(lambda: None)
        a.feed(b"q")
        a.feed_eof()
        assert events == [("offered", "a", b"q"), ("sent", "a", b"Q")]
        assert await a.read() == b""
        # A declined offer goes to the read, whole and in order; a failing one aborts its
        # connection alone.
        events.clear()
        b.now = lambda data: False

        def failing(data: bytes) -> bool:
            raise RuntimeError("broken")

        c.now = failing
        loop.call_soon(lambda: None)
        b.feed(b"1")
        c.feed(b"!")
        b.feed(b"2")
        await asyncio.sleep(0)
        assert tc.aborted and not tb.aborted
        assert await b.read() == b"12"
        # A reply that cannot be written aborts its connection alone.
        events.clear()

        def broken(data: bytes) -> None:
            raise RuntimeError("closed")

        tb.write = broken  # type: ignore[method-assign]
        b.now = replying(turn, tb)
        a.now = replying(turn, ta)
        loop.call_soon(lambda: None)
        b.feed(b"u")
        a.feed(b"v")
        await asyncio.sleep(0)
        assert tb.aborted and events[-1] == ("sent", "a", b"V")
        # Held bytes a read finds are offered before it waits.
        events.clear()
        c.now = replying(turn, tc)
        loop.call_soon(lambda: None)
        c.feed(b"r")
        c.now = None  # as the loop leaves it once its read returned
        assert await c.read() == b"r"
        assert events == []

    asyncio.run(go())


def test_a_turn_answers_at_most_batch_together_each_groups_replies_sent_first() -> None:
    """`Turn(batch=2)`: a turn's five held inboxes are answered in arrival order in groups of
    two, two and one — `together` sees each group, and each group's replies are sent before
    the next group is offered; `Turn(batch=0)` holds nothing."""
    events: list[tuple[str, str, bytes]] = []

    async def go() -> None:
        turn = Turn(batch=2)
        groups: list[list[str]] = []
        boxes = [Inbox(turn) for _ in range(5)]
        names = {id(b): str(i) for i, b in enumerate(boxes)}
        turn.together = lambda held: groups.append([names[id(b)] for b in held])
        for i, box in enumerate(boxes):
            t = _Transport(str(i), events)
            box.transport = t  # type: ignore[assignment]

            def now(data: bytes, t: _Transport = t) -> bool:
                events.append(("offered", t.name, data))
                turn.write(t, data.upper())  # type: ignore[arg-type]
                return True

            box.now = now
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: None)  # more callbacks to run: the receives are held
        for i, box in enumerate(boxes):
            box.feed(b"r%d" % i)
        assert events == []
        await asyncio.sleep(0)
        assert groups == [["0", "1"], ["2", "3"]]  # a group of one needs no batch
        assert events == [
            ("offered", "0", b"r0"), ("offered", "1", b"r1"),
            ("sent", "0", b"R0"), ("sent", "1", b"R1"),
            ("offered", "2", b"r2"), ("offered", "3", b"r3"),
            ("sent", "2", b"R2"), ("sent", "3", b"R3"),
            ("offered", "4", b"r4"), ("sent", "4", b"R4")]
        events.clear()
        unheld = Turn(batch=0)
        box = Inbox(unheld)
        t = _Transport("u", events)
        box.transport = t  # type: ignore[assignment]
        box.now = lambda data: (events.append(("offered", "u", data)), True)[1]
        loop.call_soon(lambda: None)
        box.feed(b"x")
        assert events == [("offered", "u", b"x")]  # in the receive's own callback

    asyncio.run(go())


def test_turn_batch_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, want in (("", inbox_module.TURN_BATCH), ("0", 0), ("8", 8), ("all", None)):
        monkeypatch.setenv("TWOFOLD_TURN_BATCH", raw)
        assert inbox_module.turn_batch() == want
    for bad in ("-1", "eight"):
        monkeypatch.setenv("TWOFOLD_TURN_BATCH", bad)
        with pytest.raises(ValueError, match="TWOFOLD_TURN_BATCH"):
            inbox_module.turn_batch()
    with pytest.raises(ValueError):
        Turn(batch=-1)


def _bind_execute(stmt: str, key: int) -> bytes:
    body = (b"\0" + stmt.encode() + b"\0" + struct.pack("!hh", 1, 1) + struct.pack("!h", 1)
            + struct.pack("!iq", 8, key) + struct.pack("!hh", 1, 1))
    return msg(b"B", body) + msg(b"E", b"\0" + struct.pack("!i", 0)) + msg(b"S")


def _rows(replies: list[tuple[bytes, bytes]]) -> list[tuple[int, int]]:
    out = []
    for kind, body in replies:
        if kind == b"D":
            (n,) = struct.unpack_from("!h", body)
            assert n == 2
            (k,) = struct.unpack_from("!q", body, 6)
            (v,) = struct.unpack_from("!q", body, 18)
            out.append((k, v))
    return sorted(out)


@pytest.fixture(scope="module", params=[None, 0], ids=["batch-all", "batch-0"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerHandle]:
    """The module's server answering a turn's requests together (`turn_batch=None`) and one
    answering each as it arrives (0, `inbox.TURN_BATCH`): the over-the-wire tests hold for
    both."""
    with running_server(turn_batch=request.param) as handle:
        yield handle


@pytest.fixture
def turns(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many inboxes each turn settled."""
    sizes: list[int] = []
    real = inbox_module.Turn._settle

    def settle(self: Turn) -> None:
        sizes.append(len(self._held))
        real(self)

    monkeypatch.setattr(inbox_module.Turn, "_settle", settle)
    yield sizes


def test_a_turns_lookups_see_every_write_acknowledged_before(
        server: ServerHandle, name: str, turns: list[int]) -> None:
    """Lookups on eight connections that reach the server in one turn (sent while its loop is
    held busy) each see every INSERT acknowledged on another connection before they were
    sent — the turn's one answer phase reads no older state than each request's own."""
    conns = 8
    with psycopg.connect(server.dsn(), autocommit=True) as w:
        w.execute(f"CREATE TABLE {name} (k bigint, v bigint)")
        w.execute(f"CREATE INDEX {name}_k ON {name} (k)")
        raws = []
        for _ in range(conns):
            raw = Raw(server.host, server.port)
            raw.send(startup())
            raw.until(b"Z")
            text = f"SELECT k, v FROM {name} WHERE k = $1"
            raw.send(msg(b"P", b"q\0" + text.encode() + b"\0" + struct.pack("!hI", 1, 20))
                     + msg(b"S"))
            raw.until(b"Z")
            for _ in range(3):  # planned, then kept
                raw.send(_bind_execute("q", 0))
                raw.until(b"Z")
            raws.append(raw)
        try:
            turns.clear()
            for v in range(12):
                w.execute(f"INSERT INTO {name} VALUES (%s, %s)", [v % 3, v])
                want = sorted((v % 3, j) for j in range(v + 1) if j % 3 == v % 3)
                # The loop held for a moment: the eight requests are received in one turn.
                server.loop.call_soon_threadsafe(time.sleep, 0.1)
                time.sleep(0.01)
                for raw in raws:
                    raw.send(_bind_execute("q", v % 3))
                for i, raw in enumerate(raws):
                    assert _rows(raw.until(b"Z")) == want, (v, i)
            if server.server.turn.batch is None:
                assert max(turns) == conns  # a turn held every connection's request
        finally:
            for raw in raws:
                raw.sock.close()


_ROWS = [(k % 6, [None, 0.5, -0.0, float("nan"), 2.5][k % 5], [None, "a", "", "ünï"][k % 4])
         for k in range(20)]
_TEXTS = ["SELECT k, v, s FROM {t} WHERE k = $1",
          "SELECT s, v FROM {t} WHERE k = $1 AND s = $2",
          "SELECT v * 2 AS w, k FROM {t} WHERE k = $1",
          "SELECT k, s FROM {t} WHERE k = $1 ORDER BY s"]


def _request(stmt: int, key: int | None, second: bytes | None, binary: bool,
             results: tuple[int, ...], describe: bool) -> bytes:
    def value(v: int | None) -> bytes:
        if v is None:
            return struct.pack("!i", -1)
        raw = struct.pack("!q", v) if binary else str(v).encode()
        return struct.pack("!i", len(raw)) + raw

    params = [value(key)]
    if stmt == 1:
        params.append(struct.pack("!i", -1) if second is None
                      else struct.pack("!i", len(second)) + second)
    formats = (1, 0) if binary and stmt == 1 else (1,) if binary else ()
    body = (f"\0q{stmt}\0".encode() + struct.pack(f"!h{len(formats)}h", len(formats), *formats)
            + struct.pack("!h", len(params)) + b"".join(params)
            + struct.pack(f"!h{len(results)}h", len(results), *results))
    return (msg(b"B", body) + (msg(b"D", b"P\0") if describe else b"")
            + msg(b"E", b"\0" + struct.pack("!i", 0)) + msg(b"S"))


def _session(server: ServerHandle, table: str) -> tuple[Raw, int]:
    raw = Raw(server.host, server.port)
    raw.send(startup())
    (key,) = [body for kind, body in raw.until(b"Z") if kind == b"K"]
    for i, text in enumerate(_TEXTS):
        n = 2 if "$2" in text else 1
        oids = struct.pack("!I", 20) + (struct.pack("!I", 25) if n == 2 else b"")
        raw.send(msg(b"P", f"q{i}\0{text.format(t=table)}\0".encode() + struct.pack("!h", n)
                     + oids) + msg(b"S"))
        raw.until(b"Z")
    return raw, struct.unpack_from("!i", key)[0]


def test_a_turns_replies_are_the_session_paths_byte_for_byte(
        server: ServerHandle, name: str, turns: list[int],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Random kept-lookup requests on eight connections received in one turn (answered
    together, `fastpath.answer_each`) get the replies a connection with the fast path off
    gets for the same requests, byte for byte — keys with no row, several rows, NULL keys,
    NaN and -0.0 values, text and binary formats, with and without Describe, four
    statements at once, and the index dropped and made again between two turns."""
    import random

    from twofold.server import fastpath

    db = server.db
    server.call(db.sql(f"CREATE TABLE {name} (k bigint, v double precision, s text)"))
    db.get(name).insert(_ROWS)  # off the loop
    server.call(db.sql(f"CREATE INDEX {name}_k ON {name} (k)"))
    slow, slow_pid = _session(server, name)
    real, real_each = fastpath.answer, fastpath.answer_each
    together = [0]

    def answer(s: Any, data: bytes, at: int) -> tuple[bytes, int] | None:
        return None if s.pid == slow_pid else real(s, data, at)

    def answer_each(requests: list[tuple[Any, bytes]]) -> list[bytes | None]:
        assert all(s.pid != slow_pid for s, _ in requests)
        got = real_each(requests)
        together[0] += sum(r is not None for r in got)
        return got

    monkeypatch.setattr(fastpath, "answer", answer)
    monkeypatch.setattr(fastpath, "answer_each", answer_each)
    fast = [_session(server, name)[0] for _ in range(8)]
    rnd = random.Random(7)
    try:
        for round_ in range(12):
            requests = []
            for _ in fast:
                stmt = rnd.randrange(len(_TEXTS))
                requests.append(_request(
                    stmt, rnd.choice([None, -1, 0, 1, 2, 3, 5, 9]),
                    rnd.choice([None, b"a", b"", "ünï".encode()]), rnd.random() < 0.5,
                    rnd.choice([(), (0,), (1,), (1, 0), (0, 1, 0)][: 4 if stmt != 1 else 5]),
                    rnd.random() < 0.7))
            if round_ in (5, 9):  # the catalog moves between two turns: planned again
                server.call(db.sql(f"DROP INDEX {name}_k"))
                server.call(db.sql(f"CREATE INDEX {name}_k ON {name} (k)"))
            if round_ < 2:  # planned, then kept: on each connection alone
                for raw, data in zip(fast, requests, strict=True):
                    raw.send(data)
                    raw.until(b"Z")
                continue
            server.loop.call_soon_threadsafe(time.sleep, 0.1)  # one turn receives them all
            time.sleep(0.01)
            for raw, data in zip(fast, requests, strict=True):
                raw.send(data)
            replies = [raw.until(b"Z") for raw in fast]
            for data, reply in zip(requests, replies, strict=True):
                slow.send(data)
                assert reply == slow.until(b"Z"), data
        if server.server.turn.batch is None:
            assert together[0] > 0  # some answered together
            assert max(turns) == len(fast)
    finally:
        for raw in (slow, *fast):
            raw.sock.close()


def test_rows_now_each_is_rows_now_of_each(server: ServerHandle, name: str) -> None:
    """`turns.rows_now_each` gives what `rows_now` gives each parameter list, None where it
    gives None (no such template, a NULL key, a key of another type) — through the
    controller's and the replica's reads of several lookups at once
    (`Controller.peek_now_latest_each`, `ComputeWorker.lookup_now_each`)."""
    from twofold.server.turns import rows_now_each
    from twofold.sql.prepared import statement

    db = server.db
    assert db.controller._local_each  # the replica reads several lookups at once
    server.call(db.sql(f"CREATE TABLE {name} (k bigint, v double precision, s text)"))
    db.get(name).insert(_ROWS)
    server.call(db.sql(f"CREATE INDEX {name}_k ON {name} (k)"))
    for text in _TEXTS:
        p = statement(db, text.format(t=name))
        params = [[3, "a"] if "$2" in text else [3]]
        for _ in range(3):  # planned, then kept
            server.call(p.execute(params[0]))
        many = [[k, s] if "$2" in text else [k] for k in (0, 1, 5, 7, None, 2)
                for s in ("a", "", None)][:12]
        many.append(["x", "a"] if "$2" in text else ["x"])

        async def both(p: Any = p, many: Any = many) -> tuple[Any, Any]:
            return [p.rows_now(m) for m in many], rows_now_each(p, many)

        each, together = server.call(both())
        assert repr(together) == repr(each)  # NaN as NaN, -0.0 apart from 0.0
        assert any(g is not None for g in together)
