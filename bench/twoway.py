"""Benchmark: both directions at once — an index's freshness while reads saturate the replica.

A large indexed table is churned at a fixed rate (a block of `--churn` rows inserted, and half a
second later retracted, every second, by a separate writer process) while a small indexed table
serves point lookups. Per arm we measure the reads (lookups/s, latency p50/p99) and the churned
index's **freshness lag**: per write, from the writer's acknowledgement until the index's write
frontier passes it (as the client receives it). Maintenance step p50/p99 come from the replica's
`step_durations` introspection index (power-of-two buckets: each percentile is a bucket's upper
bound). The churned index compacts 1 s behind each absorbed write, as a controller's read policy
would.

Arms (a fresh database each; the replica served over TCP in a process of its own, unless
embedded):

- `one saturating`: one runtime, 8 closed-loop readers;
- `threads saturating`: two runtimes as threads of one process, 8 closed-loop readers;
- `procs idle`, `procs light`, `procs saturating`: two runtimes, maintenance in its own process
  (the default placement) — no churn with 40 lookups/s; churn with 40 lookups/s (these two
  read `LIGHT_SPAN` = 2.5 times `--seconds`: 3,000 reads for their p99s in a 30 s run); churn
  with 8 closed-loop readers;
- `embedded one saturating`, `embedded procs saturating`: `twofold.open_async` in this process
  (one runtime; two with the default placement), 8 closed-loop readers through the API.

Bars (issue 13): with two processes, freshness lag p50 under a saturating reader <= 1.5x that
under a light reader; read p99 under churn (light) <= 1.5x idle; lookups/s under a saturating
reader >= 1.3x one runtime's; embedded with a saturating reader, freshness lag p50 <= 1.5x one
runtime's (embedded). A plot of lag over time per arm is saved to `docs/img/twoway_lag.png`.
A second table breaks each churn write's lag into stages, per arm with a maintenance process
(poll, step, send, the front's read of the socket, the multiplexer, the client: `_lagbreak.py`).

The client is the measuring instrument, not what is measured: each lookup waits on a future of
its own that its response resolves (`isolation.Session.ask`). Before, one event woke every
waiting reader on every response, so the client's CPU per lookup grew with its readers and was
the same in every arm, compressing the lookups/s ratio toward 1. The client shares the two cores
with the replica, so per arm the CPU of each process over the reading window is printed (`cpu
over [arm]`: bench client, replica front, its maintenance child, churn writer, as % of one core,
from `/proc/<pid>/stat`, with their threads' involuntary context switches) — whichever is
saturated decides that arm's lookups/s and lag.

Noise: the lookups/s bar compares two arms whose rates swing run to run (one runtime's
2,496-4,765 lookups/s in two quiet runs), so those two arms (`ROUNDED`) run in `--rounds` short
rounds, interleaved A B A B ... (each round a fresh database, `--seconds / --rounds` of
reading), and the bar is the ratio of the per-arm **medians**; each round's rate, the per-round
ratios and the front's and client's CPU microseconds per lookup are printed beside it. Their
table rows pool the rounds (reads, writes, lags; lookups/s is the median).

Sessions: the replica process and the churn writer each run in a session of their own
(`setsid`), as a replica and a writing application started apart from the client would; the
maintenance child has its own already (`replica/start.py`). Where the kernel groups processes
by session for CPU shares (`CONFIG_SCHED_AUTOGROUP`, on this machine), each is then a scheduling
group: in one session with the client (`--one-session`, as the benchmark ran until 2026-12-03)
the writer's bursts of a whole scheduler tick pre-empted the replica's front within its group
and a light reader's read p99 under churn measured behind the writer's CPU, not the replica's
work (`docs/architecture.md`).

Run: `python bench/twoway.py` (`--quick` for a short smoke run). Not part of the test suite.
The internal subcommand `churn` is the writer process it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import isolation
from _lagbreak import STAGES, breakdown, cells, tracing
from _plotting import pyplot
from bars import Verdicts
from harness import child_of
from isolation import (
    Mode,
    Session,
    block,
    bucket_percentile,
    diff_buckets,
    index_dataflow,
    session,
    settle,
    step_durations,
    tables,
)
from procstat import CpuMeter, children
from twofold.protocol import AllowCompaction, Frontier, GlobalId, IndexTarget, Peek, PeekRows
from twofold.protocol import Schedule as ScheduleCmd
from twofold.storage import open_storage

IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
BIG_SRC, BIG_IDX = GlobalId.user(1), GlobalId.user(2)
SMALL_SRC, SMALL_IDX = GlobalId.user(3), GlobalId.user(4)
READERS = 8
LIGHT_RATE = 40.0
LIGHT_SPAN = 2.5
"""The open-loop arms (`procs idle`, `procs light`) read this many times `--seconds`: their bar is
a ratio of two p99s, and at 40 lookups/s a 30 s arm's p99 was its 12th-worst read of 1,200 (the
idle arm's alone read 2.6-7.3 ms in quiet runs); 75 s gives 3,000 reads at the same rate."""
COMPACTION_WINDOW_MS = 1_000
ROUNDED = ("procs saturating", "one saturating")
"""The arms of the lookups/s bar: run in interleaved rounds, compared by their medians."""
ARM_GUARD_S = 120.0
"""How long past its reading window an arm may run before it fails (a stuck replica)."""


def churn_main(url: str, table: str, start: int, n: int, seconds: float) -> int:
    """The writer: every second insert `n` rows, half a second later retract them; print each
    write's timestamp and wall-clock acknowledgement time."""
    storage = open_storage(url)
    t = storage.table(table)
    rows = block(start, n)
    print("READY", flush=True)
    begin = time.time()
    i = 0
    while time.time() - begin < seconds:
        due = begin + i * 0.5
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)  # a fixed schedule: the load does not wait for the replica
        ts = t.insert(rows) if i % 2 == 0 else t.delete(rows)
        print(ts, repr(time.time()), flush=True)
        i += 1
    return 0


@dataclass
class Arm:
    name: str
    lookups: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    writes: list[tuple[int, float]] = field(default_factory=list)  # (ts, acked wall time)
    frontier_log: list[tuple[float, int]] = field(default_factory=list)  # (wall, frontier)
    steps: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    writer_pid: int | None = None
    cpu: CpuMeter = field(default_factory=CpuMeter)
    rounds: list[Arm] = field(default_factory=list)  # when run in rounds: each round's arm
    trace_gid: str = ""  # the churned index, as TWOFOLD_LAG_TRACE names it
    lag_parts: list[np.ndarray] = field(default_factory=list)  # `_lagbreak.breakdown`s

    @classmethod
    def pooled(cls, rounds: list[Arm]) -> Arm:
        """One arm from sequential rounds: reads, writes and frontier logs pooled (each
        round's timestamps and wall times are later than the previous round's, so the lags
        pair up within rounds); `rate` is the median round's."""
        arm = cls(rounds[0].name, rounds=rounds)
        steps: dict[str, dict[int, int]] = {}
        for r in rounds:
            arm.lookups += r.lookups
            arm.seconds += r.seconds
            arm.latencies_ms += r.latencies_ms
            arm.errors += r.errors
            arm.writes += r.writes
            arm.frontier_log += r.frontier_log
            arm.lag_parts += r.lag_parts
            for rt, buckets in r.steps.items():
                for le, n in buckets:
                    steps.setdefault(rt, {})[le] = steps.get(rt, {}).get(le, 0) + n
        arm.steps = {rt: sorted(b.items()) for rt, b in steps.items()}
        return arm

    @property
    def rate(self) -> float:
        if self.rounds:
            return float(np.median([r.rate for r in self.rounds]))
        return self.lookups / self.seconds if self.seconds else float("nan")

    def cpu_per_lookup(self) -> dict[str, float]:
        """CPU microseconds per lookup of each process (the median over rounds)."""
        per = [r.cpu.per_op_us(r.lookups) for r in (self.rounds or [self])]
        return {n: float(np.median([p[n] for p in per if n in p])) for n in per[0]} if per else {}

    def lags_ms(self) -> tuple[np.ndarray, np.ndarray]:
        """Per write: acknowledgement time, and ms until a frontier past it was received."""
        if not self.writes or not self.frontier_log:
            return np.array([]), np.array([])
        wall = np.array([w for w, _ in self.frontier_log])
        front = np.maximum.accumulate(np.array([f for _, f in self.frontier_log]))
        acked, lags = [], []
        for ts, at in self.writes:
            i = int(np.searchsorted(front, ts + 1, "left"))
            if i < len(front):
                acked.append(at)
                lags.append(max(0.0, (wall[i] - at) * 1000))
        return np.array(acked), np.array(lags)


def pct(values: list[float] | np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


@contextlib.asynccontextmanager
async def churning(arm: Arm, url: str, args: argparse.Namespace, compact: object,
                   seconds: float) -> AsyncIterator[None]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "churn", url, "big", str(args.rows), str(args.churn),
        str(seconds), stdout=asyncio.subprocess.PIPE, start_new_session=not args.one_session)
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).startswith(b"READY")
    arm.writer_pid = proc.pid

    async def read() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            ts, at = line.split()
            arm.writes.append((int(ts), float(at)))
            if callable(compact):
                await compact(int(ts))

    reader = asyncio.create_task(read())
    try:
        yield
    finally:
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def closed_loop(send: object, seconds: float, arm: Arm, keys: int) -> None:
    """`READERS` readers, each issuing its next lookup when the last one answered."""
    assert callable(send)
    stop = time.perf_counter() + seconds
    rng = np.random.default_rng(11)

    async def reader() -> None:
        while time.perf_counter() < stop:
            key = int(rng.integers(0, keys))
            t0 = time.perf_counter()
            ok = await send(key)
            arm.latencies_ms.append((time.perf_counter() - t0) * 1000)
            arm.lookups += 1
            arm.errors += 0 if ok else 1

    t0 = time.perf_counter()
    await asyncio.gather(*(reader() for _ in range(READERS)))
    arm.seconds = time.perf_counter() - t0


async def open_loop(send: object, seconds: float, arm: Arm, keys: int) -> None:
    """`LIGHT_RATE` lookups a second on schedule; latency from the scheduled send time."""
    assert callable(send)
    rng = np.random.default_rng(7)
    start = time.perf_counter() + 0.05
    tasks = []

    async def one(due: float, key: int) -> None:
        ok = await send(key)
        arm.latencies_ms.append((time.perf_counter() - due) * 1000)
        arm.lookups += 1
        arm.errors += 0 if ok else 1

    for i in range(int(seconds * LIGHT_RATE)):
        due = start + i / LIGHT_RATE
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)  # pacing the open loop, not synchronisation
        tasks.append(asyncio.create_task(one(due, int(rng.integers(0, keys)))))
    await asyncio.gather(*tasks)
    arm.seconds = seconds


async def served_arm(name: str, mode: Mode, reader: str, churn: bool,
                     args: argparse.Namespace) -> Arm:
    arm = Arm(name, trace_gid=str(BIG_IDX))
    with tempfile.TemporaryDirectory(prefix="tf-twoway-") as tmp:
        url = f"sqlite:///{tmp}/twoway.db"
        storage = open_storage(url)
        small, small_ts, big = tables(storage, args.rows, args.small)
        with child_of([sys.executable, isolation.__file__, "serve", url, mode],
                      ready="LISTENING", own_session=not args.one_session) as (front, line):
            _, host, port = line.split()
            async with session(host, int(port)) as s:
                await s.conn.send(index_dataflow("big", big, BIG_SRC, BIG_IDX))
                await s.conn.send(ScheduleCmd(BIG_IDX))
                await s.conn.send(index_dataflow("small", small, SMALL_SRC, SMALL_IDX))
                await s.conn.send(ScheduleCmd(SMALL_IDX))
                await s.caught_up(BIG_IDX, big)
                await s.caught_up(SMALL_IDX, small)
                await settle(s)
                before = await step_durations(s)
                start_log = len(s.frontier_log)
                compacted = [-1]

                async def compact(ts: int) -> None:
                    target = ts - COMPACTION_WINDOW_MS
                    if target > compacted[0]:
                        compacted[0] = target
                        await s.conn.send(AllowCompaction(BIG_IDX, Frontier.at(target)))

                async def send(key: int) -> bool:
                    r = await lookup(s, small_ts, key)
                    return isinstance(r, PeekRows) and len(r.rows) == 1

                reading = args.seconds * (LIGHT_SPAN if reader == "light" else 1.0)
                ctx = (churning(arm, url, args, compact, reading + 2) if churn
                       else contextlib.nullcontext())
                async with ctx:
                    await asyncio.sleep(0.5)  # the churn's first writes land first
                    arm.cpu.start(arm_pids(arm, front.pid))
                    async with asyncio.timeout(reading + ARM_GUARD_S):
                        if reader == "saturating":
                            await closed_loop(send, reading, arm, args.small)
                        else:
                            await open_loop(send, reading, arm, args.small)
                    arm.cpu.stop()
                    if churn and arm.writes:
                        last = arm.writes[-1][0]
                        await s.wait(lambda: (f := s.frontiers.get(BIG_IDX)) is not None
                                     and Frontier.at(last + 1).less_equal(f),
                                     "the last churn write", 120)
                arm.steps = {rt: diff_buckets(b, before.get(rt, []))
                             for rt, b in (await step_durations(s)).items()}
                arm.frontier_log = [(w, f.time) for w, gid, f in s.frontier_log[start_log:]
                                    if gid == BIG_IDX and f.time is not None]
        storage.close()
    return arm


def arm_pids(arm: Arm, front: int | None) -> dict[str, int]:
    """The arm's processes by role: this client, the replica front (this process when
    embedded), its maintenance child if any, and the churn writer."""
    me = os.getpid()
    pids = {"client": me} if front is not None else {"client+front": me}
    if front is not None:
        pids["front"] = front
    others = [c for c in children(front if front is not None else me) if c != arm.writer_pid]
    for i, c in enumerate(others):
        pids["maintenance" if i == 0 else f"child{i}"] = c
    if arm.writer_pid is not None:
        pids["writer"] = arm.writer_pid
    return pids


_LOOKUP_IDS = itertools.count(uuid.uuid4().int & ~((1 << 64) - 1))


async def lookup(s: Session, ts: int, key: int) -> object:
    # The instrument's own cost per lookup is kept small (it shares the cores with the
    # replica): ids from a counter under a random prefix, no timer per lookup — the arm is
    # bounded as a whole (`ARM_GUARD_S`), and a connection that ends fails every waiter.
    peek = Peek(uuid.UUID(int=next(_LOOKUP_IDS)), IndexTarget(SMALL_IDX), ts,
                literal_constraints=[[key]])
    return (await s.ask(peek, timeout=None)).result


async def embedded_arm(name: str, runtimes: str, args: argparse.Namespace) -> Arm:
    import twofold

    arm = Arm(name)
    with tempfile.TemporaryDirectory(prefix="tf-twoway-emb-") as tmp:
        path = f"{tmp}/embedded.db"
        async with twofold.open_async(path, runtimes=runtimes) as db:  # type: ignore[arg-type]
            small = db.create_table("small", {"k": int, "v": int})
            await asyncio.to_thread(small.insert, block(0, args.small))
            big = db.create_table("big", {"k": int, "v": int})
            for start in range(0, args.rows, 250_000):
                await asyncio.to_thread(big.insert, block(start, min(250_000, args.rows - start)))
            big_idx = await db.create_index("big_k", big, key="k")
            small_idx = await db.create_index("small_k", small, key="k")
            arm.trace_gid = str(big_idx.id)
            assert db.controller is not None
            controller = db.controller
            await db.lookup(small_idx, 1)
            await db.lookup(big_idx, 1)
            stop = asyncio.Event()

            async def watch() -> None:
                # Woken by the controller as it takes each frontier past the last one seen
                # (`wait_for_frontier`), as the served arms' client is by each response: a
                # sampler sleeping 2 ms overshot by 1.2 ms p50 (3.6 ms p90) on a loop that
                # 8 readers keep busy, and by 0.2 ms on one runtime's idler loop.
                last = controller.frontier(big_idx.id).time
                stopped = asyncio.ensure_future(stop.wait())
                while last is not None and not stop.is_set():
                    passed = controller.wait_for_frontier(big_idx.id, Frontier.at(last + 1))
                    await asyncio.wait([passed, stopped], return_when=asyncio.FIRST_COMPLETED)
                    if not passed.done():
                        passed.cancel()
                        break
                    passed.result()
                    last = controller.frontier(big_idx.id).time
                    if last is not None:
                        arm.frontier_log.append((time.time(), last))
                await stopped

            async def send(key: int) -> bool:
                return len((await db.lookup(small_idx, key)).rows) == 1

            watcher = asyncio.create_task(watch())
            url = f"sqlite:///{path}"
            async with churning(arm, url, args, None, args.seconds + 2):
                await asyncio.sleep(0.5)
                arm.cpu.start(arm_pids(arm, None))
                await closed_loop(send, args.seconds, arm, args.small)
                arm.cpu.stop()
                if arm.writes:
                    last_ts = arm.writes[-1][0]
                    deadline = time.perf_counter() + 120
                    while (controller.frontier(big_idx.id).time or 0) <= last_ts and \
                            time.perf_counter() < deadline:
                        await asyncio.sleep(0.01)
            stop.set()
            await watcher
    return arm


def report(arms: dict[str, Arm], args: argparse.Namespace) -> Verdicts:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console(width=150)
    tbl = RichTable(title=f"freshness while reads saturate: {args.rows:,}-row index churned by "
                          f"{args.churn:,} + {args.churn:,} rows/s, {args.seconds:g} s per arm "
                          f"(idle, light {args.seconds * LIGHT_SPAN:g} s)")
    for col in ["arm", "lookups/s", "err", "read p50 ms", "read p99 ms", "lag p50 ms",
                "lag p99 ms", "writes", "maintenance step p50/p99 ms", "steps (other runtime)"]:
        tbl.add_column(col, justify="left" if col == "arm" else "right")
    figures: dict[str, dict[str, float]] = {}
    for arm in arms.values():
        _, lags = arm.lags_ms()
        maint = arm.steps.get("maintenance", arm.steps.get("solo", []))
        other = arm.steps.get("interactive", [])
        figures[arm.name] = {"rate": arm.rate, "p50": pct(arm.latencies_ms, 50),
                             "p99": pct(arm.latencies_ms, 99), "lag50": pct(lags, 50),
                             "lag99": pct(lags, 99)}
        tbl.add_row(arm.name, f"{arm.rate:,.0f}", str(arm.errors),
                    f"{pct(arm.latencies_ms, 50):.1f}", f"{pct(arm.latencies_ms, 99):.1f}",
                    f"{pct(lags, 50):.0f}", f"{pct(lags, 99):.0f}", str(len(arm.writes)),
                    f"{bucket_percentile(maint, 50):g}/{bucket_percentile(maint, 99):g}"
                    if maint else "-",
                    f"interactive {bucket_percentile(other, 50):g}/"
                    f"{bucket_percentile(other, 99):g}" if other else "-")
    console.print(tbl)
    stages = RichTable(title="per churn write, where the ack-to-frontier delay goes: p50 / p99 ms "
                             "(arms with a maintenance process; wall clocks of one host)")
    for col in ("arm", "writes", *STAGES):
        stages.add_column(col, justify="left" if col == "arm" else "right")
    for arm in arms.values():
        if arm.lag_parts:
            parts = np.concatenate(arm.lag_parts)
            stages.add_row(arm.name, str(len(parts)), *cells(parts))
    console.print(stages)
    for arm in arms.values():
        for i, r in enumerate(arm.rounds or [arm]):
            at = f" round {i + 1}" if arm.rounds else ""
            print(f"cpu over [{arm.name}{at}] (% of one core): {r.cpu.line()}")
        per = ", ".join(f"{n} {us:.0f}" for n, us in arm.cpu_per_lookup().items())
        print(f"cpu per lookup [{arm.name}] (us; median over rounds): {per or '-'}")
    rounded = [arms[n] for n in ROUNDED if n in arms and arms[n].rounds]
    for arm in rounded:
        rates = [r.rate for r in arm.rounds]
        print(f"rounds [{arm.name}] lookups/s: " + " ".join(f"{x:,.0f}" for x in rates)
              + f"; median {arm.rate:,.0f}, spread {min(rates):,.0f}-{max(rates):,.0f}")
    if len(rounded) == 2:
        pairs = [a.rate / b.rate for a, b in zip(rounded[0].rounds, rounded[1].rounds,
                                                 strict=True)]
        print(f"per-round ratio {rounded[0].name} / {rounded[1].name}: "
              + " ".join(f"{x:.2f}" for x in pairs)
              + f"; ratio of medians {rounded[0].rate / rounded[1].rate:.2f}")
    verdicts = Verdicts("twoway")
    for arm in arms.values():
        verdicts.ok(f"lookups answered with their row ({arm.name})", arm.errors, arm.lookups)
    f = figures

    def ratio(a: str, ka: str, b: str, kb: str) -> float:
        if a not in f or b not in f:
            return float("nan")
        return f[a][ka] / f[b][kb]

    verdicts.at_most("procs lag p50 saturating / light",
                     ratio("procs saturating", "lag50", "procs light", "lag50"), 1.5)
    verdicts.at_most("procs read p99 under churn / idle",
                     ratio("procs light", "p99", "procs idle", "p99"), 1.5)
    verdicts.at_least("procs lookups/s saturating / one runtime's",
                      ratio("procs saturating", "rate", "one saturating", "rate"), 1.3)
    verdicts.at_most("embedded procs lag p50 / embedded one runtime's",
                     ratio("embedded procs saturating", "lag50", "embedded one saturating",
                           "lag50"), 1.5)
    console.print(
        f"ratio threads lag p50 saturating / procs = "
        f"{ratio('threads saturating', 'lag50', 'procs saturating', 'lag50'):.2f}; "
        f"lookups/s threads / one = "
        f"{ratio('threads saturating', 'rate', 'one saturating', 'rate'):.2f}")
    plot(arms)
    return verdicts


def plot(arms: dict[str, Arm]) -> None:
    plt = pyplot()
    if plt is None:
        return
    IMG.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(10, 5))
    for arm in arms.values():
        acked, lags = arm.lags_ms()
        if len(acked):
            # Floored at 1 ms: a write absorbed before its acknowledgement arrived reads 0.
            ax.plot(acked - acked[0], np.maximum(lags, 1.0), ".-", label=arm.name,
                    markersize=3, linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xlabel("seconds into the arm")
    ax.set_ylabel("freshness lag per write (ms, log scale)")
    ax.set_title("index freshness while reads saturate, per arm")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    path = IMG / "twoway_lag.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    print(f"saved {path}")


ARMS: list[tuple[str, str, str, bool]] = [
    # name, mode (served) or "embedded-<runtimes>", reader, churn
    ("procs idle", "two", "light", False),
    ("procs light", "two", "light", True),
    ("procs saturating", "two", "saturating", True),
    ("threads saturating", "two-threads", "saturating", True),
    ("one saturating", "one", "saturating", True),
    ("embedded one saturating", "embedded-one", "saturating", True),
    ("embedded procs saturating", "embedded-two", "saturating", True),
]


def schedule(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(arm, round) in running order: each arm once where `ARMS` lists it, except the
    `ROUNDED` arms, which run in `args.rounds` rounds interleaved (A B A B ...) where the first
    of them is listed."""
    chosen = [a[0] for a in ARMS
              if not args.arms or any(a[0].startswith(p) for p in args.arms)]
    rounded = [n for n in ROUNDED if n in chosen]
    out: list[tuple[str, int]] = []
    for name in chosen:
        if name not in rounded:
            out.append((name, 0))
        elif name == rounded[0]:
            out += [(n, r) for r in range(args.rounds) for n in rounded]
    return out


async def main(args: argparse.Namespace) -> int:
    specs = {a[0]: a[1:] for a in ARMS}
    runs: dict[str, list[Arm]] = {}
    order = schedule(args)
    for name, r in order:
        mode, reader, churn = specs[name]
        rounds = args.rounds if name in ROUNDED else 1
        at = f" round {r + 1}/{rounds}" if name in ROUNDED else ""
        print(f"[{name}{at}] {args.rows:,} rows; {os.cpu_count()} cpus, load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        a = argparse.Namespace(**{**vars(args), "seconds": args.seconds / rounds})
        with tracing() as trace:
            if mode.startswith("embedded-"):
                arm = await embedded_arm(name, mode.removeprefix("embedded-"), a)
            else:
                arm = await served_arm(name, mode, reader, churn, a)  # type: ignore[arg-type]
        parts = breakdown(trace, arm.trace_gid, [(at, ts) for ts, at in arm.writes],
                          arm.frontier_log)
        if len(parts):
            arm.lag_parts.append(parts)
        runs.setdefault(name, []).append(arm)
    arms = {n: Arm.pooled(rs) if n in ROUNDED else rs[0] for n, rs in runs.items()}
    verdicts = report(arms, args)
    verdicts.out(verdicts.summary())
    return verdicts.exit_code()


def cli() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "churn":
        sys.exit(churn_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                            float(sys.argv[6])))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--rows", type=int, default=400_000, help="rows in the churned index")
    parser.add_argument("--churn", type=int, default=80_000, help="rows per churn write")
    parser.add_argument("--small", type=int, default=1_000, help="rows in the looked-up index")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds per arm")
    parser.add_argument("--arms", nargs="*", help="run only arms whose name starts with these")
    parser.add_argument("--one-session", action="store_true",
                        help="start the replica and the churn writer in this process's session "
                             "(the benchmark until 2026-12-03), not each in one of its own")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds of the lookups/s bar's two arms (each "
                             "--seconds / --rounds long)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.churn, args.seconds = 50_000, 10_000, 4.0
        args.rounds = min(args.rounds, 2)
    args.rounds = max(1, args.rounds)
    sys.exit(asyncio.run(main(args)))


if __name__ == "__main__":
    cli()
