"""Key-addressed table writes: their cost follows the keys touched, not the table's size.

On primary-keyed tables (id int, v int, note str) of 10 k and 1 M rows, in one SQLite file
through the API, times (median of --repeat rounds, each round on fresh keys):
- `delete(keys=...)` of 1,000 keys, `update(old, new)` of 1,000 rows by key, `upsert` of 1,000
  existing keys — the key-addressed writes, which find their rows through the table's key index;
- `delete(where=...)` and `update(set=..., where=...)` of 1,000 rows — predicate writes, which
  read every row (for context: they do grow with the table).
Prints the times per size and the 1 M / 10 k ratio of each (`load` is inserting the rows, 200 k
per write, each checked against the key index). Every write's count is checked.
Bars: the ratio of the key-addressed delete's and update's fastest rounds <= 3 (ideally near 1;
the fastest round is the estimate least disturbed by a noisy, shared machine; medians are
printed too). The one-time cost of loading a table's key index (first checked write in a process) is
printed too.

    python bench/writes.py [--quick] [--repeat N] [--keys K]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

import twofold
from bars import Verdicts  # bench/ is the script's directory
from twofold import col

CHUNK = 200_000
OPS = ("key delete", "key update", "upsert", "where delete", "where update")


def rows(ids: np.ndarray, v: np.ndarray) -> pa.Table:
    return pa.table({"id": ids, "v": v, "note": pa.array(np.char.add("n", (ids % 97).astype(str)))})


class Sized:
    """One primary-keyed table of `n` rows, and what each of its rows holds now (`v`)."""

    def __init__(self, db: twofold.Database, n: int, seed: int) -> None:
        self.n = n
        self.t = db.create_table(f"t{n}", {"id": int, "v": int, "note": str}, primary_key="id")
        self.v = np.arange(n, dtype=np.int64) * 3
        start = time.perf_counter()
        for lo in range(0, n, CHUNK):
            ids = np.arange(lo, min(n, lo + CHUNK), dtype=np.int64)
            self.t.insert(rows(ids, self.v[ids]))
        # A write that deletes nothing: the first checked write after the load absorbs its last
        # chunk into the key index; keep that out of the timed rounds.
        self.t.delete(keys=[])
        self.load_s = time.perf_counter() - start
        self.rng = np.random.default_rng(seed)
        self.failed = 0
        self.total = 0

    def keys(self, k: int) -> np.ndarray:
        return np.sort(self.rng.choice(self.n, size=k, replace=False)).astype(np.int64)

    def check(self, got: int, want: int) -> None:
        self.total += 1
        if got != want:
            self.failed += 1
            print(f"  table of {self.n:,}: a write affected {got:,} rows, expected {want:,}")


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    got = fn()
    return time.perf_counter() - start, got


def round_of(s: Sized, k: int) -> dict[str, float]:
    """One round of every operation; deleted rows are put back (untimed), so the table keeps
    its size."""
    out: dict[str, float] = {}
    keys = s.keys(k)
    out["key delete"], got = timed(lambda: s.t.delete(keys=keys.tolist()).count)
    s.check(got, k)
    s.t.insert(rows(keys, s.v[keys]))
    keys = s.keys(k)
    out["key update"], got = timed(
        lambda: s.t.update(rows(keys, s.v[keys]), rows(keys, s.v[keys] + 1)).count)
    s.check(got, k)
    s.v[keys] += 1
    keys = s.keys(k)
    out["upsert"], got = timed(lambda: s.t.upsert(rows(keys, s.v[keys] + 2)).replaced)
    s.check(got, k)
    s.v[keys] += 2
    lo = int(s.rng.integers(0, s.n - k))
    span = (col("id") >= lo) & (col("id") < lo + k)
    out["where delete"], got = timed(lambda: s.t.delete(where=span).count)
    s.check(got, k)
    ids = np.arange(lo, lo + k, dtype=np.int64)
    s.t.insert(rows(ids, s.v[ids]))
    out["where update"], got = timed(
        lambda: s.t.update(set={"v": col("v") + 5}, where=span).count)
    s.check(got, k)
    s.v[ids] += 5
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 k and 100 k rows, a smoke run")
    parser.add_argument("--repeat", type=int, default=9, help="rounds; report the median")
    parser.add_argument("--keys", type=int, default=1_000, help="rows per write")
    args = parser.parse_args()
    sizes = (10_000, 100_000) if args.quick else (10_000, 1_000_000)
    print(f"writes bench: primary-keyed tables (id int, v int, note str) of {sizes[0]:,} and "
          f"{sizes[1]:,} rows, {args.keys:,} rows per write, median of {args.repeat} rounds")
    with tempfile.TemporaryDirectory() as tmp, twofold.open(
            Path(tmp) / "writes.db", runtimes="one", tick_interval=0.1) as db:
        tables = [Sized(db, n, seed=i) for i, n in enumerate(sizes)]
        warm = Sized(db, 5_000, seed=9)  # load the kernels before timing
        round_of(warm, 100)
        times: dict[int, dict[str, list[float]]] = {s.n: {op: [] for op in OPS} for s in tables}
        for _ in range(args.repeat):
            for s in tables:  # alternate, so both sizes see the same machine noise
                for op, secs in round_of(s, args.keys).items():
                    times[s.n][op].append(secs)
    med = {n: {op: statistics.median(v) * 1000 for op, v in ops.items()}
           for n, ops in times.items()}
    best = {n: {op: min(v) * 1000 for op, v in ops.items()} for n, ops in times.items()}
    print(f"{'rows':>10}  {'load':>9}  " + "  ".join(f"{op:>12}" for op in OPS) + "  (median)")
    for s in tables:
        print(f"{s.n:>10,}  {s.load_s:>8.2f}s  "
              + "  ".join(f"{med[s.n][op]:>10.1f}ms" for op in OPS))
    small, big = sizes
    ratios = {op: med[big][op] / med[small][op] for op in OPS}
    print(f"{'ratio':>10}  {big // small:>8}x  "
          + "  ".join(f"{ratios[op]:>12.2f}" for op in OPS))
    best_ratios = {op: best[big][op] / best[small][op] for op in OPS}
    print(f"{'best ratio':>10}  {'':>9}  " + "  ".join(f"{best_ratios[op]:>12.2f}" for op in OPS)
          + "  (fastest round of each)")
    verdicts = Verdicts("writes")
    verdicts.ok("writes affected the rows they should",
                sum(s.failed for s in tables) + warm.failed,
                sum(s.total for s in tables) + warm.total)
    verdicts.at_most(f"key delete {big:,} / {small:,} rows (best)", best_ratios["key delete"],
                     3.0)
    verdicts.at_most(f"key update {big:,} / {small:,} rows (best)", best_ratios["key update"],
                     3.0)
    verdicts.exit()


if __name__ == "__main__":
    main()
