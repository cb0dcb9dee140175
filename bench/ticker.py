"""The front's `twofold-ticker` thread under a busy event loop: its context switches and CPU.

A `twofold.open_async()` database in the default embedded layout (SQLite scratch storage, the
maintenance runtime in a child process), a 1,000-row indexed table and `--tables - 1` more
empty ones; eight coroutines do `db.lookup` in a closed loop for `--seconds`. The ticker thread's
voluntary and involuntary switches come from `/proc/self/task/<tid>/status`, its CPU from
`schedstat`; per tick too. Before the readers start, the ticker's rate is measured for
`--seconds` with the loop idle: the bar is the busy rate against that (a read "now" waits for
the next tick, so a ticker the loop starves makes every such read later). Each tick's sqlite3
calls release the interpreter lock, and taking it back from a busy loop thread costs up to a
switch interval of wake-ups (CPython 3.11's lock is not fair), so this is what the loop pays
for the ticker. Linux only.

    python bench/ticker.py [--seconds 10] [--tables 1]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import threading
import time
from pathlib import Path

import twofold
from bars import Verdicts
from twofold.storage.table import Ticker


def _thread_stat(tid: int) -> tuple[int, int, float]:
    """(voluntary switches, involuntary switches, CPU seconds) of thread `tid` of this process."""
    vol = invol = 0
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            vol = int(line.split()[1])
        elif line.startswith("nonvoluntary_ctxt_switches:"):
            invol = int(line.split()[1])
    cpu_ns = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
    return vol, invol, cpu_ns / 1e9


async def run(seconds: float, tables: int, verdicts: Verdicts) -> str:
    async with twofold.open_async(None) as db:
        await db.sql("CREATE TABLE t (k bigint, v bigint)")
        await db.sql("INSERT INTO t VALUES " + ",".join(f"({i},{i})" for i in range(1000)))
        for n in range(1, tables):
            await db.sql(f"CREATE TABLE t{n} (k bigint)")
        idx = await db.create_index("t_k", db.get("t"), ["k"])
        await db.lookup(idx, 1)
        thread = next(t for t in threading.enumerate() if t.name == "twofold-ticker")
        ticker = next(o for o in gc.get_objects() if isinstance(o, Ticker))
        tid = thread.native_id
        assert tid is not None
        idle0, t_idle = ticker.ticks, time.monotonic()
        await asyncio.sleep(seconds)
        idle_rate = (ticker.ticks - idle0) / (time.monotonic() - t_idle)
        stop = False
        done = failed = 0

        async def worker(i: int) -> None:
            nonlocal done, failed
            k = i
            while not stop:
                rows = await db.lookup(idx, k % 1000)
                if len(rows) != 1:
                    failed += 1
                k += 7
                done += 1

        tasks = [asyncio.create_task(worker(i)) for i in range(8)]
        await asyncio.sleep(1.0)
        v0, n0, c0 = _thread_stat(tid)
        ticks0, done0, t0 = ticker.ticks, done, time.monotonic()
        await asyncio.sleep(seconds)
        v1, n1, c1 = _thread_stat(tid)
        ticks, lookups, el = ticker.ticks - ticks0, done - done0, time.monotonic() - t0
        stop = True
        await asyncio.gather(*tasks)
    per = max(ticks, 1)
    verdicts.ok("lookups answered with their one row", failed, lookups)
    verdicts.at_least("ticks/s busy loop / idle loop", ticks / el / idle_rate, 0.5)
    return (f"ticker: {(v1 - v0) / el:.0f} voluntary/s {(n1 - n0) / el:.0f} involuntary/s, "
            f"CPU {100 * (c1 - c0) / el:.2f}%, {ticks / el:.1f} ticks/s "
            f"({(v1 - v0 + n1 - n0) / per:.0f} switches and {1e6 * (c1 - c0) / per:.0f} us CPU "
            f"per tick) | {lookups / el:.0f} lookups/s | {tables} tables, {el:.1f} s "
            f"| idle {idle_rate:.1f} ticks/s | load {os.getloadavg()[0]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tables", type=int, default=1)
    args = parser.parse_args()
    verdicts = Verdicts("ticker")
    print(asyncio.run(run(args.seconds, args.tables, verdicts)))
    verdicts.exit()


if __name__ == "__main__":
    main()
