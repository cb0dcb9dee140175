"""The front wakes the maintenance process after its own writes (`MaintenanceProcess.wake_on`):
a write in the front's process reaches the maintenance runtime's dataflows before its poll
interval; a writer in another process still lands, by the poll.

The maintenance process also wakes for its metrics sync (every 0.1 s), so the poll interval
alone cannot show the wake-up without timing it: the test counts the WAKE messages the front
sent for its writes, with a poll interval (600 s) the rows could never wait for."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from tests.runtime.helpers import KV, Driver, sqlite_url

from twofold.protocol import Frontier, GlobalId
from twofold.replica import Replica
from twofold.storage import open_storage
from twofold.storage.backend import Notifier
from twofold.storage.table import Table

pytestmark = pytest.mark.timeout(120)


def test_notifier_calls_every_shards_subscriber() -> None:
    n = Notifier()
    seen: list[str] = []
    every = lambda: seen.append("every")  # noqa: E731
    n.subscribe("a", lambda: seen.append("a"))
    n.subscribe_all(every)
    n.notify("a")
    n.notify("b")
    assert seen == ["a", "every", "every"]
    n.unsubscribe_all(every)
    n.notify("b")
    assert seen == ["a", "every", "every"]


@contextlib.asynccontextmanager
async def _indexed(tag: str, poll_interval: float) -> AsyncIterator[Indexed]:
    """A table with one row over SQLite, a processes replica with `poll_interval`, and an
    index on the table that has caught up with it."""
    url = sqlite_url(tag)
    storage = open_storage(url)  # another handle of the file in this process, as `db` has
    t = storage.create_table("t", KV)
    t.insert([[1, "a"]])
    replica = Replica(url, "two", placement="processes", poll_interval=poll_interval)
    try:
        d = Driver(await replica.start())
        await d.start()
        _, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)
        yield Indexed(url, t, replica, d, idx)
    finally:
        await replica.close()
        storage.close()


@dataclass
class Indexed:
    url: str
    table: Table
    replica: Replica
    driver: Driver
    index: GlobalId

    async def keys_at(self, upper: Frontier) -> list[int]:
        await self.driver.frontier_reaches(self.index, upper)
        got = await self.driver.peek(self.index, upper.time - 1)  # type: ignore[operator]
        return sorted(r[0][0] for r in getattr(got, "rows", []))


async def test_a_front_write_wakes_maintenance_before_the_poll() -> None:
    async with _indexed("wake", poll_interval=600.0) as ix:
        proc = ix.replica.maintenance_process
        assert proc is not None
        for k in range(2, 5):  # each write is seen well before a 600 s poll would
            before = proc.wakes_sent
            ix.table.insert([[k, "b"]])
            await ix.driver.frontier_reaches(ix.index, ix.table.upper)
            assert proc.wakes_sent > before  # the write woke the maintenance process
        assert await ix.keys_at(ix.table.upper) == [1, 2, 3, 4]


_WRITER = """
import sys
from twofold.storage import open_storage
s = open_storage(sys.argv[1])
s.table("t").insert([[int(sys.argv[2]), "elsewhere"]])
s.close()
"""


async def test_a_writer_in_another_process_still_lands() -> None:
    async with _indexed("wake-other", poll_interval=0.05) as ix:
        subprocess.run([sys.executable, "-c", _WRITER, ix.url, "7"], check=True, timeout=60)
        other = open_storage(ix.url)
        upper = other.table("t").upper  # the child's write, read back
        other.close()
        assert await ix.keys_at(upper) == [1, 7]
