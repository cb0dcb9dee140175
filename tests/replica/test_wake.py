"""The front wakes the maintenance process after its own writes (`MaintenanceProcess.wake_on`):
a write in the front's process reaches the maintenance runtime's dataflows before its poll
interval; a writer in another process still lands, by the poll.

The maintenance process also wakes for its metrics sync (every 0.1 s), so the poll interval
alone cannot show the wake-up without timing it: the test counts the WAKE messages the front
sent for its writes, with a poll interval (600 s) the rows could never wait for."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.runtime.helpers import KV, Driver, sqlite_url

from twofold.replica import Replica
from twofold.storage import open_storage
from twofold.storage.backend import Notifier

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


async def test_a_front_write_wakes_maintenance_before_the_poll() -> None:
    url = sqlite_url("wake")
    storage = open_storage(url)  # another handle of the file in this process, as `db` has
    t = storage.create_table("t", KV)
    t.insert([[1, "a"]])
    replica = Replica(url, "two", placement="processes", poll_interval=600.0)
    try:
        d = Driver(await replica.start())
        await d.start()
        _, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)
        proc = replica.maintenance_process
        assert proc is not None
        for k in range(2, 5):  # each write is seen well before a 600 s poll would
            before = proc.wakes_sent
            t.insert([[k, "b"]])
            await d.frontier_reaches(idx, t.upper)
            assert proc.wakes_sent > before  # the write woke the maintenance process
        got = await d.peek(idx, t.upper.time - 1)  # type: ignore[operator]
        assert sorted(r[0][0] for r in getattr(got, "rows", [])) == [1, 2, 3, 4]
    finally:
        await replica.close()
        storage.close()


_WRITER = """
import sys
from twofold.storage import open_storage
s = open_storage(sys.argv[1])
s.table("t").insert([[int(sys.argv[2]), "elsewhere"]])
s.close()
"""


async def test_a_writer_in_another_process_still_lands() -> None:
    url = sqlite_url("wake-other")
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[1, "a"]])
    replica = Replica(url, "two", placement="processes", poll_interval=0.05)
    try:
        d = Driver(await replica.start())
        await d.start()
        _, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)
        subprocess.run([sys.executable, "-c", _WRITER, url, "7"], check=True, timeout=60)
        other = open_storage(url)
        upper = other.table("t").upper  # the child's write, read back
        other.close()
        await d.frontier_reaches(idx, upper)
        got = await d.peek(idx, upper.time - 1)  # type: ignore[operator]
        assert sorted(r[0][0] for r in getattr(got, "rows", [])) == [1, 7]
    finally:
        await replica.close()
        storage.close()
