"""`twofold serve` over SQLite lets its idle ticker skip ticks (`Ticker.idle_interval`): reads
still see every write acknowledged before them at once — also through a view joining a written
table with one nobody writes, which only a tick makes complete — and reads with no write wait
for nothing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from twofold.server import serve as serve_module


@pytest.fixture
def dsn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # Idle for a minute: only what happens (writes, commits) can bring a tick in time.
    monkeypatch.setattr(serve_module, "IDLE_TICK_INTERVAL", 60.0)
    ready: list[tuple[str, int]] = []
    started = threading.Event()
    holder: dict[str, object] = {}

    async def main() -> None:
        stop = asyncio.Event()
        holder["stop"], holder["loop"] = stop, asyncio.get_running_loop()

        def on_ready(host: str, port: int) -> None:
            ready.append((host, port))
            started.set()

        await serve_module.serve("127.0.0.1", 0, storage=f"sqlite://{tmp_path}/idle.db",
                                 ready=on_ready, stop=stop)

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(120)
    host, port = ready[0]
    try:
        yield f"host={host} port={port} user=twofold dbname=twofold"
    finally:
        loop = holder["loop"]
        assert isinstance(loop, asyncio.AbstractEventLoop)
        loop.call_soon_threadsafe(holder["stop"].set)  # type: ignore[attr-defined]
        thread.join(60)


def test_reads_see_each_acknowledged_write_at_once_while_idle(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
        c.execute("SET statement_timeout = '20s'")
        c.execute("CREATE TABLE a (k bigint, v bigint)")
        c.execute("CREATE TABLE b (k bigint, w bigint)")
        c.execute("INSERT INTO b VALUES (1, 10), (2, 20), (3, 30)")
        c.execute("CREATE VIEW j AS SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k")
        c.execute("CREATE INDEX j_k ON j (k)")
        c.execute("CREATE INDEX a_k ON a (k)")
        assert c.execute("SELECT count(*) FROM j").fetchone() == (0,)
        time.sleep(1.0)  # idle: the ticker skips its rounds from here
        for i in (1, 2, 3):
            c.execute("INSERT INTO a VALUES (%s, %s)", [i, i * 100])
            start = time.monotonic()
            got = c.execute("SELECT k, v, w FROM j WHERE k = %s", [i]).fetchall()
            # Without a prompt tick b stays incomplete at the write's time for a minute.
            assert time.monotonic() - start < 5.0
            assert got == [(i, i * 100, i * 10)]
            time.sleep(0.3)
        # Reads with no write before them: served at once, every write seen.
        for _ in range(20):
            start = time.monotonic()
            assert c.execute("SELECT count(*) FROM j").fetchone() == (3,)
            assert c.execute("SELECT v FROM a WHERE k = 2").fetchone() == (200,)
            assert time.monotonic() - start < 5.0
