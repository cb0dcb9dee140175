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

import psycopg
import pytest
from tests.server.wire import Raw, msg, startup

from twofold.server import inbox as inbox_module
from twofold.server.inbox import Inbox, Turn
from twofold.testing.pgwire import ServerHandle


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
        b.feed(b"1")
        c.feed(b"!")
        b.feed(b"2")
        await asyncio.sleep(0)
        assert tc.aborted and not tb.aborted
        assert await b.read() == b"12"
        # Held bytes a read finds are offered before it waits.
        events.clear()
        c.now = replying(turn, tc)
        c.feed(b"r")
        c.now = None  # as the loop leaves it once its read returned
        assert await c.read() == b"r"
        assert events == []

    asyncio.run(go())


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
            assert max(turns) == conns  # a turn held every connection's request
        finally:
            for raw in raws:
                raw.sock.close()
