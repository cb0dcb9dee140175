"""Shared fate across the process boundary (`spec/placement.md`, "Failure").

- SIGKILL of the maintenance process mid-step: the in-process replica's endpoint raises; a
  `twofold replica` process exits non-zero; a controller reconnects to the restarted replica and
  replays — every outstanding peek is answered exactly once with what storage holds, and a
  running subscribe continues without a gap or a duplicate.
- SIGKILL of the front process: the maintenance process exits within a second.
- No shared memory is left behind: no memfd stays open or mapped in the front after a replica
  closes, and /dev/shm gains nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.controller.proxy import (
    WAIT,
    ReplicaProcess,
    fast_backoff,
    multiset,
    table_at,
    table_index,
    until,
)
from tests.runtime.helpers import KV, Driver, sqlite_url

from twofold.controller import Controller, LagWindow
from twofold.protocol import (
    DataflowDescription,
    GlobalId,
    Hello,
    InstanceConfig,
    SinkDesc,
    SourceImport,
    SubscribeBatch,
    SubscribeSink,
)
from twofold.replica import MaintenanceFailed, Replica
from twofold.storage import Table, open_storage

pytestmark = pytest.mark.timeout(120)

SRC, IDX = GlobalId.user(1), GlobalId.user(2)
MEMFD = "memfd:twofold-batch"


def children(pid: int) -> list[int]:
    """The live child processes of `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def memfds_of(pid: int | str = "self") -> list[str]:
    """Our batch memfds that `pid` holds open or mapped."""
    found = []
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if MEMFD in target:
            found.append(f"fd {fd}: {target}")
    with open(f"/proc/{pid}/maps") as f:
        found.extend(line.strip() for line in f if MEMFD in line)
    return found


def _dev_shm() -> set[str]:
    """Named shared memory segments this stack could have made: Python's
    `multiprocessing.shared_memory` (`psm_*`) or anything named after twofold. (Other programs
    on a shared machine make segments all the time — semaphores, PostgreSQL's — and we use
    only memfds, which never appear here.)"""
    if not os.path.isdir("/dev/shm"):
        return set()
    return {n for n in os.listdir("/dev/shm") if n.startswith("psm_") or "twofold" in n}


async def test_sigkill_of_maintenance_mid_step_fails_the_replica_and_leaks_nothing() -> None:
    shm_before = _dev_shm()
    url = sqlite_url("fate")
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[k, f"v{k}"] for k in range(20_000)])
    replica = Replica(url, "two", placement="processes")
    try:
        endpoint = await replica.start()
        d = Driver(endpoint)
        await d.start()
        _, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)
        got = await d.peek(idx, t.upper.time - 1)  # type: ignore[operator]
        assert len(getattr(got, "rows", [])) == 20_000
        assert memfds_of(), "the index was expected to be shared through memfds"
        # A large write keeps maintenance busy stepping; kill it in the middle.
        t.insert([[k, "w"] for k in range(20_000, 220_000)])
        proc = replica.maintenance_process
        assert proc is not None and proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        with pytest.raises(MaintenanceFailed, match="exited"):
            await d.until(lambda: False, "the endpoint to fail", WAIT)
        with pytest.raises(ConnectionError):
            await endpoint.send(Hello(uuid.uuid4()))  # a failed replica takes nothing more
    finally:
        await replica.close()
        storage.close()
    del d, got
    gc.collect()
    assert memfds_of() == [], "a batch mapping outlived the replica"
    assert _dev_shm() - shm_before == set()


async def test_closing_the_replica_ends_the_maintenance_process() -> None:
    url = sqlite_url("close")
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[1, "a"]])
    replica = Replica(url, "two", placement="processes")
    try:
        endpoint = await replica.start()
        proc = replica.maintenance_process
        assert proc is not None and proc.process is not None
        # Serving first: a spawned child still importing its libraries (seconds, on a loaded
        # machine) is killed by a close that waits longer than `CLOSE_TIMEOUT` for it.
        d = Driver(endpoint)
        await d.start()
        _, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)
        await replica.close()
        assert proc.process.returncode == 0
    finally:
        await replica.close()
        storage.close()
    del d
    gc.collect()
    assert memfds_of() == []


@contextlib.asynccontextmanager
async def served_index(tmp_path: Path, tag: str, **controller_kw: Any
                       ) -> AsyncIterator[tuple[Table, ReplicaProcess, Controller]]:
    """A 5,000-row table indexed by a `twofold replica` process (two runtimes, maintenance in
    a process of its own) that a controller drives; the table's storage ticks."""
    url = sqlite_url(tag)
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[k, f"v{k}"] for k in range(5_000)])
    rp = ReplicaProcess(url, "two", log=tmp_path / "replica.log")
    try:
        await rp.astart(0)
        with storage.ticker(0.05):
            async with Controller({1: rp.connect}, backoff=fast_backoff,
                                  config=InstanceConfig(storage=url), **controller_kw) as c:
                await c.create_dataflow(table_index(SRC, IDX))
                await c.wait_for_frontier(IDX, t.upper)
                yield t, rp, c
    finally:
        rp.kill()
        storage.close()


def _subscribe(c: Controller) -> tuple[GlobalId, DataflowDescription]:
    sid = c.new_transient_id()
    return sid, DataflowDescription(
        "sub", source_imports={GlobalId.user(10): SourceImport("table/t", KV)},
        sink_exports={sid: SinkDesc(GlobalId.user(10), KV, SubscribeSink())})


async def test_controller_replays_onto_a_replica_restarted_after_its_maintenance_died(
        tmp_path: Path) -> None:
    shm_before = _dev_shm()
    async with served_index(tmp_path, "replay", read_policy=LagWindow(60_000)) as (t, rp, c):
        _, desc = _subscribe(c)
        sub = await c.subscribe(desc)
        batches: list[SubscribeBatch] = []

        async def collect() -> None:
            async for b in sub:
                batches.append(b)

        collector = asyncio.create_task(collect())
        await until(lambda: bool(batches), "the subscribe's first batch")
        assert rp.proc is not None
        (child,) = children(rp.proc.pid)
        assert memfds_of(child), "the maintenance process shares no batches"
        # Peeks outstanding across the failure: at times the index has not reached.
        future = (t.upper.time or 0) + 400
        outstanding = [asyncio.create_task(c.peek(IDX, timestamp=future + i, timeout=60))
                       for i in range(5)]
        t.insert([[k, "x"] for k in range(5_000, 6_000)])
        os.kill(child, signal.SIGKILL)
        code = await asyncio.to_thread(rp.proc.wait, WAIT)
        assert code != 0, "twofold replica must exit non-zero when maintenance dies"
        t.delete([[k, "x"] for k in range(5_000, 5_500)])
        await rp.astart()
        answers = await asyncio.wait_for(asyncio.gather(*outstanding), 60)
        for i, rows in enumerate(answers):
            assert multiset(rows) == table_at(t, future + i)
        ts = c.frontier(IDX).step_back()
        assert ts is not None
        assert multiset(await c.peek(IDX, timestamp=ts, timeout=WAIT)) == table_at(t, ts)
        last = t.upper
        await until(lambda: bool(batches) and last.less_equal(batches[-1].upper),
                    "the subscribe to pass the last write")
        await sub.aclose()
        collector.cancel()
        assert not c.state.peeks and not c.deliveries.peeks
        assert c.state.regression_count == 0
        # Gap-free and exact: contiguous batches whose updates sum to the table at each upper.
        for a, b in itertools.pairwise(batches):
            assert a.upper == b.lower, (a.lower, a.upper, b.lower, b.upper)
        acc: dict[tuple[Any, ...], int] = {}
        for b in batches:
            for _, row, diff in b.updates or []:
                acc[tuple(row)] = acc.get(tuple(row), 0) + diff
            up = b.upper.time
            assert up is not None
            assert {k: v for k, v in acc.items() if v} == table_at(t, up - 1), up
    assert _dev_shm() - shm_before == set()


async def test_sigkill_of_the_front_ends_the_maintenance_process_within_a_second(
        tmp_path: Path) -> None:
    shm_before = _dev_shm()
    async with served_index(tmp_path, "front") as (t, rp, _):
        assert rp.proc is not None
        (child,) = children(rp.proc.pid)
        assert memfds_of(child)
        # Keep maintenance busy, so the exit cannot wait for a quiet moment.
        t.insert([[k, "w"] for k in range(5_000, 150_000)])
        killed = time.monotonic()
        rp.kill()
        while alive(child) and time.monotonic() - killed < 1.0:
            await asyncio.sleep(0.01)
        assert not alive(child), "the maintenance process outlived its front by 1 s"
    assert _dev_shm() - shm_before == set()
