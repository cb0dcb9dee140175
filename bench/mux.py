"""Benchmark: responses merged per second through `Multiplexer.recv`, against one channel.

Two in-process runtimes both produce responses; the multiplexer merges them. The baseline is a
consumer reading the same total number of responses from a single in-process channel, through
the same harness (a loop of `await x.recv()`). Also measures commands routed per second through
`Multiplexer.send`. Rounds are short and many, and each round measures the baseline and the
multiplexer back to back (alternating which goes first), so both see the same machine load. Each
figure is the best and the median over the rounds; the median ratio is the median of the
per-round (paired) ratios, the figure least disturbed by other load on the machine.

Scenarios:
- `prequeued`: every response is already queued when the consumer starts.
- `producers`: one producer task per runtime puts responses in chunks of 64 and yields.
- `prequeued-plain`: as `prequeued`, but over `twofold.client.channel_pair` ends, which offer no
  `recv_nowait` (informational; the multiplexer then awaits every response).

Run: `python bench/mux.py` (add `--quick` for a short smoke run). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

from rich.console import Console
from rich.table import Table

from bars import Verdicts  # bench/ is the script's directory
from twofold.client import Pipe, channel_pair
from twofold.multiplex import Multiplexer
from twofold.protocol import (
    AllowCompaction,
    CancelPeek,
    ColumnType,
    ComputeCommand,
    ComputeResponse,
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
    LoggingConfig,
    Peek,
    PeekResponse,
    PeekRows,
    RelationDesc,
    Schedule,
)

CHUNK = 64


class PipeRuntime:
    """A runtime's client end over `twofold.client.Pipe`s, offering the optional
    `recv_nowait` fast path (a bound method, so a call costs one frame)."""

    def __init__(self) -> None:
        self.commands: Pipe[ComputeCommand] = Pipe()
        self.responses: Pipe[ComputeResponse] = Pipe()
        self.recv_nowait = self.responses.get_nowait

    async def send(self, command: ComputeCommand) -> None:
        self.commands.put(command)

    async def recv(self) -> ComputeResponse | None:
        return await self.responses.get()


def maintenance_responses(n: int) -> list[ComputeResponse]:
    ids = [GlobalId.user(i) for i in range(16)]
    return [Frontiers(ids[i % 16], write_frontier=Frontier.at(i)) for i in range(n)]


def interactive_responses(n: int) -> list[ComputeResponse]:
    rows = PeekResponse(uuid.uuid4(), PeekRows([([1, "a"], 1)]))
    ids = [GlobalId.transient(i) for i in range(16)]
    out: list[ComputeResponse] = []
    for i in range(n):
        out.append(rows if i % 2 else Frontiers(ids[i % 16], write_frontier=Frontier.empty()))
    return out


async def drain(recv: Callable[[], Awaitable[ComputeResponse | None]], total: int) -> float:
    """Seconds to receive `total` responses through `recv`; a stream that ends early is an
    error (a rate over responses that never arrived is no rate)."""
    start = time.perf_counter()
    for i in range(total):
        if await recv() is None:
            raise RuntimeError(f"the response stream ended after {i:,} of {total:,} responses")
    return time.perf_counter() - start


async def produce(pipe: Pipe[ComputeResponse], items: Sequence[ComputeResponse]) -> None:
    for i in range(0, len(items), CHUNK):
        for item in items[i : i + CHUNK]:
            pipe.put(item)
        await asyncio.sleep(0)


async def single_rate(n: int, scenario: str) -> float:
    items = maintenance_responses(n) + interactive_responses(n)
    if scenario == "prequeued-plain":
        client, replica = channel_pair()
        for item in items:
            replica.send_nowait(item)
        return 2 * n / await drain(client.recv, 2 * n)
    runtime = PipeRuntime()
    if scenario == "prequeued":
        for item in items:
            runtime.responses.put(item)
        return 2 * n / await drain(runtime.recv, 2 * n)
    producer = asyncio.create_task(produce(runtime.responses, items))
    seconds = await drain(runtime.recv, 2 * n)
    await producer
    return 2 * n / seconds


async def merged_rate(n: int, scenario: str) -> float:
    m_items, i_items = maintenance_responses(n), interactive_responses(n)
    if scenario == "prequeued-plain":
        (mc, mr), (ic, ir) = channel_pair(), channel_pair()
        for a, b in zip(m_items, i_items, strict=True):
            mr.send_nowait(a)
            ir.send_nowait(b)
        async with Multiplexer(maintenance=mc, interactive=ic) as mux:
            return 2 * n / await drain(mux.recv, 2 * n)
    m, i = PipeRuntime(), PipeRuntime()
    async with Multiplexer(maintenance=m, interactive=i) as mux:
        if scenario == "prequeued":
            for a, b in zip(m_items, i_items, strict=True):
                m.responses.put(a)
                i.responses.put(b)
            return 2 * n / await drain(mux.recv, 2 * n)
        producers = [
            asyncio.create_task(produce(m.responses, m_items)),
            asyncio.create_task(produce(i.responses, i_items)),
        ]
        seconds = await drain(mux.recv, 2 * n)
        await asyncio.gather(*producers)
        return 2 * n / seconds


def command_stream(rounds: int) -> list[ComputeCommand]:
    """A valid command sequence: instance setup, then per round a maintained index with its
    schedule and compactions, a peek dataflow, peeks, a cancel and the drops."""
    rel = RelationDesc(names=["k"], types=[ColumnType("int")])
    logs = {f"log{j}": GlobalId.introspection(j) for j in range(4)}
    out: list[ComputeCommand] = [
        Hello(uuid.uuid4()),
        CreateInstance(InstanceConfig(logging=LoggingConfig(index_logs=logs))),
        InitializationComplete(),
    ]
    for r in range(rounds):
        index, peek_df = GlobalId.user(r), GlobalId.transient(r)
        out.append(
            CreateDataflow(
                DataflowDescription(
                    f"index{r}",
                    index_exports={index: (IndexDesc(GlobalId.system(1), [0]), rel)},
                    as_of=Frontier.at(0),
                )
            )
        )
        out.append(Schedule(index))
        out.append(
            CreateDataflow(
                DataflowDescription(
                    f"peek{r}",
                    index_exports={peek_df: (IndexDesc(index, [0]), rel)},
                    as_of=Frontier.at(5),
                    until=Frontier.at(6),
                )
            )
        )
        out.append(Schedule(peek_df))
        peek = uuid.uuid4()
        out.append(Peek(peek, IndexTarget(index), 5))
        out.append(CancelPeek(peek))
        out.append(AllowCompaction(index, Frontier.at(r + 1)))
        out.append(AllowCompaction(peek_df, Frontier.empty()))
        out.append(AllowCompaction(index, Frontier.empty()))
    return out


async def command_rate(commands: list[ComputeCommand]) -> float:
    m, i = PipeRuntime(), PipeRuntime()
    async with Multiplexer(maintenance=m, interactive=i, strict=True) as mux:
        send = mux.send
        start = time.perf_counter()
        for command in commands:
            await send(command)
        return len(commands) / (time.perf_counter() - start)


async def timed(measure: Callable[[int, str], Awaitable[float]], n: int, scenario: str) -> float:
    """One measurement with the collector quiet, so neither side pays for the other's garbage."""
    gc.collect()
    gc.disable()
    try:
        return await measure(n, scenario)
    finally:
        gc.enable()


async def main(quick: bool) -> Verdicts:
    console = Console()
    # Short runs, many rounds: on a loaded 2-core machine a short run is less often preempted,
    # and the single-channel and merged runs of a round are measured back to back.
    n = 10_000 if quick else 50_000
    rounds = 3 if quick else 15
    commands = command_stream(200 if quick else 1_000)
    scenarios = ["prequeued", "producers", "prequeued-plain"]
    singles: dict[str, list[float]] = {s: [] for s in scenarios}
    merges: dict[str, list[float]] = {s: [] for s in scenarios}
    ratios: dict[str, list[float]] = {s: [] for s in scenarios}
    cmd_rates: list[float] = []
    for r in range(rounds):
        for scenario in scenarios:
            # Alternate which goes first, so neither always runs on a warmer machine.
            if r % 2:
                merged = await timed(merged_rate, n, scenario)
                single = await timed(single_rate, n, scenario)
            else:
                single = await timed(single_rate, n, scenario)
                merged = await timed(merged_rate, n, scenario)
            singles[scenario].append(single)
            merges[scenario].append(merged)
            ratios[scenario].append(merged / single)
        gc.collect()
        cmd_rates.append(await command_rate(commands))

    table = Table(title=f"multiplexer merge: {2 * n:,} responses per run, {rounds} rounds")
    for col in ("scenario", "single channel /s", "merged /s", "ratio"):
        table.add_column(col, justify="right")
    lines: list[str] = []
    for scenario in scenarios:
        best_s, best_m = max(singles[scenario]), max(merges[scenario])
        med_s, med_m = statistics.median(singles[scenario]), statistics.median(merges[scenario])
        paired = statistics.median(ratios[scenario])
        table.add_row(
            f"{scenario} (best)", f"{best_s:,.0f}", f"{best_m:,.0f}", f"{best_m / best_s:.2f}x"
        )
        table.add_row(f"{scenario} (median)", f"{med_s:,.0f}", f"{med_m:,.0f}", f"{paired:.2f}x")
        lines.append(
            f"{scenario:15s} best   single channel {best_s:11,.0f} responses/s  "
            f"merged {best_m:11,.0f} responses/s  ratio {best_m / best_s:.2f}x"
        )
        lines.append(
            f"{scenario:15s} median single channel {med_s:11,.0f} responses/s  "
            f"merged {med_m:11,.0f} responses/s  ratio {paired:.2f}x (median of paired rounds)"
        )
    console.print(table)
    lines.append(
        f"commands routed best {max(cmd_rates):,.0f} commands/s, "
        f"median {statistics.median(cmd_rates):,.0f} commands/s ({len(commands)} per run)"
    )
    for line in lines:
        print(line)
    verdicts = Verdicts("mux")
    # Every drain received all its responses (`drain` raises otherwise): 2n per run.
    runs = sum(len(singles[s]) + len(merges[s]) for s in scenarios)
    verdicts.ok("responses received", 0, runs * 2 * n)
    verdicts.at_least("merged responses/s, two runtimes producing (best)",
                      max(merges["producers"]), 500_000, "{:,.0f}")
    verdicts.at_least("merged / single channel, two runtimes producing (median)",
                      statistics.median(ratios["producers"]), 0.5)
    return verdicts


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    asyncio.run(main(parser.parse_args().quick)).exit()
