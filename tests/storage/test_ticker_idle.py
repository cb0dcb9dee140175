"""The ticker's `idle_interval`: an idle SQLite storage skips ticks, and anything committed or
stamped brings the next round's tick, so a read never waits longer than without it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from twofold.storage import Storage, Table, open_storage
from twofold.storage.table import Ticker

from .helpers import DESC

INTERVAL = 0.005
IDLE = 60.0  # never reached in these tests unless said otherwise


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path}/idle.db"


@pytest.fixture
def storage(url: str) -> Iterator[Storage]:
    with open_storage(url) as st:
        yield st


def until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.001)
    return cond()


def complete_through(table: Table, ts: int) -> bool:
    upper = table.upper.time
    return upper is not None and upper > ts


def idle_ticker(storage: Storage, idle: float = IDLE) -> Ticker:
    return Ticker(storage, INTERVAL, idle_interval=idle).start()


def test_idle_rounds_skip_their_tick_and_now_stays_readable(storage: Storage) -> None:
    a = storage.create_table("a", DESC)
    ticker = idle_ticker(storage)
    try:
        assert until(lambda: ticker.skipped >= 20)
        ticks = ticker.ticks
        time.sleep(40 * INTERVAL)
        # Without idle_interval each of these rounds ticks (test_table's ticker tests).
        assert ticker.ticks <= ticks + 1
        # A read at "now" (the oracle's latest time) needs no tick: the last one covers it.
        assert complete_through(a, storage.oracle.read_ts())
    finally:
        ticker.stop()


def test_a_write_on_another_connection_advances_the_other_tables(storage: Storage) -> None:
    a = storage.create_table("a", DESC)
    b = storage.create_table("b", DESC)
    ticker = idle_ticker(storage)
    try:
        assert until(lambda: ticker.skipped >= 5)
        for i in range(5):
            stamped: list[int] = []
            # Another thread: its own connection, as the event loop's writes are.
            writer = threading.Thread(
                target=lambda i=i, out=stamped: out.append(a.insert([[i, "x"]])))
            writer.start()
            writer.join()
            (ts,) = stamped
            # b (not written) becomes complete through the write promptly, not after IDLE.
            assert until(lambda ts=ts: complete_through(b, ts), timeout=5.0), i
    finally:
        ticker.stop()


def test_another_handles_commit_and_a_new_table_bring_a_tick(storage: Storage,
                                                              url: str) -> None:
    a = storage.create_table("a", DESC)
    ticker = idle_ticker(storage)
    try:
        assert until(lambda: ticker.skipped >= 5)
        with open_storage(url) as other:
            fresh = other.create_table("fresh", DESC)
            ts = other.table("a").insert([[1, "y"]])
            mine = storage.table("fresh")
            assert until(lambda: complete_through(mine, ts), timeout=5.0)
            assert until(lambda: complete_through(fresh, ts), timeout=5.0)
            assert complete_through(a, ts)
    finally:
        ticker.stop()


def test_a_stamped_time_brings_a_tick(storage: Storage) -> None:
    a = storage.create_table("a", DESC)
    ticker = idle_ticker(storage)
    try:
        assert until(lambda: ticker.skipped >= 5)
        # The oracle moved (a time learnt elsewhere) with nothing committed: ticked anyway.
        target = storage.oracle.read_ts() + 1000
        storage.oracle.observe(target)
        assert until(lambda: complete_through(a, target), timeout=5.0)
    finally:
        ticker.stop()


def test_idle_uppers_still_move_every_idle_interval(storage: Storage) -> None:
    a = storage.create_table("a", DESC)
    ticker = idle_ticker(storage, idle=0.1)
    try:
        assert until(lambda: ticker.skipped >= 5)
        before = a.upper.time
        assert before is not None
        assert until(lambda: (a.upper.time or 0) > before, timeout=5.0)
        assert ticker.skipped >= 5
    finally:
        ticker.stop()


def test_without_idle_interval_every_round_ticks(storage: Storage) -> None:
    storage.create_table("a", DESC)
    ticker = Ticker(storage, INTERVAL).start()
    try:
        assert ticker.wait_for_ticks(20, timeout=30)
        assert ticker.skipped == 0
    finally:
        ticker.stop()
