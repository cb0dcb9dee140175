"""Storage throughput: append and snapshot, SQLite against memory, side by side in one run.

Appends N updates of a 3-column row (int, str, float) in batches of B through
`compare_and_append`, then reads them back with `snapshot` (which decodes, concatenates and
consolidates every stored batch). Prints updates/s per backend and the SQLite/memory ratio.
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

from twofold.protocol import ColumnType, RelationDesc
from twofold.storage import Storage, open_storage, update_schema

DESC = RelationDesc(
    names=["id", "name", "score"],
    types=[ColumnType("int", nullable=False), ColumnType("str"), ColumnType("float")],
)


def make_batches(total: int, batch: int) -> list[pa.Table]:
    """Distinct rows (so consolidation keeps every one), one time per batch."""
    schema = update_schema(DESC)
    rng = np.random.default_rng(7)
    out = []
    for i, start in enumerate(range(0, total, batch)):
        n = min(batch, total - start)
        ids = np.arange(start, start + n, dtype=np.int64)
        names = pa.array([f"name-{j % 1000}" for j in range(n)], pa.large_string())
        out.append(pa.Table.from_arrays([
            pa.array(ids), names, pa.array(rng.random(n)),
            pa.array(np.full(n, i, dtype=np.uint64)), pa.array(np.ones(n, dtype=np.int64)),
        ], schema=schema))
    return out


def run(storage: Storage, batches: list[pa.Table]) -> tuple[float, float, int]:
    shard = storage.create_shard("bench", DESC)
    total = sum(b.num_rows for b in batches)
    start = time.perf_counter()
    for i, b in enumerate(batches):
        shard.compare_and_append(b, i, i + 1)
    append_s = time.perf_counter() - start
    start = time.perf_counter()
    snap = shard.snapshot(len(batches) - 1)
    snapshot_s = time.perf_counter() - start
    assert snap.num_rows == total, (snap.num_rows, total)
    return total / append_s, total / snapshot_s, snap.num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k updates, a smoke run")
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    args = parser.parse_args()
    total = 100_000 if args.quick else args.updates
    batches = make_batches(total, args.batch)
    print(f"storage bench: {total:,} updates of (int, str, float) in batches of {args.batch:,}")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = open_storage(f"sqlite://{Path(tmp) / 'bench.db'}")
        memory = open_storage("memory://")
        try:
            mem_append, mem_snap, _ = run(memory, batches)
            sql_append, sql_snap, _ = run(sqlite, batches)
        finally:
            sqlite.close()
            memory.close()
    print(f"append   sqlite {sql_append:>12,.0f} updates/s   memory {mem_append:>12,.0f} updates/s"
          f"   sqlite/memory {sql_append / mem_append:.2f}")
    print(f"snapshot sqlite {sql_snap:>12,.0f} updates/s   memory {mem_snap:>12,.0f} updates/s"
          f"   sqlite/memory {sql_snap / mem_snap:.2f}")
    ok_append, ok_snap = sql_append >= 300_000, sql_snap >= 1_000_000
    print(f"bars: sqlite append >= 300,000/s {'PASS' if ok_append else 'FAIL'}; "
          f"sqlite snapshot >= 1,000,000/s {'PASS' if ok_snap else 'FAIL'}")


if __name__ == "__main__":
    main()
