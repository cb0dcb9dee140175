"""Benchmark: the cost of serving a long scan to an index's freshness, one runtime vs two (E13).

A small table is written 10 times a second (one row per write, by a separate writer process)
and indexed; a large indexed table is scanned in full (a peek whose filter matches nothing, so
the cost is the walk, not the result) every few seconds. We record the small index's write
frontier as the controller receives it and reconstruct its lag behind the wall clock on a 10 ms
grid, `lag(W) = W - max{frontier_i : received_i <= W}` — between reports the lag keeps growing,
so a frozen frontier shows as a ramp. The replica runs in its own process over TCP.

Per arm (`one`, `two`): the baseline lag (mean over a quiet period before the scans), the peak
lag and the mean lag during the scans, the debt per scan (integral of lag above baseline, ms·s,
divided by the number of scans), the largest gap between frontier advances, the scan times, and
per write the delay from the writer's acknowledgement to the controller receiving a frontier past
it (the replica's share of the lag alone).

Reading the ratio: the writes come every 100 ms, so the lag is a sawtooth whose mean is about
50 ms + d (d: a write's delay until its frontier arrives) and whose peak is about 100 ms + the
largest d. Even with no scans at all the ratio is therefore 2 minus (twice the mean d minus the
largest d) over the baseline: it sits just under 2 when delays are steady and crosses it on
noise alone (E13's own two-runtime and trivial-peek arms read 1.8-2.1). The line
"two peak (scans) / two quiet max" shows what the scans themselves add.
Bar (E13: peak lag 2340 ms inline vs ~110 ms with two runtimes over a 55 ms baseline): the
`two` arm's (maintenance in its own process, the default placement) peak lag <= 2x its
baseline lag; `two-threads` runs the threaded placement beside it. A plot of lag over time for
the arms is saved to
`bench/out/freshness_lag.png`.

A second table breaks each write's delay into stages for the process arm (the poll that found
it, the step, the frames' send, the front's read, the multiplexer, the client: `_lagbreak.py`,
from `TWOFOLD_LAG_TRACE` lines, which the benchmark always turns on).

Run: `python bench/freshness.py` (`--quick` for a short smoke run). Not part of the test suite.
The internal subcommand `writer` is the 10 Hz writer process it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from twofold.protocol import (
    Call,
    Column,
    GlobalId,
    MapFilterProject,
    PeekRows,
    Schedule,
)
from twofold.protocol import Literal as Lit
from twofold.storage import Storage, Table, open_storage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _lagbreak import STAGES, breakdown, cells, tracing
from _plotting import pyplot
from bars import Verdicts
from isolation import (
    DESC,
    OUT,
    Mode,
    block,
    child,
    index_dataflow,
    session,
)

TICKS_SRC, TICKS_IDX = GlobalId.user(1), GlobalId.user(2)
BIG_SRC, BIG_IDX = GlobalId.user(3), GlobalId.user(4)
NOTHING = MapFilterProject(filter=[Call("lt", [Column(1), Lit(-1)])])
"""A filter no row passes: the scan walks the whole index and returns nothing."""


def writer_main(url: str, table: str, hz: float) -> int:
    """The writer process: one row every 1/hz seconds, on a fixed schedule, until killed."""
    storage = open_storage(url)
    t = storage.table(table)
    period = 1.0 / hz
    start = time.perf_counter()
    print("WRITING", flush=True)
    i = 0
    while True:
        i += 1
        print(t.insert([[i, i]]), flush=True)
        delay = start + i * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


@dataclass
class Arm:
    name: str
    start: float  # wall clock (s) when measurement began
    scans_from: float  # wall clock (s) when the first scan began
    end: float
    reports: list[tuple[float, int]]  # (received wall s, frontier ms)
    writes: list[tuple[float, int]]  # (acknowledged wall s, write timestamp ms)
    scan_ms: list[float]
    scan_rows: list[int]
    scan_at: list[float]  # wall clock (s) when each scan was sent
    trace: list[list[str]] = field(default_factory=list)  # TWOFOLD_LAG_TRACE lines (lagtrace.py)


def _step_function(points: list[tuple[float, int]], grid: np.ndarray) -> np.ndarray:
    """The running maximum of `points` (time, value) sampled on `grid` (NaN before the first)."""
    at = np.array([t for t, _ in points])
    value = np.maximum.accumulate(np.array([v for _, v in points], dtype=np.float64))
    idx = np.searchsorted(at, grid, side="right") - 1
    out = np.full(grid.shape, np.nan)
    out[idx >= 0] = value[idx[idx >= 0]]
    return out


def lag_series(arm: Arm, step: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """On a `step`-second grid: the index's lag (ms) behind the wall clock (E13's measure)."""
    grid = np.arange(arm.start, arm.end, step)
    return grid, grid * 1000 - _step_function(arm.reports, grid)


def write_delays(arm: Arm) -> tuple[np.ndarray, np.ndarray]:
    """Per write: when it was acknowledged (wall s), and how long after that the controller
    received a frontier covering it (ms) — the replica's share of the lag alone (storage poll,
    maintenance step, report, TCP), without the writer's schedule or its commit."""
    reports = sorted(arm.reports)
    at = np.array([t for t, _ in reports])
    covered = np.maximum.accumulate(np.array([f for _, f in reports], dtype=np.float64))
    acks = np.array([t for t, _ in arm.writes])
    ts = np.array([w for _, w in arm.writes], dtype=np.float64)
    i = np.searchsorted(covered, ts + 1)  # the first report whose frontier is past the write
    ok = i < len(at)
    return acks[ok], (at[i[ok]] - acks[ok]) * 1000


async def run_arm(mode: Mode, url: str, args: argparse.Namespace, big_name: str,
                  ticks_name: str) -> Arm:
    storage = open_storage(url)
    big, ticks = storage.table(big_name), storage.table(ticks_name)
    up = big.upper.time
    assert up is not None
    scan_ts = up - 1
    try:
        with tracing() as trace:
            arm = await _run_arm(mode, url, args, storage, big, ticks, scan_ts)
    finally:
        storage.close()
    arm.trace = trace
    return arm


async def _run_arm(mode: Mode, url: str, args: argparse.Namespace, storage: Storage,
                   big: Table, ticks: Table, scan_ts: int) -> Arm:
    with child("serve", url, mode, ready="LISTENING") as (_, line):
        _, host, port = line.split()
        async with session(host, int(port), step_log=False) as s:
            await s.conn.send(index_dataflow("big", big, BIG_SRC, BIG_IDX))
            await s.conn.send(Schedule(BIG_IDX))
            await s.conn.send(index_dataflow("ticks", ticks, TICKS_SRC, TICKS_IDX))
            await s.conn.send(Schedule(TICKS_IDX))
            await s.caught_up(BIG_IDX, big)
            await s.caught_up(TICKS_IDX, ticks)
            # One scan before measuring, so neither arm pays first-touch costs in the window.
            await s.peek(BIG_IDX, scan_ts, mfp=NOTHING, timeout=120)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(Path(__file__).resolve()), "writer", url, ticks.name,
                str(args.hz), stdout=asyncio.subprocess.PIPE)
            assert proc.stdout is not None
            assert (await proc.stdout.readline()).startswith(b"WRITING")
            writes: list[tuple[float, int]] = []

            async def acks() -> None:
                assert proc.stdout is not None
                async for line in proc.stdout:
                    writes.append((time.time(), int(line)))

            ack_task = asyncio.create_task(acks())
            try:
                s.frontier_log.clear()
                start = time.time()
                await asyncio.sleep(args.quiet)  # the quiet baseline period (pacing)
                scans_from = time.time()
                scan_ms, scan_rows, scan_at = [], [], []
                for i in range(args.scans):
                    due = scans_from + i * args.every
                    delay = due - time.time()
                    if delay > 0:
                        await asyncio.sleep(delay)  # pacing the scan schedule
                    scan_at.append(time.time())
                    t0 = time.perf_counter()
                    r = await s.peek(BIG_IDX, scan_ts, mfp=NOTHING, timeout=300)
                    scan_ms.append((time.perf_counter() - t0) * 1000)
                    scan_rows.append(len(r.result.rows) if isinstance(r.result, PeekRows)
                                     else -1)
                await asyncio.sleep(args.every)  # let the last scan's effect show, then stop
                end = time.time()
            finally:
                proc.terminate()
                await proc.wait()
                ack_task.cancel()
            reports = [(w, f.time) for w, gid, f in s.frontier_log
                       if gid == TICKS_IDX and f.time is not None]
    return Arm(mode, start, scans_from, end, reports, writes, scan_ms, scan_rows, scan_at)


def summarize(arm: Arm) -> dict[str, float]:
    grid, lag = lag_series(arm)
    acked, delay = write_delays(arm)
    quiet = (grid < arm.scans_from) & ~np.isnan(lag)
    busy = (grid >= arm.scans_from) & ~np.isnan(lag)
    baseline = float(np.mean(lag[quiet]))
    above = np.clip(lag[busy] - baseline, 0, None)
    recv = np.array([r for r, _ in arm.reports if r >= arm.start])
    busy_writes = acked >= arm.scans_from
    return {
        "baseline": baseline,
        "quiet_max": float(np.max(lag[quiet])),
        "peak": float(np.max(lag[busy])),
        "mean_busy": float(np.mean(lag[busy])),
        "delay_p50": float(np.median(delay)),
        "delay_quiet": float(np.max(delay[~busy_writes])),
        "delay_busy": float(np.max(delay[busy_writes])),
        "debt": float(np.sum(above) * 0.01 / max(len(arm.scan_ms), 1)),
        "gap": float(np.max(np.diff(recv)) * 1000) if len(recv) > 1 else float("nan"),
        "scan_p50": float(np.median(arm.scan_ms)),
        "scan_max": float(np.max(arm.scan_ms)),
    }


def check_operations(arm: Arm, verdicts: Verdicts) -> None:
    """The scans answered (`NOTHING` keeps no row, so an answered scan has 0 rows and an error
    -1), and every write acknowledged a second or more before the arm ended reached the index
    (a frontier report covered it): lag measured over failed operations is no lag."""
    verdicts.ok(f"scans answered ({arm.name})", sum(n != 0 for n in arm.scan_rows),
                len(arm.scan_rows))
    settled = arm.end - 1.0
    acked, _ = write_delays(arm)
    due = sum(t < settled for t, _ in arm.writes)
    verdicts.ok(f"writes reached the index ({arm.name})", due - int(np.sum(acked < settled)), due)


def report(arms: list[Arm], args: argparse.Namespace) -> Verdicts:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(width=140)
    tbl = RichTable(title=f"index freshness under full scans: {args.rows:,}-row scan every "
                          f"{args.every} s x {args.scans}, writes at {args.hz:g}/s")
    cols = ["arm", "baseline ms", "quiet max ms", "peak lag ms", "mean lag (scans) ms",
            "debt/scan ms·s", "amplification", "max progress gap ms", "scan p50/max ms",
            "write ack to frontier p50, max quiet/scans ms"]
    for c in cols:
        tbl.add_column(c, justify="left" if c == "arm" else "right")
    sums = {}
    for arm in arms:
        m = sums[arm.name] = summarize(arm)
        tbl.add_row(arm.name, f"{m['baseline']:.0f}", f"{m['quiet_max']:.0f}",
                    f"{m['peak']:.0f}", f"{m['mean_busy']:.0f}", f"{m['debt']:.0f}",
                    f"{m['peak'] / m['baseline']:.1f}", f"{m['gap']:.0f}",
                    f"{m['scan_p50']:.0f}/{m['scan_max']:.0f}",
                    f"{m['delay_p50']:.1f}, {m['delay_quiet']:.1f}/{m['delay_busy']:.1f}")
    console.print(tbl)
    table = RichTable(title="per write, where the ack-to-frontier delay goes: p50 / p99 ms "
                            "(processes only; wall clocks of one host)")
    table.add_column("arm")
    table.add_column("writes", justify="right")
    for stage in STAGES:
        table.add_column(stage, justify="right")
    for arm in arms:
        parts = breakdown(arm.trace, str(TICKS_IDX), arm.writes, arm.reports)
        if len(parts):
            table.add_row(arm.name, str(len(parts)), *cells(parts))
    console.print(table)
    one, two = sums["one"], sums["two"]
    verdicts = Verdicts("freshness")
    for arm in arms:
        check_operations(arm, verdicts)
    verdicts.at_most("ratio two peak / two baseline", two["peak"] / two["baseline"], 2.0)
    for line in [
        f"ratio two peak (scans) / two quiet max = {two['peak'] / two['quiet_max']:.2f}; "
        f"one: {one['peak'] / one['quiet_max']:.2f}  (what the scans add over this machine's "
        f"own noise)",
        f"ratio one peak / two peak = {one['peak'] / two['peak']:.2f}; "
        f"one debt / two debt = {one['debt'] / max(two['debt'], 1e-9):.1f}",
        "E13 anchor: baseline 55 ms; peak 2340 ms inline vs 102-119 ms two-runtime "
        "(amplification 42.7 vs 1.8-2.1)",
        *([f"ratio two-threads peak / two-threads baseline = "
           f"{sums['two-threads']['peak'] / sums['two-threads']['baseline']:.2f} (threaded "
           f"placement, side by side; the bar is the process placement's)"]
          if "two-threads" in sums else []),
    ]:
        console.print(line)
    plot(arms)
    return verdicts


def _windows(x: np.ndarray, y: np.ndarray, width: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per window of `width` seconds: its start, the peak and the mean of `y` (NaNs ignored)."""
    ok = ~np.isnan(y)
    x, y = x[ok], y[ok]
    if not len(x):
        return x, y, y
    bins = np.floor((x - x[0]) / width).astype(np.int64)
    edges = np.flatnonzero(np.diff(bins)) + 1
    starts = np.concatenate([[0], edges])
    peak = np.maximum.reduceat(y, starts)
    mean = np.add.reduceat(y, starts) / np.diff(np.concatenate([starts, [len(y)]]))
    return x[starts], peak, mean


def plot(arms: list[Arm]) -> None:
    plt = pyplot()
    if plt is None:
        return

    OUT.mkdir(parents=True, exist_ok=True)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 8), sharex=True)
    labels = {"one": "one runtime", "two": "two runtimes (processes)",
              "two-threads": "two runtimes (threads)"}
    for arm, color in zip(arms, ("tab:blue", "tab:orange", "tab:green"), strict=False):
        grid, lag = lag_series(arm)
        label = labels.get(arm.name, arm.name)
        # The 10 Hz writes make the raw lag a 0-100 ms sawtooth; per 250 ms window, its peak
        # (solid) and mean (dotted) show what the scans change.
        x, peak, mean = _windows(grid - arm.scans_from, lag, 0.25)
        ax.plot(x, peak, color=color, label=f"{label}: peak per 250 ms", linewidth=1.0)
        ax.plot(x, mean, color=color, linestyle=":", label=f"{label}: mean per 250 ms",
                linewidth=1.0)
        acked, delay = write_delays(arm)
        ax2.plot(acked - arm.scans_from, delay, ".", color=color, label=label, markersize=3)
        for at, ms in zip(arm.scan_at, arm.scan_ms, strict=True):  # each scan, as it ran
            ax.axvspan(at - arm.scans_from, at - arm.scans_from + max(ms, 30) / 1000,
                       color=color, alpha=0.25)
    for a in (ax, ax2):
        a.axvline(0, color="grey", linestyle=":", linewidth=0.8)
        a.legend(fontsize=8)
        a.grid(True, which="both", alpha=0.3)
    ax.set_ylabel("index lag behind wall clock (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("freshness of a 10 Hz index while a large index is scanned")
    ax2.set_ylabel("per write: acknowledged to\nfrontier received (ms)")
    ax2.set_xlabel("seconds since the first scan (scans start at 0)")
    path = OUT / "freshness_lag.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"saved {path}")


async def main(args: argparse.Namespace) -> Verdicts:
    with tempfile.TemporaryDirectory(prefix="tf-freshness-") as tmp:
        url = f"sqlite:///{tmp}/freshness.db"
        storage = open_storage(url)
        big = storage.create_table("big", DESC)
        for start in range(0, args.rows, 250_000):
            big.insert(block(start, min(250_000, args.rows - start)))
        arms = []
        for n, mode in enumerate(("one", "two", "two-threads")):
            ticks = storage.create_table(f"ticks{n}", DESC)
            ticks.insert([[0, 0]])
            print(f"[{mode}] big {args.rows:,} rows; {os.cpu_count()} cpus, load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)
            arms.append(await run_arm(mode, url, args, "big", ticks.name))  # type: ignore[arg-type]
        storage.close()
    return report(arms, args)


def cli() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "writer":
        sys.exit(writer_main(sys.argv[2], sys.argv[3], float(sys.argv[4])))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--rows", type=int, default=3_000_000, help="rows in the scanned index")
    parser.add_argument("--hz", type=float, default=10.0, help="writes per second")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between scans")
    parser.add_argument("--scans", type=int, default=6, help="scans per arm")
    parser.add_argument("--quiet", type=float, default=5.0, help="quiet baseline seconds")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.scans, args.every, args.quiet = 300_000, 3, 2.0, 3.0
    asyncio.run(main(args)).exit()


if __name__ == "__main__":
    cli()
