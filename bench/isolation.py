"""Benchmark: a point lookup behind long maintenance steps, one runtime vs two (Materialize E12).

A large indexed table is churned (repeated insert and retract of a block of rows, so that every
maintenance step merges hundreds of thousands of updates) while a small indexed table serves
open-loop point lookups over TCP at a fixed rate. The replica runs in its own process
(`serve_replica`), as in production: its runtimes share that process's GIL, the client and the
churn writer do not. Arms, measured side by side in one run on the same storage:

- `idle`: one runtime, no churn (the baseline);
- `one loaded`: one runtime, churn running — a lookup waits for the maintenance step in flight;
- `two loaded`: two runtimes, churn running — lookups are served by the interactive runtime,
  maintenance runs in a process of its own (the default placement);
- `two-threads loaded`: the same with both runtimes as threads of the replica process (the
  threaded placement), side by side with the process placement.

The churned index is compacted 1 s behind each absorbed write, as a controller's read policy
would (see `Churn`), so it stays about `--rows` large and its merges are the long steps.

Latency is open-loop: from the lookup's scheduled send time to its response's arrival, so a
stalled replica is charged for the queue it builds. The client is the measuring instrument: in
E12 it runs on another machine, here it shares two cores with the replica and the churn writer,
so its event-loop thread asks the OS for the same short latency slice as the replica's read path
(`twofold.runtime.sched`, every arm alike), and how late it sent each lookup is printed (`client
late`: timer granularity and scheduling, charged to every arm's latency).

Printed per arm: p50/p90/p99/max, the fraction of lookups above 2x/5x/10x the idle p50, and
the maintenance step-duration percentiles the replica reports through its `step_durations`
introspection index (power-of-two buckets, so each percentile is a bucket's upper bound).
Bars (E12: one 129.5/278 ms p90/p99 vs two 4.5/5.8 ms, idle 4.9/5.5 ms): two-loaded p99
<= 2x idle p99; one-loaded p99 >= 10x two-loaded p99.
A latency CDF of the three arms is saved to `bench/out/isolation_cdf.png`.

Run: `python bench/isolation.py` (`--quick` for a short smoke run). Not part of the test suite.
Internal subcommands `serve` and `churn` are the replica and writer processes it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from _plotting import pyplot  # bench/ is the script's directory
from bars import Verdicts
from harness import (
    DESC,
    STEP_LOG,
    Mode,
    Session,
    block,
    bucket_percentile,
    child_of,
    churn_main,
    diff_buckets,
    index_dataflow,
    serve_main,
    session,
    settle,
    step_durations,
    tables,
)
from twofold.protocol import (
    AllowCompaction,
    Frontier,
    GlobalId,
    IndexTarget,
    Peek,
    PeekRows,
    Schedule,
)
from twofold.runtime import sched
from twofold.runtime.sched import ThreadHints
from twofold.storage import Table, open_storage

# The shared harness moved to harness.py; its names stay importable from here (freshness.py,
# twoway.py and memory.py import them from this module).
__all__ = [
    "DESC", "OUT", "STEP_LOG", "Mode", "Session", "block", "bucket_percentile", "child",
    "child_of", "churn_main", "diff_buckets", "index_dataflow", "serve_main", "session", "settle",
    "step_durations", "tables",
]

OUT = Path(__file__).resolve().parent / "out"


# -- the churn load, and this script's subcommands as child processes -----------------------------


COMPACTION_WINDOW_MS = 1_000
"""How far behind its write frontier the controller lets the big index compact (Materialize's
default compaction window for an index is 1 s)."""


class Churn:
    """Keeps maintenance busy with one block at a time: write, wait until the big index has
    absorbed it (its write frontier passed the write), write the next. Paced by the replica's
    own progress, so the load is a steady stream of long steps, never an unbounded backlog.

    Like a controller's read policy, each absorbed write lets the big index compact to
    `COMPACTION_WINDOW_MS` behind it, so inserts and retractions older than that consolidate
    away and the index stays about `--rows` large; without it, the index would keep every churn
    write's history and its merges would grow through the run."""

    def __init__(self, s: Session, gid: GlobalId, url: str, table: str, start: int,
                 n: int) -> None:
        self.s, self.gid = s, gid
        self.args = [url, table, str(start), str(n)]
        self.writes = 0
        self.compacted_to = -1
        self.task: asyncio.Task[None] | None = None
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> Churn:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "churn", *self.args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert self.proc.stdout is not None
        assert (await self.proc.stdout.readline()).startswith(b"READY")
        self.task = asyncio.create_task(self._run())
        # The load is on once the first block has been written.
        await self.s.wait(lambda: self.writes > 0, "the first churn write", 120)
        return self

    async def _run(self) -> None:
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        while True:
            proc.stdin.write(b"w\n")
            await proc.stdin.drain()
            ts = int(await proc.stdout.readline())
            self.writes += 1
            self.s.changed.set()
            after = Frontier.at(ts + 1)

            def absorbed(after: Frontier = after) -> bool:
                f = self.s.frontiers.get(self.gid)
                return f is not None and after.less_equal(f)

            await self.s.wait(absorbed, "the churn write to be absorbed", 600)
            if self.compacted_to < 0:
                self.compacted_to = ts  # never before the first write (the index's since)
            target = max(self.compacted_to, ts - COMPACTION_WINDOW_MS)
            if target > self.compacted_to:
                self.compacted_to = target
                await self.s.conn.send(AllowCompaction(self.gid, Frontier.at(target)))

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()


def child(*args: str, ready: str) -> contextlib.AbstractContextManager[
        tuple[subprocess.Popen[str], str]]:
    """`child_of` for `python this_file *args` (this file's subcommands)."""
    return child_of([sys.executable, __file__, *args], ready=ready)



# -- one arm ---------------------------------------------------------------------------------------


@dataclass
class Arm:
    name: str
    latencies_ms: np.ndarray
    send_late_ms: np.ndarray
    steps: dict[str, list[tuple[int, int]]]
    errors: int


async def open_loop(s: Session, gid: GlobalId, ts: int, keys: int, rate: float, n: int,
                    ) -> tuple[np.ndarray, np.ndarray, int]:
    """`n` lookups sent at `rate`/s on schedule, whatever the replica does: latencies and how
    late each was sent, in ms."""
    rng = np.random.default_rng(7)
    sent: dict[uuid.UUID, float] = {}
    late: list[float] = []
    start = time.perf_counter() + 0.05
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the open loop, not synchronisation
        u = uuid.uuid4()
        sent[u] = due
        late.append((time.perf_counter() - due) * 1000)
        await s.conn.send(Peek(u, IndexTarget(gid), ts,
                               literal_constraints=[[int(rng.integers(0, keys))]]))
    await s.wait(lambda: all(u in s.answers for u in sent), "every lookup", 300)
    lat = np.array([(s.answers[u][0] - sent[u]) * 1000 for u in sent])
    errors = sum(1 for u in sent if not isinstance(s.answers[u][1].result, PeekRows))
    for u in sent:
        s.answers.pop(u, None)
    return lat, np.array(late), errors


async def run_arm(name: str, mode: Mode, url: str, big: Table, small: Table, small_ts: int,
                  args: argparse.Namespace) -> Arm:
    env_profile = f"{OUT}/isolation_profile_{name.replace(' ', '_')}.txt" if args.profile else ""
    os.environ["TWOFOLD_BENCH_PROFILE"] = env_profile
    env_stages = f"{OUT}/isolation_stages_{name.replace(' ', '_')}.txt" if args.stages else ""
    os.environ["TWOFOLD_BENCH_STAGES"] = env_stages
    os.environ["TWOFOLD_BENCH_SWITCH_INTERVAL"] = str(args.switch_interval or "")
    with child("serve", url, mode, ready="LISTENING") as (_, line):
        _, host, port = line.split()
        async with session(host, int(port)) as s:
            t0 = time.perf_counter()
            await s.conn.send(index_dataflow("big", big, GlobalId.user(1), GlobalId.user(2)))
            await s.conn.send(Schedule(GlobalId.user(2)))
            await s.conn.send(index_dataflow("small", small, GlobalId.user(3), GlobalId.user(4)))
            await s.conn.send(Schedule(GlobalId.user(4)))
            await s.caught_up(GlobalId.user(2), big)
            await s.caught_up(GlobalId.user(4), small)
            print(f"  [{name}] hydrated in {time.perf_counter() - t0:.1f} s", flush=True)
            quiet_after = await settle(s)
            print(f"  [{name}] quiescent after {quiet_after:.1f} s more", flush=True)
            before = await step_durations(s)
            churn: contextlib.AbstractAsyncContextManager[object] = (
                contextlib.nullcontext() if name == "idle" else
                Churn(s, GlobalId.user(2), url, big.name, args.rows, args.churn))
            async with churn as c:
                lat, late, errors = await open_loop(s, GlobalId.user(4), small_ts, args.small,
                                              args.rate, args.samples)
                if isinstance(c, Churn):
                    print(f"  [{name}] churn: {c.writes} writes of {args.churn:,} rows during "
                          f"the lookups", flush=True)
            after = await step_durations(s)
    steps = {rt: diff_buckets(b, before.get(rt, [])) for rt, b in after.items()}
    return Arm(name, lat, late, steps, errors)


# -- report ----------------------------------------------------------------------------------------


def report(arms: list[Arm], args: argparse.Namespace, verdicts: Verdicts) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(width=140)
    idle = next(a for a in arms if a.name == "idle")
    idle_p50 = float(np.percentile(idle.latencies_ms, 50))
    tbl = RichTable(title=f"point lookups, {args.samples} per arm at {args.rate}/s; big table "
                          f"{args.rows:,} rows churned by {args.churn:,}")
    for col in ["arm", "n", "err", "p50 ms", "p90 ms", "p99 ms", "max ms", ">2x idle p50",
                ">5x", ">10x", "client late p50/p99", "steps (runtime: p50/p90/p99/max ms, n)"]:
        tbl.add_column(col, justify="right" if col != "arm" else "left")
    pct: dict[str, tuple[float, float, float, float]] = {}
    for arm in arms:
        lat = arm.latencies_ms
        p50, p90, p99 = (float(np.percentile(lat, q)) for q in (50, 90, 99))
        pct[arm.name] = (p50, p90, p99, float(lat.max()))
        above = [f"{100 * float(np.mean(lat > m * idle_p50)):.2f}%" for m in (2, 5, 10)]
        steps = "; ".join(
            f"{rt}: {bucket_percentile(b, 50):g}/{bucket_percentile(b, 90):g}/"
            f"{bucket_percentile(b, 99):g}/{(b[-1][0] / 1000) if b else float('nan'):g}, "
            f"{sum(c for _, c in b)}" for rt, b in sorted(arm.steps.items()))
        late = arm.send_late_ms
        tbl.add_row(arm.name, str(len(lat)), str(arm.errors), f"{p50:.1f}", f"{p90:.1f}",
                    f"{p99:.1f}", f"{lat.max():.1f}", *above,
                    f"{np.percentile(late, 50):.1f}/{np.percentile(late, 99):.1f}", steps)
    console.print(tbl)
    idle_p99 = pct["idle"][2]
    one_p99, two_p99 = pct["one loaded"][2], pct["two loaded"][2]
    verdicts.at_most("ratio two-loaded p99 / idle p99", two_p99 / idle_p99, 2.0)
    verdicts.at_least("ratio one-loaded p99 / two-loaded p99", one_p99 / two_p99, 10.0)
    lines = [
        f"ratio one-loaded p90 / two-loaded p90 = "
        f"{pct['one loaded'][1] / pct['two loaded'][1]:.2f}",
        "E12 anchor: idle p90/p99 4.9/5.5 ms; one loaded 129.5/278.4 ms; two loaded 4.5/5.8 ms "
        "(ratios 1.05 and 48)",
    ]
    if "two-threads loaded" in pct:
        lines.insert(1, f"ratio two-threads-loaded p99 / two-loaded (processes) p99 = "
                        f"{pct['two-threads loaded'][2] / two_p99:.2f}")
    for line in lines:
        console.print(line)
    plot(arms, idle_p50)


def plot(arms: list[Arm], idle_p50: float) -> None:
    plt = pyplot()
    if plt is None:
        return

    OUT.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 5))
    for arm in arms:
        lat = np.sort(arm.latencies_ms)
        ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=arm.name)
    for m in (2, 5, 10):
        ax.axvline(m * idle_p50, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("lookup latency (ms, open loop, log scale)")
    ax.set_ylabel("fraction of lookups")
    ax.set_title("point lookup behind maintenance: one runtime vs two")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    path = OUT / "isolation_cdf.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    print(f"saved {path}")


async def main(args: argparse.Namespace) -> int:
    # The instrument's own wakeups should not be what is measured (see the module docstring).
    sched.apply(ThreadHints(slice_us=sched.latency_slice_from_env()), "bench client")
    arms = []
    arm_modes: list[tuple[str, Mode]] = [
        ("idle", "one"), ("one loaded", "one"), ("two loaded", "two"),
        ("two-threads loaded", "two-threads")]
    for name, mode in arm_modes:
        if args.arms and name.split()[0] not in args.arms:
            continue
        # A fresh database per arm: no arm inherits an earlier arm's churn history (the one-loaded
        # arm writes about a gigabyte, and its WAL and checkpoints would weigh on the next arm).
        with tempfile.TemporaryDirectory(prefix="tf-isolation-") as tmp:
            url = f"sqlite:///{tmp}/isolation.db"
            storage = open_storage(url)
            small, small_ts, big = tables(storage, args.rows, args.small)
            print(f"[{name}] big {args.rows:,} rows, small {args.small:,} rows; "
                  f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}", flush=True)
            arms.append(await run_arm(name, mode, url, big, small, small_ts, args))
            storage.close()
    verdicts = Verdicts("isolation")
    for arm in arms:  # a latency measured over failed lookups is no latency
        verdicts.ok(f"lookups answered with rows ({arm.name})", arm.errors, len(arm.latencies_ms))
    if {"idle", "one loaded", "two loaded"} <= {a.name for a in arms}:
        report(arms, args, verdicts)
    else:
        for arm in arms:
            lat = arm.latencies_ms
            print(arm.name, [round(float(np.percentile(lat, q)), 1) for q in (50, 90, 99)],
                  round(float(lat.max()), 1), "client late p50/p99",
                  [round(float(np.percentile(arm.send_late_ms, q)), 1) for q in (50, 99)],
                  arm.steps)
    verdicts.out(verdicts.summary())
    return verdicts.exit_code()


def cli() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        sys.exit(serve_main(sys.argv[2], sys.argv[3]))  # type: ignore[arg-type]
    if len(sys.argv) > 1 and sys.argv[1] == "churn":
        sys.exit(churn_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the big table")
    parser.add_argument("--churn", type=int, default=200_000, help="rows per churn block")
    parser.add_argument("--small", type=int, default=1_000, help="rows in the small table")
    parser.add_argument("--rate", type=float, default=40.0, help="lookups per second (E12: 40)")
    parser.add_argument("--samples", type=int, default=2_000, help="lookups per arm")
    parser.add_argument("--arms", nargs="*", choices=["idle", "one", "two", "two-threads"],
                        help="run only these arms (diagnostics; the report needs all three)")
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="sys.setswitchinterval in the replica process (experiment)")
    parser.add_argument("--profile", action="store_true",
                        help="sample the replica's runtime threads (bench/out/*_profile_*.txt)")
    parser.add_argument("--stages", action="store_true",
                        help="time each lookup's stages inside the replica, with per-thread "
                             "run-queue waits (bench/out/*_stages_*.txt)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.churn, args.samples = 200_000, 50_000, 300
    sys.exit(asyncio.run(main(args)))


if __name__ == "__main__":
    cli()
