"""Engine benchmarks (`spec/engine.md` performance bar). Run: `python bench/engine.py [--quick]`.

Prints, in one run: arrangement ingest (int and string keys, with merging and compaction),
maintained group-by count/sum (int keys; with the export compacted; string keys), delta join
against a 1 M-row arranged side, point lookups on a 1 M-row snapshot (single and batched),
memory per arranged row, and step time at 100 k vs 1 M rows of state (with their ratio: a
step's cost must not grow with total state), and full reads of a large snapshot (plain
re-consolidation vs memoised batch collections, same run).
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import time
from collections.abc import Callable

import numpy as np
import polars as pl

from bars import Verdicts  # bench/ is the script's directory
from twofold.engine import Arrangement, Dataflow
from twofold.engine.frames import DIFF, TIME, schema
from twofold.engine.snapshot import ArrangementSnapshot, _accumulate, _collect
from twofold.protocol import (
    Aggregate,
    BuildDesc,
    ColumnType,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    IndexDesc,
    Join,
    Reduce,
    RelationDesc,
    SourceImport,
)

_CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter

INT = ColumnType("int", False)
STR = ColumnType("str", False)
KV = RelationDesc(["k", "v"], [INT, INT])
SV = RelationDesc(["k", "v"], [STR, INT])
KF = RelationDesc(["k", "v"], [INT, ColumnType("float", False)])


def updates(
    rng: np.random.Generator, n: int, keys: int, t: int, *, strings: bool = False
) -> pl.DataFrame:
    """`n` updates at time `t`: 80% inserts, 20% retractions (as in the reference workload)."""
    k = rng.integers(0, keys, n)
    diff = np.where(rng.random(n) < 0.8, 1, -1)
    col = pl.Series("c0", k).cast(pl.String) if strings else pl.Series("c0", k)
    return pl.DataFrame(
        {
            "c0": col,
            "c1": rng.integers(0, 1000, n),
            TIME: np.full(n, t, np.uint64),
            DIFF: diff.astype(np.int64),
        }
    )


def bench_ingest(batches: int, size: int, *, strings: bool) -> float:
    rng = np.random.default_rng(1)
    frames = [updates(rng, size, 100_000, t, strings=strings) for t in range(batches)]
    arr = Arrangement(SV if strings else KV, [0])
    start = _clock()
    for t, frame in enumerate(frames):
        arr.insert(frame, Frontier.at(t + 1))
        arr.compact(Frontier.at(max(0, t - 5)))
    return batches * size / (_clock() - start)


def source_dataflow(
    plan_of: Callable[[GlobalId, GlobalId], object],
    out_desc: RelationDesc,
    a_desc: RelationDesc = KV,
) -> tuple[Dataflow, GlobalId, GlobalId]:
    a, b, out = GlobalId.user(1), GlobalId.user(2), GlobalId.user(3)
    desc = DataflowDescription(
        "bench",
        source_imports={a: SourceImport("a", a_desc), b: SourceImport("b", KV)},
        objects_to_build=[BuildDesc(out, plan_of(a, b))],  # type: ignore[arg-type]
        index_exports={out: (IndexDesc(out, [0]), out_desc)},
        as_of=Frontier.minimum(),
    )
    return Dataflow(desc), a, b


def drive(
    df: Dataflow, a: GlobalId, b: GlobalId, frames: list[pl.DataFrame], t0: int,
    *, keep: int | None = None,
) -> list[float]:
    """Push one frame per time into `a` and step; returns per-step seconds. With `keep`, the
    export is compacted after each step to `keep` times of history (as a runtime following a
    read policy would), inside the timed region."""
    out = []
    for j, frame in enumerate(frames):
        t = t0 + j
        df.push(a, frame.with_columns(pl.lit(t, pl.UInt64).alias(TIME)))
        df.advance_source(a, Frontier.at(t + 1))
        df.advance_source(b, Frontier.at(t + 1))
        start = _clock()
        df.step()
        if keep is not None:
            df.allow_compaction(GlobalId.user(3), Frontier.at(max(0, t - keep)))
        out.append(_clock() - start)
    return out


def bench_group_by(
    batches: int, size: int, *, keep: int | None = None, strings: bool = False,
    floats: bool = False,
) -> float:
    """Input updates/s of a maintained count/sum by key (int keys: exact key codes; string
    keys: hashed codes confirmed against stored keys; `floats`: the summed values are money
    amounts as floats, 0.00-999.99, summed exactly)."""
    rng = np.random.default_rng(2)
    frames = [updates(rng, size, 100_000, 0, strings=strings) for _ in range(batches)]
    if floats:
        frames = [f.with_columns(pl.Series("c1", rng.integers(0, 100_000, size) / 100))
                  for f in frames]
    value = ColumnType("float") if floats else ColumnType("int")
    rel = RelationDesc(["k", "count", "sum"], [STR if strings else INT, INT, value])
    df, a, b = source_dataflow(
        lambda a, b: Reduce(Get(a), [0], [Aggregate("count"), Aggregate("sum", 1)]),
        rel,
        SV if strings else KF if floats else KV,
    )
    # Inserts only for the first batch so retractions have something to retract.
    frames[0] = frames[0].with_columns(pl.lit(1, pl.Int64).alias(DIFF))
    secs = drive(df, a, b, frames, 0, keep=keep)
    return batches * size / sum(secs)


def bench_join(rows: int, batches: int, size: int) -> float:
    rng = np.random.default_rng(3)
    rel = RelationDesc(["k", "v", "k2", "v2"], [INT, INT, INT, INT])
    df, a, b = source_dataflow(lambda a, b: Join(Get(a), Get(b), [0], [0]), rel)
    big = pl.DataFrame(
        {
            "c0": rng.integers(0, rows, rows),
            "c1": rng.integers(0, 1000, rows),
            TIME: np.zeros(rows, np.uint64),
            DIFF: np.ones(rows, np.int64),
        }
    )
    df.push(b, big)
    df.advance_source(a, Frontier.at(1))
    df.advance_source(b, Frontier.at(1))
    df.step()
    frames = [
        updates(rng, size, rows * 10, 0).with_columns(pl.lit(1, pl.Int64).alias(DIFF))
        for _ in range(batches)
    ]
    secs = drive(df, a, b, frames, 1)
    return batches * size / sum(secs)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def million_row_snapshot(rows: int) -> tuple[Arrangement, float, float]:
    """An arrangement of `rows` (k, v) rows merged into one batch, with its peak memory per
    row (process RSS growth, including the input frame; run first, so the peak is this
    build's) and the bytes per row its batches hold."""
    rng = np.random.default_rng(4)
    gc.collect()
    base = _rss()
    arr = Arrangement(KV, [0])
    frame = pl.DataFrame(
        {
            "c0": rng.permutation(rows),
            "c1": rng.integers(0, 1000, rows),
            TIME: np.zeros(rows, np.uint64),
            DIFF: np.ones(rows, np.int64),
        }
    )
    input_bytes = frame.estimated_size()
    arr.insert(frame, Frontier.at(1))
    del frame
    arr.compact(Frontier.at(0))
    arr.merge_all()
    gc.collect()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    # What the arrangement itself references (RSS after the build also counts memory the
    # allocators keep for reuse).
    held = sum(
        b.data.estimated_size() + b.codes.nbytes + b.hashes.nbytes for b in arr.snapshot().data
    )
    del input_bytes
    return arr, peak / rows, held / rows


def bench_lookups(arr: Arrangement, rows: int, n: int, reps: int = 5) -> tuple[float, float]:
    """Median over `reps` rounds of: µs per single-key lookup (`n // 10` of them) and µs per key
    of one batched lookup of `n` keys."""
    snap = arr.snapshot()
    rng = np.random.default_rng(5)
    singles, batches = [], []
    for _ in range(reps):
        keys = rng.integers(0, rows, n)
        start = _clock()
        for k in keys[: n // 10]:
            snap.lookup_rows([[int(k)]], 0)
        singles.append((_clock() - start) / (n // 10) * 1e6)
        probe = pl.DataFrame({"k0": keys})
        start = _clock()
        found = snap.lookup(probe, 0)
        batches.append((_clock() - start) / n * 1e6)
        assert found.height == len(np.unique(keys))
    return float(np.median(singles)), float(np.median(batches))


def _plain_read(snap: ArrangementSnapshot, t: int) -> pl.DataFrame:
    """A read the way the engine did it before memoised batch collections: concatenate every
    batch's updates at times <= t and consolidate them all (the side-by-side reference)."""
    frame = _collect(snap.data, schema(snap.desc.types), le=t)
    return _accumulate(frame, snap.columns)


def bench_scan(arr: Arrangement, t: int, reps: int) -> tuple[float, float, float, int]:
    """Full read of `arr` at `t`: seconds for the plain re-consolidating read, the first
    memoised read (fills the memos), and a repeated read through a fresh snapshot (what a
    stream of full-scan peeks of an unchanged index costs); plus the row count."""
    snap = arr.snapshot()
    start = _clock()
    for _ in range(reps):
        plain = _plain_read(snap, t)
    plain_s = (_clock() - start) / reps
    start = _clock()
    first = snap.read(t)
    first_s = _clock() - start
    start = _clock()
    for _ in range(reps):
        again = arr.snapshot().read(t)
    again_s = (_clock() - start) / reps
    assert plain.height == first.height == again.height
    return plain_s, first_s, again_s, plain.height


def history_arrangement(batches: int, size: int) -> Arrangement:
    """An arrangement fed like the ingest benchmark (history kept 5 steps back): several
    batches of several times each."""
    rng = np.random.default_rng(1)
    arr = Arrangement(KV, [0])
    for t in range(batches):
        arr.insert(updates(rng, size, 100_000, t), Frontier.at(t + 1))
        arr.compact(Frontier.at(max(0, t - 5)))
    return arr


def bench_state_growth(small: int, large: int, steps: int, size: int) -> tuple[float, float]:
    """Median group-by step time over `steps` steps of `size` updates after loading `small`
    and `large` rows of state."""
    medians = []
    for rows in (small, large):
        rng = np.random.default_rng(6)
        rel = RelationDesc(["k", "count", "sum"], [INT, INT, ColumnType("int")])
        df, a, b = source_dataflow(
            lambda a, b: Reduce(Get(a), [0], [Aggregate("count"), Aggregate("sum", 1)]), rel
        )
        load = pl.DataFrame(
            {
                "c0": np.arange(rows),
                "c1": rng.integers(0, 1000, rows),
                TIME: np.zeros(rows, np.uint64),
                DIFF: np.ones(rows, np.int64),
            }
        )
        drive(df, a, b, [load], 0)
        frames = [
            updates(rng, size, rows, 0).with_columns(pl.lit(1, pl.Int64).alias(DIFF))
            for _ in range(steps)
        ]
        secs = drive(df, a, b, frames, 1)
        medians.append(float(np.median(secs)))
    return medians[0], medians[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument(
        "--clock",
        choices=sorted(_CLOCKS),
        default="wall",
        help="time by wall clock, or by this process's CPU time (all threads; "
        "steadier on a loaded machine)",
    )
    args = parser.parse_args()
    global _clock
    _clock = _CLOCKS[args.clock]
    load = os.getloadavg()[0]
    print(f"clock: {args.clock}; load average {load:.1f} on {os.cpu_count()} cores")
    q = args.quick
    batches, size = (10, 10_000) if q else (100, 10_000)
    rows = 100_000 if q else 1_000_000
    arr, per_row, steady = million_row_snapshot(rows)
    ingest_int = bench_ingest(batches, size, strings=False)
    ingest_str = bench_ingest(batches, size, strings=True)
    print(f"arrangement ingest, int keys:    {ingest_int / 1e6:6.2f} M updates/s  (bar >= 1.0)")
    print(
        f"arrangement ingest, string keys: {ingest_str / 1e6:6.2f} M updates/s  (bar >= 0.5)"
        f"  ratio str/int {ingest_str / ingest_int:.2f}"
    )
    verdicts = Verdicts("engine")
    verdicts.at_least("arrangement ingest, int keys, M updates/s", ingest_int / 1e6, 1.0)
    verdicts.at_least("arrangement ingest, string keys, M updates/s", ingest_str / 1e6, 0.5)
    gb = bench_group_by(batches, size)
    print(f"maintained group-by count/sum:   {gb / 1e6:6.2f} M input updates/s  (bar >= 1.0)")
    verdicts.at_least("maintained group-by count/sum, M input updates/s", gb / 1e6, 1.0)
    gbc = bench_group_by(batches, size, keep=5)
    print(f"  same, export compacted to 5 times of history each step (as ingest above): "
          f"{gbc / 1e6:.2f} M/s  ratio {gbc / gb:.2f}")
    gbs = bench_group_by(batches // 2, size, strings=True)
    print(f"  same, string keys: {gbs / 1e6:.2f} M/s  ratio str/int {gbs / gb:.2f}")
    gbf = bench_group_by(batches, size, floats=True)
    print(f"  same, float sums (exact): {gbf / 1e6:.2f} M/s  ratio float/int {gbf / gb:.2f}")
    verdicts.at_least("maintained group-by count/float sum, M input updates/s", gbf / 1e6, 1.0)
    join = bench_join(rows, 20 if not q else 5, size)
    print(f"delta join vs {rows:,}-row side: {join / 1e6:6.2f} M input updates/s")
    single, batched = bench_lookups(arr, rows, 10_000)
    print(
        f"point lookup on {rows:,} rows:    {single:6.1f} us single (bar <= 20), "
        f"{batched:6.3f} us/key batched (bar <= 1)  ratio {single / batched:.0f}x"
    )
    verdicts.at_most(f"point lookup on {rows:,} rows, us single", single, 20.0, "{:.1f}")
    verdicts.at_most(f"point lookup on {rows:,} rows, us/key batched", batched, 1.0, "{:.3f}")
    print(
        f"memory per arranged row (k, v int): {per_row:6.1f} bytes peak RSS growth during build, "
        f"{steady:6.1f} bytes held by the arrangement (raw k,v,time,diff = 32 bytes; ratios "
        f"{per_row / 32:.2f}, {steady / 32:.2f})"
    )
    reps = 3
    for label, scanned, t in (
        (f"{rows:,}-row single batch", arr, 0),
        (
            f"{batches * size:,}-update spine",
            hist := history_arrangement(batches, size),
            batches - 1,
        ),
    ):
        plain_s, first_s, again_s, n = bench_scan(scanned, t, reps)
        print(
            f"full read, {label} ({scanned.batch_count} batches, {n:,} rows): "
            f"{plain_s * 1e3:7.1f} ms plain re-consolidating, {first_s * 1e3:7.1f} ms first, "
            f"{again_s * 1e3:7.2f} ms repeated  ratio plain/repeated {plain_s / again_s:.0f}x"
        )
    del hist
    small, large = bench_state_growth(rows // 10, rows, 8 if q else 20, 10_000)
    print(
        f"group-by step, 10k updates: {small * 1e3:6.1f} ms at {rows // 10:,} rows of state, "
        f"{large * 1e3:6.1f} ms at {rows:,}  ratio {large / small:.2f}"
    )
    verdicts.exit()


if __name__ == "__main__":
    main()
