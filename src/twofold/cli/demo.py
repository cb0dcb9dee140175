"""`twofold demo`: a bounded, self-contained workload on the embedded default, with a live view
and a summary comparing reads on one runtime and on two.

Contract: `run_demo(duration)` runs the same workload twice — on a replica with one runtime
(`solo`: maintenance and reads share a thread) and on one with two (maintenance + interactive) —
for half of `duration` each, and returns a `DemoReport` with per-phase lookup latencies measured
by the client, peek and step durations recorded by the replica (`ReplicaMetrics`), and counts.
The workload: customers and a stream of orders (inserts, updates, deletes) with a churning
maintained aggregate (revenue per customer, an index), a revenue-per-region materialized view
and the largest open order per region (an index), while a reader does point lookups on the
revenue index as fast as it can.

The largest order per region is what makes maintenance expensive, on purpose: a `max` is kept
by recomputing every group a step touches (the engine keeps no per-group order statistic), and
with five regions every write touches all of them, so each step re-reads every open order. Sums
and counts, by contrast, are maintained in time proportional to the write (exact incremental
sums), which left one runtime's steps too short to show what two runtimes are for.

The writes come from a process of their own, on a fixed schedule (`write_main`): a writer
thread in the demo's process would share its interpreter lock with a reader that never yields
it, and would manage a fraction of its writes in whichever phase reads fastest — the phases
would no longer run the same workload. Needs nothing but the installed package; the database is
a scratch SQLite file, removed when the phase ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table as RichTable
from rich.text import Text

import twofold
from twofold import col, count, sum
from twofold import max as max_of
from twofold.storage import Table as StorageTable
from twofold.storage import open_storage

REGIONS = ("north", "south", "east", "west", "central")


def percentile(samples: list[float], q: float) -> float:
    """The `q`-quantile (0..1) of `samples` by nearest rank; NaN when empty."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:.2f}"


@dataclass
class PhaseStats:
    """What one phase measured."""

    mode: str
    lookups: list[float] = field(default_factory=list)
    """Client-side lookup latencies (s)."""
    peeks: dict[str, list[float]] = field(default_factory=dict)
    """Replica-side peek durations per runtime (s)."""
    steps: dict[str, list[float]] = field(default_factory=dict)
    """Replica-side maintenance step durations per runtime (s)."""
    writes: int = 0
    rows_written: int = 0
    elapsed: float = 0.0
    collections: list[tuple[str, str, int | None]] = field(default_factory=list)
    """(name, kind, lag behind now in ms)."""


@dataclass
class DemoReport:
    phases: list[PhaseStats]

    def phase(self, mode: str) -> PhaseStats:
        return next(p for p in self.phases if p.mode == mode)


ORDERS_PER_CUSTOMER = 5
"""Seed orders per customer: the open orders each step of the largest-order index re-reads."""

Order = tuple[int, int, float, str]


class Churn:
    """The stream of order writes: new orders, some cancelled (updated), some deleted."""

    def __init__(self, rng: random.Random, customers: int) -> None:
        self.rng = rng
        self.n_customers = customers
        self.next_order = 1
        self.live: list[Order] = []

    def new_orders(self, n: int) -> list[Order]:
        rows = []
        for _ in range(n):
            rows.append((self.next_order, self.rng.randrange(self.n_customers),
                         round(self.rng.uniform(1, 500), 2), "open"))
            self.next_order += 1
        self.live.extend(rows)
        return rows

    def churn(self, orders: StorageTable, batch: int) -> int:
        """One write into `orders`: new orders, some cancelled (updated), some deleted — one
        timestamp. Returns the rows written."""
        new = self.new_orders(batch)
        k = min(len(self.live) // 4, batch // 4)
        picks = self.rng.sample(range(len(self.live)), 2 * k) if k else []
        updated = [self.live[i] for i in picks[:k]]
        deleted = [self.live[i] for i in picks[k:]]
        cancelled = [(o, c, a, "cancelled") for o, c, a, _ in updated]
        rows = [*new, *updated, *cancelled, *deleted]
        diffs = [1] * len(new) + [-1] * len(updated) + [1] * len(cancelled) + [-1] * len(deleted)
        orders.write([list(r) for r in rows], diffs)
        gone = set(picks)
        kept = [r for i, r in enumerate(self.live) if i not in gone]
        kept.extend(cancelled)
        self.live = kept
        return len(rows)


class Workload:
    """Orders and customers with churning aggregates; one instance per phase."""

    def __init__(self, db: twofold.AsyncDatabase, rng: random.Random, customers: int) -> None:
        self.db = db
        self.churn = Churn(rng, customers)
        self.n_customers = customers

    async def setup(self, seed_orders: int) -> twofold.Index:
        db = self.db
        self.customers = db.create_table(
            "customers", {"id": int, "name": str, "region": str}, nullable=False)
        self.orders = db.create_table(
            "orders", {"id": int, "customer": int, "amount": float, "status": str},
            nullable=False)
        self.customers.insert([(i, f"customer-{i}", REGIONS[i % len(REGIONS)])
                               for i in range(self.n_customers)])
        self.orders.insert(self.churn.new_orders(seed_orders))
        revenue = self.orders.filter(col("status") != "cancelled").group_by("customer").agg(
            sum("amount").alias("revenue"), count().alias("orders"))
        self.revenue = await db.create_index("revenue_by_customer", revenue, key="customer")
        self.by_id = await db.create_index("customers_by_id", self.customers, key="id")
        by_region = (self.orders.join(self.customers, left_on="customer", right_on="id")
                     .group_by("region").agg(sum("amount").alias("revenue"), count()))
        view = await db.create_materialized_view("revenue_by_region", by_region)
        # Expensive on purpose (see the module docstring): every write touches every region.
        largest = (self.orders.filter(col("status") == "open")
                   .join(self.customers, left_on="customer", right_on="id")
                   .group_by("region").agg(max_of("amount").alias("largest")))
        self.largest = await db.create_index("largest_order_by_region", largest, key="region")
        # Start the clock only once every maintained collection has caught up with the seed
        # data: the comparison is about steady-state churn, not the initial build.
        seeded = db.now()
        # All at once: each read holds its collection at `seeded` while it waits, so an index
        # that caught up first is not compacted past it meanwhile (the history kept is short,
        # and a first build can take seconds: with two runtimes, a process starts).
        await asyncio.gather(*(db.query(obj, as_of=seeded)
                               for obj in (self.revenue, self.by_id, view, self.largest)))
        return self.revenue


def write_main(argv: Sequence[str]) -> int:
    """The demo's writer process: `python -m twofold.cli.demo write URL SEED CUSTOMERS SEED_ORDERS
    BATCH INTERVAL SECONDS`. It replays the seed to know the live orders (the demo's process
    wrote the same ones), prints `READY`, then writes one churn batch every INTERVAL seconds on
    a fixed schedule — the load does not wait for the database — printing each write's rows."""
    parser = argparse.ArgumentParser(prog="twofold-demo-writer")
    parser.add_argument("url")
    for name in ("seed", "customers", "seed_orders", "batch"):
        parser.add_argument(name, type=int)
    parser.add_argument("interval", type=float)
    parser.add_argument("seconds", type=float)
    args = parser.parse_args(argv)
    churn = Churn(random.Random(args.seed), args.customers)
    churn.new_orders(args.seed_orders)
    parent = os.getppid()
    storage = open_storage(args.url)
    try:
        orders = storage.table("orders")
        print("READY", flush=True)
        begin = time.monotonic()
        i = 0
        while (now := time.monotonic()) - begin < args.seconds and os.getppid() == parent:
            # (A demo killed outright leaves no writer behind: it stops with its parent.)
            due = begin + i * args.interval
            if due > now:
                time.sleep(due - now)  # a fixed schedule, whatever the database is doing
            print(churn.churn(orders, args.batch), flush=True)
            i += 1
    finally:
        storage.close()
    return 0


@contextlib.asynccontextmanager
async def writer_process(url: str, stats: PhaseStats, *, seed: int, customers: int,
                         seed_orders: int, batch: int, interval: float, seconds: float,
                         ) -> AsyncIterator[None]:
    """Run `write_main` for the phase, counting its writes into `stats`."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "twofold.cli.demo", "write", url, str(seed), str(customers),
        str(seed_orders), str(batch), repr(interval), repr(seconds),
        stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    try:
        ready = await proc.stdout.readline()
        if not ready.startswith(b"READY"):
            raise RuntimeError("the demo's writer process did not start")

        async def count() -> None:
            assert proc.stdout is not None
            while line := await proc.stdout.readline():
                stats.rows_written += int(line)
                stats.writes += 1

        counter = asyncio.create_task(count())
        try:
            yield
        finally:
            counter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await counter
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


def _roles(mode: str) -> list[str]:
    return ["solo"] if mode == "one" else ["maintenance", "interactive"]


def snapshot(db: twofold.AsyncDatabase, stats: PhaseStats) -> None:
    """Copy the replica's metrics and the collections' frontiers into `stats`."""
    replica = db.replica
    assert replica is not None
    for role in _roles(stats.mode):
        stats.peeks[role] = replica.metrics.peek_durations.recent(role)
        stats.steps[role] = replica.metrics.step_durations.recent(role)
    now = db.now()
    stats.collections = []
    for name in ("orders", "customers", "revenue_by_customer", "customers_by_id",
                 "revenue_by_region", "largest_order_by_region"):
        obj = db.get(name)
        kind = type(obj).__name__
        upper = db.frontier(obj).time
        stats.collections.append((name, kind, None if upper is None else max(0, now - upper)))


def live_view(stats: PhaseStats, duration: float) -> Group:
    head = Text.assemble(
        ("twofold demo ", "bold"), (f"phase: runtimes={stats.mode}  ", "cyan"),
        f"{stats.elapsed:4.1f}/{duration:.0f} s  writes {stats.writes} "
        f"({stats.rows_written} rows)  lookups {len(stats.lookups)}")
    coll = RichTable(title="collections", expand=False)
    coll.add_column("name")
    coll.add_column("kind")
    coll.add_column("frontier lag (ms)", justify="right")
    for name, kind, lag in stats.collections:
        coll.add_row(name, kind, "-" if lag is None else str(lag))
    rt = RichTable(title="runtimes (replica metrics, recent samples)")
    for c in ("runtime", "peeks", "peek p50 ms", "peek p99 ms", "steps", "step p50 ms",
              "step p99 ms"):
        rt.add_column(c, justify="right" if c != "runtime" else "left")
    for role in _roles(stats.mode):
        p, s = stats.peeks.get(role, []), stats.steps.get(role, [])
        rt.add_row(role, str(len(p)), ms(percentile(p, 0.5)), ms(percentile(p, 0.99)),
                   str(len(s)), ms(percentile(s, 0.5)), ms(percentile(s, 0.99)))
    look = Text(f"client lookups: p50 {ms(percentile(stats.lookups, 0.5))} ms, "
                f"p99 {ms(percentile(stats.lookups, 0.99))} ms")
    return Group(head, coll, rt, look)


async def run_phase(mode: str, duration: float, *, customers: int, seed: int,
                    batch: int = 20, write_interval: float = 0.1,
                    on_update: Callable[[PhaseStats], None] | None = None) -> PhaseStats:
    """Run the workload for `duration` seconds on a replica with `mode` runtimes."""
    stats = PhaseStats(mode)
    rng = random.Random(seed)
    seed_orders = customers * ORDERS_PER_CUSTOMER
    # Lookups read the latest complete time: they never wait for maintenance to catch up,
    # which is exactly what two runtimes are for. Both phases keep the database in a scratch
    # SQLite file, which the writer process opens too.
    with tempfile.TemporaryDirectory(prefix="twofold-demo-") as tmp:
        path = Path(tmp) / "demo.db"
        async with twofold.open_async(path, runtimes=mode,  # type: ignore[arg-type]
                                      consistency="latest", tick_interval=0.02,
                                      timeout=30) as db:
            work = Workload(db, rng, customers)
            index = await work.setup(seed_orders=seed_orders)
            async with writer_process(f"sqlite:///{path}", stats, seed=seed,
                                      customers=customers, seed_orders=seed_orders,
                                      batch=batch, interval=write_interval,
                                      seconds=duration + 1):
                await _read(db, index, stats, duration, customers=customers, seed=seed,
                            on_update=on_update)
    return stats


async def _read(db: twofold.AsyncDatabase, index: twofold.Index, stats: PhaseStats,
                duration: float, *, customers: int, seed: int,
                on_update: Callable[[PhaseStats], None] | None) -> None:
    """The phase's reader, as fast as it can, for `duration` seconds."""
    stop = asyncio.Event()
    start = time.perf_counter()

    async def reader() -> None:
        keys = random.Random(seed + 1)
        while not stop.is_set():
            t0 = time.perf_counter()
            await db.lookup(index, keys.randrange(customers))
            stats.lookups.append(time.perf_counter() - t0)

    tasks = [asyncio.create_task(reader())]
    try:
        while (elapsed := time.perf_counter() - start) < duration:
            stats.elapsed = elapsed
            snapshot(db, stats)
            if on_update is not None:
                on_update(stats)
            await asyncio.sleep(0.25)
    finally:
        stop.set()
        # A lookup stuck behind a long step would stretch the phase: cancel, don't wait.
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    stats.elapsed = time.perf_counter() - start
    snapshot(db, stats)
    for t in tasks:
        if not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]


async def run_demo(duration: float = 30.0, *, customers: int = 1000, seed: int = 0,
                   console: Console | None = None, live: bool = True) -> DemoReport:
    """Both phases, one after the other, each for half of `duration`."""
    logging.getLogger("twofold").setLevel(logging.ERROR)
    console = console or Console()
    phases = []
    for mode in ("one", "two"):
        if live:
            with Live(console=console, refresh_per_second=4, transient=False) as view:
                stats = await run_phase(
                    mode, duration / 2, customers=customers, seed=seed,
                    on_update=lambda s: view.update(live_view(s, duration / 2)))
                view.update(live_view(stats, duration / 2))
        else:
            console.print(f"phase runtimes={mode}: running {duration / 2:.1f} s ...")
            stats = await run_phase(mode, duration / 2, customers=customers, seed=seed)
        phases.append(stats)
    return DemoReport(phases)


def summary_table(report: DemoReport) -> RichTable:
    table = RichTable(title="Summary: point lookups on a churning index, one runtime vs two",
                      caption="lookups: client-side latency; steps: the maintaining runtime")
    for c in ("runtimes", "lookups", "per s", "p50 ms", "p99 ms", "max ms",
              "writes", "rows", "step p50 ms", "step p99 ms"):
        table.add_column(c, justify="right" if c != "runtimes" else "left")
    for p in report.phases:
        steps = p.steps.get("solo" if p.mode == "one" else "maintenance", [])
        table.add_row(
            p.mode, str(len(p.lookups)), f"{len(p.lookups) / max(p.elapsed, 1e-9):.0f}",
            ms(percentile(p.lookups, 0.5)), ms(percentile(p.lookups, 0.99)),
            ms(max(p.lookups, default=float("nan"))), str(p.writes), str(p.rows_written),
            ms(percentile(steps, 0.5)), ms(percentile(steps, 0.99)))
    return table


def ratio_line(report: DemoReport) -> str:
    one, two = report.phase("one"), report.phase("two")
    parts = []
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        a, b = percentile(one.lookups, q), percentile(two.lookups, q)
        if a == a and b == b and b > 0:
            parts.append(f"{label} one/two = {a / b:.2f}x")
    return "lookup latency ratio (same run, same workload): " + (", ".join(parts) or "n/a")



if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "write":
        sys.exit(write_main(sys.argv[2:]))
    sys.exit("usage: python -m twofold.cli.demo write ... (the demo's writer process)")
