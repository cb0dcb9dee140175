"""How the maintenance process starts (`replica/process.py`): `twofold replica` forks it from
the front (sharing the interpreter's pages), and a process whose polars pool already runs never
forks — it spawns a fresh interpreter instead, since a forked child would wait for that pool's
threads forever. Shared fate for a forked child is in `test_fate.py` (its served tests run
`twofold replica`, which forks)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from tests.controller.proxy import multiset, table_at
from tests.replica.test_fate import IDX, children, memfds_of, served_index
from tests.runtime.helpers import KV, Driver, sqlite_url

from twofold.protocol import PeekRows
from twofold.replica import Replica
from twofold.replica.start import fork_is_safe
from twofold.storage import open_storage

pytestmark = pytest.mark.timeout(120)


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


@pytest.mark.parametrize("start", ["fork", "spawn"])
async def test_twofold_replica_starts_its_maintenance_process_as_asked(
        tmp_path: Path, start: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWOFOLD_MAINTENANCE_START", start)
    async with served_index(tmp_path, f"start-{start}") as (t, rp, c):
        assert rp.proc is not None
        (child,) = children(rp.proc.pid)
        forked = _cmdline(child) == _cmdline(rp.proc.pid)
        assert forked == (start == "fork"), _cmdline(child)
        assert os.getsid(child) == child  # a session (a CPU scheduling group) of its own
        assert memfds_of(child), "the maintenance process shares no batches"
        t.insert([[k, "w"] for k in range(5_000, 5_500)])
        await c.wait_for_frontier(IDX, t.upper)
        ts = c.frontier(IDX).step_back()
        assert ts is not None
        assert multiset(await c.peek(IDX, timestamp=ts)) == table_at(t, ts)


async def test_a_process_whose_polars_pool_runs_spawns_instead_of_forking() -> None:
    frame = pl.DataFrame({"k": np.arange(100_000) % 7, "v": np.arange(100_000)})
    assert frame.group_by("k").agg(pl.col("v").sum()).height == 7  # the pool is running
    assert not fork_is_safe()
    url = sqlite_url("spawn-fallback")
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[1, "a"], [2, "b"]])
    replica = Replica(url, "two", placement="processes", maintenance_start="fork")
    try:
        endpoint = await replica.start()
        proc = replica.maintenance_process
        assert proc is not None and proc.started_by == "spawn"
        assert proc.pid is not None and "twofold.replica.maintenance" in _cmdline(proc.pid)
        d = Driver(endpoint)
        await d.start()
        _, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)
        got = await d.peek(idx, (t.upper.time or 1) - 1)
        assert isinstance(got, PeekRows)
        assert multiset(got.rows) == {(1, "a"): 1, (2, "b"): 1}
    finally:
        await replica.close()
        storage.close()


@pytest.mark.parametrize("own", [True, False])
async def test_the_maintenance_process_leads_a_session_of_its_own_unless_told(
        own: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # Its own session is its own autogroup where the kernel groups by session: a front
    # saturated by its readers no longer takes maintenance's share of the cores (`start.py`).
    if not own:
        monkeypatch.setenv("TWOFOLD_MAINTENANCE_SESSION", "0")
    replica = Replica(sqlite_url(f"session-{own}"), "two", placement="processes")
    try:
        await replica.start()
        proc = replica.maintenance_process
        assert proc is not None and proc.pid is not None
        assert (os.getsid(proc.pid) == proc.pid) == own
        assert (os.getsid(proc.pid) == os.getsid(0)) == (not own)
    finally:
        await replica.close()
