"""Many machines, simulated: two `twofold replica` processes, two writer processes and the
controller (this process) sharing one PostgreSQL and one S3 bucket.

The writers are plain storage clients (as writers on other machines would be): each inserts and
retracts rows of one table through `open_storage(url)`, stamped by the shared oracle. The
controller maintains an aggregate index on both replicas. While the writers run, one replica is
SIGKILLed and restarted (it rehydrates from the bucket), then the other; at every time checked,
the index read through the controller equals a one-off query of the same relation at that time
and the answer computed here from the table's shard itself.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tests.controller.proxy import ReplicaProcess

import twofold
from twofold import col, count, sum
from twofold.storage import open_storage, to_tuples
from twofold.testing.pytest_servers import Servers

pytestmark = pytest.mark.timeout(300)

SPAWN = multiprocessing.get_context("spawn")


def process_writer(url: str, writer: int, rounds: int, go: Any) -> None:
    """Child process: insert a few rows per round and retract some earlier ones."""
    rng = random.Random(writer)
    with open_storage(url) as storage:
        table = storage.table("events")
        go.wait()
        live: list[list[int]] = []
        for i in range(rounds):
            rows = [[rng.randrange(6), writer * 1000 + i * 10 + j] for j in range(3)]
            table.insert(rows)
            live += rows
            if i % 3 == 2:
                gone = [live.pop(rng.randrange(len(live))) for _ in range(2)]
                table.delete(gone)
            time.sleep(0.02)


def expected_at(storage: Any, ts: int) -> list[tuple[int, int, int]]:
    """The aggregate at `ts`, computed from the table's shard."""
    sums: Counter[int] = Counter()
    counts: Counter[int] = Counter()
    for (k, v), _, d in to_tuples(storage.table("events").snapshot(ts)):
        sums[k] += v * d
        counts[k] += d
    return sorted((k, sums[k], counts[k]) for k in counts if counts[k])


def test_replicas_writers_and_controller_share_one_database_and_bucket(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.storage_url("postgres+s3", tmp_path)
    with open_storage(url) as storage, \
            ReplicaProcess(url, runtimes="one") as r1, ReplicaProcess(url, runtimes="one") as r2:
        addresses = [f"{h}:{p}" for h, p in (r1.start(), r2.start())]
        with twofold.open(url, replicas=addresses, tick_interval=0.05, timeout=60,
                          retain_history=120) as db:
            events = db.create_table("events", {"k": int, "v": int})
            totals = events.group_by("k").agg(sum("v").alias("total"), count().alias("n"))
            index = db.create_index("totals", totals, key="k")
            go = SPAWN.Event()
            writers = [SPAWN.Process(target=process_writer, args=(url, w, 30, go))
                       for w in (1, 2)]
            for p in writers:
                p.start()
            go.set()
            checked = 0

            def check_now() -> None:
                nonlocal checked
                upper = storage.table("events").upper.time
                assert upper is not None
                if upper == 0:  # nothing is readable yet: the first tick has not landed
                    return
                ts = upper - 1
                via_index = sorted(index.collect(as_of=ts).rows)
                one_off = sorted(totals.filter(col("n") > 0).collect(as_of=ts).rows)
                assert via_index == one_off == expected_at(storage, ts), ts
                checked += 1

            kills = [(r1, 1.0), (r2, 2.5)]
            started = time.monotonic()
            while any(p.is_alive() for p in writers) or kills:
                check_now()
                if kills and time.monotonic() - started > kills[0][1]:
                    replica, _ = kills.pop(0)
                    replica.kill()
                    check_now()  # the other replica answers meanwhile
                    replica.start()  # same port: the controller reconnects and replays
                time.sleep(0.1)
            for p in writers:
                p.join(timeout=60)
                assert p.exitcode == 0
            check_now()
            # Every time a write landed at, after the fact.
            shard = storage.table("events").shard
            since = shard.since.time
            assert since is not None
            times = sorted({t for b in shard.listen(since).poll() for _, t, _ in b.to_tuples()})
            assert len(times) >= 40
            for ts in times[:: max(1, len(times) // 25)]:
                assert sorted(index.collect(as_of=ts).rows) == expected_at(storage, ts), ts
            # (a check after each kill and one at the end, at least)
            assert r1.starts == 2 and r2.starts == 2 and checked >= 3
