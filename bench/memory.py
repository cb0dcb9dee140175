"""Benchmark: the replica's resident memory for a 1 M-row index, threads vs processes.

A `twofold replica` (served as in `isolation.py`) indexes a table of `--rows` rows; once the index
has caught up and its merges have settled, we read the memory of the replica process and, with
the process placement, of its maintenance process: RSS (resident pages, shared ones counted in
each process that maps them) and PSS (shared pages divided among the processes mapping them —
the combined PSS is what the two processes really use). With processes, a published batch lives
once, in a memfd mapped by both; the second interpreter with its libraries is the rest.

Bar (issue 13): combined PSS with processes <= 1.25x the threaded replica's.

Run: `python bench/memory.py` (`--quick`: 200 k rows). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bars import Verdicts
from isolation import DESC, Mode, block, child, index_dataflow, session, settle
from twofold.protocol import GlobalId, PeekRows, Schedule
from twofold.storage import open_storage

SRC, IDX = GlobalId.user(1), GlobalId.user(2)


def rollup_kb(pid: int) -> dict[str, int]:
    """`/proc/PID/smaps_rollup` in kB (Rss, Pss, Pss_Anon, Pss_File, Pss_Shmem, ...)."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1])
    return out


def memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of `pid` in kB."""
    r = rollup_kb(pid)
    return r.get("Rss", 0), r.get("Pss", 0)


def breakdown(pid: int) -> str:
    """Where a process's PSS is: anonymous (heap, libraries' relocated data), file-backed
    (code), shared memory (memfds)."""
    r = rollup_kb(pid)
    return "/".join(f"{r.get(k, 0) / 1024:,.0f}" for k in ("Pss_Anon", "Pss_File", "Pss_Shmem"))


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


async def measure(mode: Mode, rows: int) -> tuple[int, int, int, int]:
    """(front RSS, front PSS, maintenance RSS, maintenance PSS) in kB; prints each process's
    PSS by kind."""
    with tempfile.TemporaryDirectory(prefix="tf-memory-") as tmp:
        url = f"sqlite:///{tmp}/memory.db"
        storage = open_storage(url)
        t = storage.create_table("t", DESC)
        for start in range(0, rows, 250_000):
            t.insert(block(start, min(250_000, rows - start)))
        with child("serve", url, mode, ready="LISTENING") as (proc, line):
            _, host, port = line.split()
            async with session(host, int(port)) as s:
                await s.conn.send(index_dataflow("idx", t, SRC, IDX))
                await s.conn.send(Schedule(IDX))
                await s.caught_up(IDX, t)
                await settle(s)
                r = await s.peek(IDX, (t.upper.time or 1) - 1, literal_constraints=[[7]])
                assert isinstance(r.result, PeekRows) and r.result.rows == [([7, 49], 1)], r
                time.sleep(1.0)  # let freed memory go back (allocator decay), not synchronisation
                front = memory_kb(proc.pid)
                kids = children(proc.pid)
                maint = memory_kb(kids[0]) if kids else (0, 0)
                print(f"  {mode}: PSS anon/file/shmem MB: front {breakdown(proc.pid)}"
                      + (f"; maintenance {breakdown(kids[0])}" if kids else ""))
        storage.close()
    return (*front, *maint)


async def main(args: argparse.Namespace) -> int:
    verdicts = Verdicts("memory")
    print(f"{args.rows:,}-row index; {os.cpu_count()} cpus, load average "
          f"{os.getloadavg()[0]:.1f}")
    figures = {}
    for mode, label in (("two-threads", "threads"), ("two", "processes")):
        f_rss, f_pss, m_rss, m_pss = await measure(mode, args.rows)  # type: ignore[arg-type]
        figures[label] = (f_rss + m_rss, f_pss + m_pss)
        print(f"{label:>9}: front RSS {f_rss / 1024:,.0f} MB PSS {f_pss / 1024:,.0f} MB; "
              f"maintenance RSS {m_rss / 1024:,.0f} MB PSS {m_pss / 1024:,.0f} MB; combined RSS "
              f"{(f_rss + m_rss) / 1024:,.0f} MB PSS {(f_pss + m_pss) / 1024:,.0f} MB")
    rss_ratio = figures["processes"][0] / figures["threads"][0]
    pss_ratio = figures["processes"][1] / figures["threads"][1]
    print(f"ratio processes / threads: RSS {rss_ratio:.2f} (shared pages counted twice), "
          f"PSS {pss_ratio:.2f}")
    verdicts.at_most("combined PSS processes / threads", pss_ratio, 1.25)
    verdicts.out(verdicts.summary())
    return verdicts.exit_code()


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the index")
    args = parser.parse_args()
    if args.quick:
        args.rows = 200_000
    sys.exit(asyncio.run(main(args)))


if __name__ == "__main__":
    cli()
