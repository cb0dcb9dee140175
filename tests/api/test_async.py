"""The async API (`open_async`) end to end, and driving a running `twofold replica` process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import twofold
from twofold import col, count, sum


async def test_async_database_end_to_end(tmp_path: Path) -> None:
    async with twofold.open_async(tick_interval=0.01, timeout=20) as db:
        orders = db.create_table("orders", {"id": int, "customer": int, "amount": float})
        orders.insert([(1, 10, 5.0), (2, 10, 7.5), (3, 11, 1.0)])
        revenue = orders.group_by("customer").agg(sum("amount").alias("revenue"), count())
        idx = await db.create_index("revenue", revenue, key="customer")
        assert (await db.lookup(idx, 10)).rows == [(10, 12.5, 2)]
        assert sorted((await revenue.collect_async()).rows) == [(10, 12.5, 2), (11, 1.0, 1)]
        view = await db.create_materialized_view("big", orders.filter(col("amount") > 2))
        assert len(await db.query(view)) == 2
        n = await db.copy_to(idx, tmp_path / "rev.csv")
        assert n == 2
        async with await db.subscribe(idx) as sub:
            first = await anext(sub)
            assert sorted(r for _, r, _ in first.updates) == [(10, 12.5, 2), (11, 1.0, 1)]
            t = orders.delete([(3, 11, 1.0)]).timestamp
            async for batch in sub:
                if batch.updates:
                    assert batch.updates == [(t, (11, 1.0, 1), -1)]
                    break
        await db.drop(idx)
        with pytest.raises(twofold.TwofoldError, match="async"):
            orders.collect()  # the blocking call is for `twofold.open` databases
    with pytest.raises(twofold.DatabaseClosed):
        await db.query(orders)


def test_drives_a_running_replica_process(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from twofold.cli import main; main()", "replica",
         "--listen", "127.0.0.1:0", "--storage", storage, "--token-file", str(token),
         "--log-level", "WARNING"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        address = line.split()[-1]
        with twofold.open(storage, replicas=[address], token="s3cret", tick_interval=0.01,
                          timeout=20) as db:
            assert db.replica is None  # nothing in process: the replica is the other one
            t = db.create_table("t", {"k": int, "v": str})
            t.insert([(1, "a"), (2, "b")])
            idx = db.create_index("by_k", t, key="k")
            assert idx.lookup(2).rows == [(2, "b")]
            assert sorted(t.filter(col("k") > 0).collect().rows) == [(1, "a"), (2, "b")]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
