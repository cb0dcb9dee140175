"""Benchmark: peek round trips through the controller to a replica process, and history churn.

Part 1 — peeks. A `twofold replica --runtimes two` process serves a table of `--rows` rows with
an index on its key, over a SQLite file; a ticker in this process keeps the table's upper moving
(so frontier reports flow as they would in use). `callers` concurrent tasks each run point
lookups (`Controller.peek(idx, literal_constraints=[[key]])` at the latest readable time) back
to back for a fixed duration; every peek's round trip is timed. Reported per concurrency (1, 8,
64): p50/p99 latency and peeks/s. Side by side, in the same run and against the same replica
process: the same lookups sent as raw `Peek` commands over one `transport.connect` connection
without a controller (the floor the controller adds to), at 1 and 64 callers.

Part 2 — history. `CommandHistory` is driven directly (it is sans-IO) with `--commands` commands
of churn: create an index dataflow (`CreateDataflow`, `Schedule`), peek it and cancel the peek,
advance its compaction, drop the oldest (`AllowCompaction(empty)`) once `live` collections
exist. Reported: push throughput (including the automatic reductions), the history's size at the
end, the time of a final `reduce()`, and the reduced size per live collection — measured for two
`live` sizes side by side, which shows the reduced size tracks live state, not traffic.

Bars (issue 6): p50 <= 2 ms at one caller; >= 2,000 peeks/s at 64 callers; reduced history
proportional to live collections.

Run: `python bench/controller.py` (`--quick` for a short smoke run). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
from rich.console import Console
from rich.progress import Progress

from bars import Verdicts  # bench/ is the script's directory
from twofold.controller import CommandHistory, Controller
from twofold.protocol import (
    AllowCompaction,
    CancelPeek,
    ColumnType,
    CreateDataflow,
    CreateInstance,
    DataflowDescription,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    IndexDesc,
    IndexTarget,
    InitializationComplete,
    InstanceConfig,
    Peek,
    PeekResponse,
    PeekRows,
    RelationDesc,
    Schedule,
    SourceImport,
)
from twofold.storage import open_storage
from twofold.transport import connect

KV = RelationDesc(["k", "v"], [ColumnType("int", nullable=False), ColumnType("str")])
SRC, IDX = GlobalId.user(1), GlobalId.user(2)
err = Console(stderr=True)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def index_desc(src: GlobalId, idx: GlobalId, as_of: Frontier | None = None) -> DataflowDescription:
    return DataflowDescription(
        f"index-{idx}", source_imports={src: SourceImport("table/t", KV)},
        index_exports={idx: (IndexDesc(src, [0]), KV)}, as_of=as_of,
    )  # fmt: skip


# -- part 1: peeks ----------------------------------------------------------------------------


class ReplicaProcess:
    def __init__(self, url: str) -> None:
        cmd = [sys.executable, "-c", "from twofold.cli.main import main; main()", "replica",
               "--listen", "127.0.0.1:0", "--storage", url, "--runtimes", "two",
               "--log-level", "WARNING"]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise SystemExit(f"replica did not start: {line!r}")
        host, _, port = line.removeprefix("listening on ").strip().rpartition(":")
        self.address = (host, int(port))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def saturate(
    peek: Callable[[int], Awaitable[object]], callers: int, duration: float, keys: int
) -> tuple[list[float], float]:
    """`callers` tasks peeking back to back for `duration` s; (latencies, peeks/s)."""
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    stop_at = loop.time() + duration

    async def caller(n: int) -> None:
        key = n
        clock = time.perf_counter
        while loop.time() < stop_at:
            key = (key * 7919 + 1) % keys
            t0 = clock()
            await peek(key)
            latencies.append(clock() - t0)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(n) for n in range(callers)))
    elapsed = time.perf_counter() - t0
    return latencies, len(latencies) / elapsed


class RawClient:
    """Peeks over one connection without a controller: the transport-and-replica floor."""

    def __init__(self) -> None:
        self.waiting: dict[uuid.UUID, asyncio.Future[PeekResponse]] = {}
        self.frontier = Frontier.minimum()
        self.advanced = asyncio.Event()

    async def run(self, address: tuple[str, int], table_upper: Frontier) -> None:
        self.conn = await connect(*address)
        for cmd in (Hello(uuid.uuid4()), CreateInstance(InstanceConfig()),
                    InitializationComplete(),
                    CreateDataflow(index_desc(SRC, IDX, Frontier.minimum())), Schedule(IDX)):
            await self.conn.send(cmd)  # fmt: skip
        self.reader = asyncio.create_task(self._read())
        while not table_upper <= self.frontier:
            self.advanced.clear()
            await asyncio.wait_for(self.advanced.wait(), 60)

    async def _read(self) -> None:
        while (r := await self.conn.recv()) is not None:
            if isinstance(r, PeekResponse):
                fut = self.waiting.pop(r.uuid, None)
                if fut is not None:
                    fut.set_result(r)
            elif isinstance(r, Frontiers) and r.id == IDX and r.write_frontier is not None:
                self.frontier = r.write_frontier
                self.advanced.set()

    async def peek(self, key: int) -> object:
        ts = self.frontier.step_back()
        assert ts is not None
        u = uuid.uuid4()
        fut: asyncio.Future[PeekResponse] = asyncio.get_running_loop().create_future()
        self.waiting[u] = fut
        await self.conn.send(Peek(u, IndexTarget(IDX), ts, literal_constraints=[[key]]))
        r = await fut
        assert isinstance(r.result, PeekRows), r.result
        await self.conn.send(CancelPeek(u))  # as the controller does, for a fair comparison
        return r.result.rows

    async def close(self) -> None:
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        await self.conn.aclose()


async def bench_peeks(rows: int, duration: float, concurrencies: list[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        storage = open_storage(url)
        t = storage.create_table("t", KV)
        t.insert([[k, f"v{k}"] for k in range(rows)])
        answers = {"peeks": 0, "wrong": 0}

        def checked(peek: Callable[[int], Awaitable[object]]) -> Callable[[int], Awaitable[object]]:
            """Every key holds exactly one row: count the answers that are anything else (a
            latency measured over wrong answers is no latency)."""

            async def run(key: int) -> object:
                rows = await peek(key)
                answers["peeks"] += 1
                if not isinstance(rows, list) or len(rows) != 1:
                    answers["wrong"] += 1
                return rows

            return run
        replica = ReplicaProcess(url)
        try:
            with storage.ticker(0.1), Progress(console=err, transient=True) as progress:
                task = progress.add_task("peeks through the controller", total=len(concurrencies))
                async with Controller({1: lambda: connect(*replica.address)},
                                      config=InstanceConfig(storage=url)) as c:  # fmt: skip
                    await c.create_dataflow(index_desc(SRC, IDX))
                    await asyncio.wait_for(c.wait_for_frontier(IDX, t.upper), 60)

                    @checked
                    async def controller_peek(key: int) -> object:
                        return await c.peek(IDX, literal_constraints=[[key]])

                    await saturate(controller_peek, 4, min(1.0, duration), rows)  # warm-up
                    for n in concurrencies:
                        lat, rate = await saturate(controller_peek, n, duration, rows)
                        out[f"ctl p50 {n}"] = pct(lat, 0.5) * 1e3
                        out[f"ctl p99 {n}"] = pct(lat, 0.99) * 1e3
                        out[f"ctl rate {n}"] = rate
                        out[f"ctl n {n}"] = len(lat)
                        progress.advance(task)
                    out["history len"] = len(c.state.history)
                    out["regressions"] = c.state.regression_count
                # The controller's connection is closed; the raw client's Hello starts a new
                # iteration on the same replica process.
                task = progress.add_task("raw peeks (no controller)", total=2)
                raw = RawClient()
                await raw.run(replica.address, t.upper)
                try:
                    await saturate(checked(raw.peek), 4, min(1.0, duration), rows)  # warm-up
                    for n in (1, max(concurrencies)):
                        lat, rate = await saturate(checked(raw.peek), n, duration, rows)
                        out[f"raw p50 {n}"] = pct(lat, 0.5) * 1e3
                        out[f"raw p99 {n}"] = pct(lat, 0.99) * 1e3
                        out[f"raw rate {n}"] = rate
                        progress.advance(task)
                finally:
                    await raw.close()
        finally:
            replica.stop()
            storage.close()
    out["peeks"], out["wrong answers"] = answers["peeks"], answers["wrong"]
    return out


# -- part 2: history churn --------------------------------------------------------------------


def churn(commands: int, live: int, progress: Progress) -> dict[str, float]:
    """Push `commands` commands of create/peek/compact/drop churn keeping `live` indexes."""
    h = CommandHistory()
    template = index_desc(SRC, IDX, Frontier.at(0))
    ids = itertools.count(10)
    alive: list[GlobalId] = []
    compacted: dict[GlobalId, int] = {}
    peeks = itertools.count(1)
    pushed = 0
    task = progress.add_task(f"history churn, {live} live", total=commands)
    t0 = time.perf_counter()
    push = h.push
    for cmd in (Hello(uuid.UUID(int=0)), CreateInstance(InstanceConfig()),
                InitializationComplete()):
        push(cmd)  # fmt: skip
        pushed += 1
    step = 0
    while pushed < commands:
        step += 1
        idx = GlobalId.user(next(ids))
        desc = msgspec.structs.replace(template, index_exports={idx: template.index_exports[IDX]},
                                       as_of=Frontier.at(step))  # fmt: skip
        push(CreateDataflow(desc))
        push(Schedule(idx))
        alive.append(idx)
        compacted[idx] = step
        pushed += 2
        # Peeks and compactions on a few live indexes.
        for j in range(3):
            target = alive[(step * 31 + j * 17) % len(alive)]
            u = uuid.UUID(int=next(peeks))
            push(Peek(u, IndexTarget(target), compacted[target], literal_constraints=[[j]]))
            push(CancelPeek(u))
            compacted[target] += 1
            push(AllowCompaction(target, Frontier.at(compacted[target])))
            pushed += 3
        if len(alive) > live:
            gone = alive.pop(0)
            del compacted[gone]
            push(AllowCompaction(gone, Frontier.empty()))
            pushed += 1
        if step % 2000 == 0:
            progress.update(task, completed=pushed)
    push_s = time.perf_counter() - t0
    progress.update(task, completed=commands)
    before = len(h)
    t1 = time.perf_counter()
    h.reduce()
    reduce_s = time.perf_counter() - t1
    return {
        "pushed": pushed, "push s": push_s, "before": before, "reduce ms": reduce_s * 1e3,
        "after": len(h), "live": len(alive), "reductions": h.reductions,
        "exports": len(h.dataflow_exports()),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run")
    ap.add_argument("--rows", type=int, default=None, help="table rows (default 100k; 10k quick)")
    ap.add_argument("--duration", type=float, default=None, help="seconds per concurrency")
    ap.add_argument("--commands", type=int, default=None, help="churn commands (default 1M)")
    args = ap.parse_args()
    rows = args.rows or (10_000 if args.quick else 100_000)
    duration = args.duration or (1.5 if args.quick else 5.0)
    commands = args.commands or (100_000 if args.quick else 1_000_000)
    concurrencies = [1, 8, 64]

    print(f"bench/controller.py: rows={rows} duration={duration}s/arm commands={commands} "
          f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}")  # fmt: skip
    p = asyncio.run(bench_peeks(rows, duration, concurrencies))
    for n in concurrencies:
        print(f"peek via controller, {n:>2} callers: p50 {p[f'ctl p50 {n}']:.2f} ms  "
              f"p99 {p[f'ctl p99 {n}']:.2f} ms  {p[f'ctl rate {n}']:,.0f} peeks/s  "
              f"({p[f'ctl n {n}']:,.0f} peeks)")  # fmt: skip
    top = max(concurrencies)
    for n in (1, top):
        print(f"peek raw (no controller), {n:>2} callers: p50 {p[f'raw p50 {n}']:.2f} ms  "
              f"p99 {p[f'raw p99 {n}']:.2f} ms  {p[f'raw rate {n}']:,.0f} peeks/s")  # fmt: skip
    print(f"ratios: controller/raw p50 at 1 caller {p['ctl p50 1'] / p['raw p50 1']:.2f}x; "
          f"controller/raw peeks/s at {top} callers "
          f"{p[f'ctl rate {top}'] / p[f'raw rate {top}']:.2f}x; "
          f"controller peeks/s {top} vs 1 callers {p[f'ctl rate {top}'] / p['ctl rate 1']:.2f}x; "
          f"controller history after the peeks {p['history len']:.0f} commands, "
          f"regressions {p['regressions']:.0f}")  # fmt: skip
    verdicts = Verdicts("controller")
    verdicts.ok("peeks answered with the key's one row", int(p["wrong answers"]),
                int(p["peeks"]))
    verdicts.check("no frontier regressions", p["regressions"] == 0,
                   f"{p['regressions']:.0f} regressions")
    verdicts.at_most("peek p50 ms at 1 caller", p["ctl p50 1"], 2.0)
    verdicts.at_least(f"peeks/s at {top} callers", p[f"ctl rate {top}"], 2000, "{:,.0f}")

    results = []
    with Progress(console=err, transient=True) as progress:
        for live in (100, 1000):
            results.append(churn(commands, live, progress))
    for r in results:
        print(f"history churn, {r['live']:.0f} live: {r['pushed']:,.0f} commands pushed in "
              f"{r['push s']:.2f} s ({r['pushed'] / r['push s']:,.0f}/s, {r['reductions']:.0f} "
              f"reductions); size before final reduce {r['before']:,.0f}; reduce "
              f"{r['reduce ms']:.2f} ms; reduced size {r['after']:,.0f} = "
              f"{r['after'] / r['live']:.2f} per live collection")  # fmt: skip
    a, b = results
    size_ratio = b["after"] / a["after"]
    live_ratio = b["live"] / a["live"]
    print(f"ratios: reduced size {b['live']:.0f} vs {a['live']:.0f} live {size_ratio:.2f}x "
          f"for {live_ratio:.0f}x the live collections; reduced/pushed "
          f"{b['after'] / b['pushed']:.5f}; reduce time {b['reduce ms'] / a['reduce ms']:.2f}x")
    proportional = abs(size_ratio / live_ratio - 1) < 0.2
    verdicts.check("reduced history proportional to live collections", proportional,
                   f"{a['after'] / a['live']:.2f} and {b['after'] / b['live']:.2f} commands per "
                   f"live collection")
    verdicts.exit()


if __name__ == "__main__":
    main()
