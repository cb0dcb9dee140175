"""`Coalescer`: frames written in one loop turn reach the socket together, whole and in order."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.replica.assembly import eager_first
from twofold.transport.coalesce import Coalescer

from .support import async_test


class FakeWriter:
    """Records each `write` call (what a StreamWriter hands its transport)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        assert not self.closing
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing


def coalescer(limit: int = 1 << 16, eager: bool = False) -> tuple[Coalescer, FakeWriter]:
    w = FakeWriter()
    return Coalescer(w, limit, eager=eager), w  # type: ignore[arg-type]


@async_test
async def test_frames_of_one_turn_leave_in_one_write_at_its_end() -> None:
    c, w = coalescer()
    for i in range(5):
        c.write(b"f%d" % i)
    assert w.writes == []  # nothing before the turn ends
    await asyncio.sleep(0)
    assert w.writes == [b"f0f1f2f3f4"]
    assert c.pending == 0


@async_test
async def test_each_turn_is_written_separately_in_order() -> None:
    c, w = coalescer()
    c.write(b"a")
    await asyncio.sleep(0)
    c.write(b"b")
    c.write(b"c")
    await asyncio.sleep(0)
    assert w.writes == [b"a", b"bc"]


@async_test
async def test_past_the_limit_frames_are_written_without_waiting() -> None:
    c, w = coalescer(limit=10)
    c.write(b"x" * 6)
    c.write(b"y" * 6)  # 12 >= 10: written now, by a sender that has not yielded
    assert w.writes == [b"x" * 6 + b"y" * 6]
    c.write(b"z")
    await asyncio.sleep(0)
    assert w.writes == [b"x" * 6 + b"y" * 6, b"z"]


@async_test
async def test_flush_writes_now_and_discard_drops() -> None:
    c, w = coalescer()
    c.write(b"a")
    c.flush()
    assert w.writes == [b"a"]
    c.write(b"b")
    c.discard()
    await asyncio.sleep(0)
    assert w.writes == [b"a"] and c.pending == 0


@async_test
async def test_nothing_is_written_to_a_closing_writer() -> None:
    c, w = coalescer()
    c.write(b"a")
    w.closing = True
    await asyncio.sleep(0)
    assert w.writes == []


@async_test
async def test_eager_the_first_frame_of_a_turn_leaves_at_once_the_rest_at_its_end() -> None:
    c, w = coalescer(eager=True)
    c.write(b"a")
    assert w.writes == [b"a"]  # before the turn ends: the peer can start on it
    c.write(b"b")
    c.write(b"c")
    assert w.writes == [b"a"]
    await asyncio.sleep(0)
    assert w.writes == [b"a", b"bc"]
    c.write(b"d")  # a new turn: its first frame at once again
    assert w.writes == [b"a", b"bc", b"d"]
    await asyncio.sleep(0)
    c.write(b"e")
    assert w.writes == [b"a", b"bc", b"d", b"e"]


@async_test
async def test_eager_discard_drops_only_what_was_not_written() -> None:
    c, w = coalescer(eager=True)
    c.write(b"a")
    c.write(b"b")
    c.discard()
    await asyncio.sleep(0)
    assert w.writes == [b"a"] and c.pending == 0


@settings(deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=1, max_size=40), st.booleans()), max_size=40),
       st.integers(min_value=1, max_value=200), st.booleans())
def test_bytes_arrive_whole_and_in_order_whatever_the_turns(
        frames: list[tuple[bytes, bool]], limit: int, eager: bool) -> None:
    async def run() -> tuple[list[bytes], int]:
        c, w = coalescer(limit, eager)
        for data, yield_after in frames:
            c.write(data)
            if yield_after:
                await asyncio.sleep(0)
        await asyncio.sleep(0)
        return w.writes, c.pending

    writes, pending = asyncio.run(run())
    assert b"".join(writes) == b"".join(d for d, _ in frames)
    assert pending == 0
    # Every write is a concatenation of whole frames (never a split one).
    bounds, at = {0}, 0
    for d, _ in frames:
        at += len(d)
        bounds.add(at)
    at = 0
    for chunk in writes:
        at += len(chunk)
        assert at in bounds


def test_eager_first_only_with_maintenance_in_its_own_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TWOFOLD_EAGER_FIRST", raising=False)
    assert eager_first("two", "processes")
    assert not eager_first("two", "threads")
    assert not eager_first("one", "processes")
    monkeypatch.setenv("TWOFOLD_EAGER_FIRST", "0")
    assert not eager_first("two", "processes")
    monkeypatch.setenv("TWOFOLD_EAGER_FIRST", "1")
    assert eager_first("two", "threads")
