"""Storage throughput: append and snapshot, SQLite against memory, side by side in one run.

Appends N updates of a 3-column row (int, str, float) in batches of B through
`compare_and_append`, then reads them back with `snapshot` (which decodes, concatenates and
consolidates every stored batch) and with a `listen` from the start (what a runtime reading a
source does). Prints updates/s per backend (best of --repeat runs, the backends alternating so
both see the same machine noise) and the SQLite/memory ratio.
Bars: SQLite append >= 300k updates/s, snapshot >= 1M updates/s.

    python bench/storage.py [--quick] [--updates N] [--batch B]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from bars import Verdicts  # bench/ is the script's directory
from twofold.protocol import ColumnType, RelationDesc
from twofold.storage import Storage, open_storage, update_schema

DESC = RelationDesc(
    names=["id", "name", "score"],
    types=[ColumnType("int", nullable=False), ColumnType("str"), ColumnType("float")],
)


def make_batches(total: int, batch: int) -> list[pa.Table]:
    """Distinct rows (so consolidation keeps every one); batch i is at time i + 1."""
    schema = update_schema(DESC)
    rng = np.random.default_rng(7)
    out = []
    for i, start in enumerate(range(0, total, batch)):
        n = min(batch, total - start)
        ids = np.arange(start, start + n, dtype=np.int64)
        names = pa.array([f"name-{j % 1000}" for j in range(n)], pa.large_string())
        out.append(pa.Table.from_arrays([
            pa.array(ids), names, pa.array(rng.random(n)),
            pa.array(np.full(n, i + 1, dtype=np.uint64)), pa.array(np.ones(n, dtype=np.int64)),
        ], schema=schema))
    return out


def run(storage: Storage, batches: list[pa.Table], name: str) -> dict[str, float]:
    """Updates/s for append, snapshot and listen on a fresh shard."""
    shard = storage.create_shard(name, DESC)
    shard.compare_and_append([], 0, 1)
    total = sum(b.num_rows for b in batches)
    start = time.perf_counter()
    for i, b in enumerate(batches):
        shard.compare_and_append(b, i + 1, i + 2)
    append_s = time.perf_counter() - start
    start = time.perf_counter()
    snap = shard.snapshot(len(batches))
    snapshot_s = time.perf_counter() - start
    assert snap.num_rows == total, (snap.num_rows, total)
    start = time.perf_counter()
    listened = sum(len(b) for b in shard.listen(0).poll())
    listen_s = time.perf_counter() - start
    assert listened == total, (listened, total)
    return {"append": total / append_s, "snapshot": total / snapshot_s, "listen": total / listen_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k updates, a smoke run")
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3, help="report the best of N runs")
    args = parser.parse_args()
    total = 100_000 if args.quick else args.updates
    batches = make_batches(total, args.batch)
    repeat = 1 if args.quick else args.repeat
    args.repeat = repeat
    print(f"storage bench: {total:,} updates of (int, str, float) in batches of {args.batch:,}, "
          f"best of {repeat}")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = open_storage(f"sqlite://{Path(tmp) / 'bench.db'}")
        memory = open_storage("memory://")
        try:
            warm = make_batches(20_000, 5_000)  # load polars/arrow kernels before timing
            run(memory, warm, "warm")
            run(sqlite, warm, "warm")
            mem_runs, sql_runs = [], []
            for i in range(args.repeat):  # alternate, so both backends see the same noise
                mem_runs.append(run(memory, batches, f"bench-{i}"))
                sql_runs.append(run(sqlite, batches, f"bench-{i}"))
            mem = {k: max(r[k] for r in mem_runs) for k in mem_runs[0]}
            sql = {k: max(r[k] for r in sql_runs) for k in sql_runs[0]}
        finally:
            sqlite.close()
            memory.close()
    for what in ("append", "snapshot", "listen"):
        print(f"{what:<8} sqlite {sql[what]:>12,.0f} updates/s   memory {mem[what]:>12,.0f} "
              f"updates/s   sqlite/memory {sql[what] / mem[what]:.2f}")
    verdicts = Verdicts("storage")
    # `run` asserts that every snapshot and listen returned all `total` updates.
    verdicts.ok("appended updates read back by snapshot and listen", 0,
                total * args.repeat * 2)
    verdicts.at_least("sqlite append updates/s", sql["append"], 300_000, "{:,.0f}")
    verdicts.at_least("sqlite snapshot updates/s", sql["snapshot"], 1_000_000, "{:,.0f}")
    verdicts.exit()

if __name__ == "__main__":
    main()
