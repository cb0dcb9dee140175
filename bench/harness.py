"""The served-replica harness the benchmarks share (`isolation.py`, `freshness.py`, `twoway.py`,
`memory.py`): the replica and writer processes' bodies (`serve_main`, `churn_main`, started as
`bench/isolation.py serve|churn` through `isolation.child`), starting and stopping a child
process (`child_of`), the benchmarks' tables (`DESC`, `block`, `tables`), and the controller side
of a replica connection: `Session` (responses routed to waiters), `session` (connect and
initialise, with the `step_durations` introspection index), `index_dataflow`, and the
step-duration histogram (`step_durations`, `bucket_percentile`, `diff_buckets`, `settle`).

A library, not a benchmark: nothing here runs on its own.
"""


from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa

from replica_diag import Sampler, Stages
from twofold.protocol import (
    ColumnType,
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
    SourceImport,
)
from twofold.storage import Storage, Table, open_storage
from twofold.transport import ReplicaConnection, connect

DESC = RelationDesc(["k", "v"], [ColumnType("int", nullable=False),
                                 ColumnType("int", nullable=False)])
STEP_LOG = GlobalId.introspection(1)
Mode = Literal["one", "two", "two-threads"]
"""One runtime; two with maintenance in a process of its own; two as threads of one process."""


# -- processes -------------------------------------------------------------------------------------


def serve_main(url: str, mode: Mode) -> int:
    """The replica process: serve on a free loopback port, print it, run until killed."""
    from twofold.replica import serve_replica

    switch = os.environ.get("TWOFOLD_BENCH_SWITCH_INTERVAL")
    if switch:
        sys.setswitchinterval(float(switch))
    dumps = []
    profile = os.environ.get("TWOFOLD_BENCH_PROFILE")
    if profile:
        dumps.append(Sampler(profile).dump)
    stages = os.environ.get("TWOFOLD_BENCH_STAGES")
    if stages:
        dumps.append(Stages(stages).dump)
    if dumps:
        def on_term(*_: object) -> None:
            for dump in dumps:
                dump()
            os._exit(0)

        signal.signal(signal.SIGTERM, on_term)

    async def run() -> int:
        ready: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(serve_replica(
            url, runtimes="one" if mode == "one" else "two", ready=ready,
            placement="threads" if mode == "two-threads" else "processes"))
        host, port = await ready
        print(f"LISTENING {host} {port}", flush=True)
        return await task

    return asyncio.run(run())


def block(start: int, n: int) -> pa.Table:
    k = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"k": k, "v": k * 7})


def tables(storage: Storage, rows: int, small_rows: int) -> tuple[Table, int, Table]:
    """These benchmarks' tables: `small` (`small_rows` rows; with the time of that write) and
    `big` (`rows` rows, written in blocks)."""
    small = storage.create_table("small", DESC)
    small_ts = small.insert(block(0, small_rows))
    big = storage.create_table("big", DESC)
    for start in range(0, rows, 250_000):
        big.insert(block(start, min(250_000, rows - start)))
    return small, small_ts, big


def churn_main(url: str, table: str, start: int, n: int) -> int:
    """The writer process: on each line of stdin, insert `n` rows (odd lines) or retract them
    (even lines) and print the write's timestamp."""
    storage = open_storage(url)
    t = storage.table(table)
    rows = block(start, n)
    print("READY", flush=True)
    for i, _ in enumerate(sys.stdin):
        ts = t.insert(rows) if i % 2 == 0 else t.delete(rows)
        print(ts, flush=True)
    return 0



@contextlib.contextmanager
def child_of(cmd: list[str], *, ready: str, own_session: bool = False
             ) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Start `cmd`, wait for a stdout line starting with `ready`, and stop it (by its own pid)
    on exit. `own_session`: in a session of its own (`setsid`), as a program started apart
    from the benchmark would be - where the kernel groups processes by session for CPU shares
    (`CONFIG_SCHED_AUTOGROUP`), a scheduling group of its own."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                            start_new_session=own_session)
    try:
        assert proc.stdout is not None
        while True:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"child {cmd[2:3]} exited before it was ready")
            if line.startswith(ready):
                break
        yield proc, line.strip()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- the controller side ---------------------------------------------------------------------------


@dataclass
class Session:
    """A controller connection that routes responses to waiters.

    A peek sent through `peek`/`ask` has a future of its own, which its response resolves: the
    measuring client wakes only that peek's waiter (with one shared event, each response woke
    every waiting reader to re-check, so the client's CPU per lookup grew with its readers and
    was the same in every arm, compressing ratios between arms). Other responses are kept in
    `frontiers`/`answers` and wake `wait`ers through `changed`."""

    conn: ReplicaConnection
    frontiers: dict[GlobalId, Frontier] = field(default_factory=dict)
    frontier_log: list[tuple[float, GlobalId, Frontier]] = field(default_factory=list)
    answers: dict[uuid.UUID, tuple[float, PeekResponse]] = field(default_factory=dict)
    pending: dict[uuid.UUID, asyncio.Future[PeekResponse]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def pump(self) -> None:
        try:
            while True:
                r: ComputeResponse | None = await self.conn.recv()
                now = time.perf_counter()
                if r is None:
                    return
                if isinstance(r, PeekResponse):
                    waiter = self.pending.pop(r.uuid, None)
                    if waiter is not None:
                        if not waiter.done():
                            waiter.set_result(r)
                        continue
                    self.answers[r.uuid] = (now, r)
                elif isinstance(r, Frontiers) and r.write_frontier is not None:
                    self.frontiers[r.id] = r.write_frontier
                    self.frontier_log.append((time.time(), r.id, r.write_frontier))
                self.changed.set()
        finally:
            self.changed.set()
            for waiter in self.pending.values():
                if not waiter.done():
                    waiter.set_exception(RuntimeError("the replica connection ended"))
            self.pending.clear()

    async def ask(self, peek: Peek, timeout: float | None = 60) -> PeekResponse:
        """Send `peek` and wait for its response alone (`timeout=None`: no timer of its own,
        for a caller that bounds a whole loop of them; the connection's end still fails it)."""
        waiter: asyncio.Future[PeekResponse] = asyncio.get_running_loop().create_future()
        self.pending[peek.uuid] = waiter
        if self.task is not None and self.task.done():
            self.pending.pop(peek.uuid, None)
            raise RuntimeError(f"the replica connection ended before peek {peek.uuid}")
        try:
            await self.conn.send(peek)
            if timeout is None:
                return await waiter
            async with asyncio.timeout(timeout):
                return await waiter
        finally:
            self.pending.pop(peek.uuid, None)

    async def wait(self, done: object, what: str, timeout: float) -> None:
        assert callable(done)
        async with asyncio.timeout(timeout):
            while not done():
                self.changed.clear()
                if self.task is not None and self.task.done():
                    self.task.result()
                    raise RuntimeError(f"the replica connection ended waiting for {what}")
                await self.changed.wait()

    async def caught_up(self, gid: GlobalId, t: Table, timeout: float = 600) -> None:
        up = t.upper

        def done() -> bool:
            f = self.frontiers.get(gid)
            return f is not None and up.less_equal(f)

        await self.wait(done, f"{gid} to reach {up}", timeout)

    async def peek(self, gid: GlobalId, ts: int, timeout: float = 60, **kw: object,
                   ) -> PeekResponse:
        peek = Peek(uuid.uuid4(), IndexTarget(gid), ts, **kw)  # type: ignore[arg-type]
        return await self.ask(peek, timeout)


def index_dataflow(name: str, t: Table, src: GlobalId, idx: GlobalId) -> CreateDataflow:
    up = t.upper.time
    assert up is not None
    return CreateDataflow(DataflowDescription(
        name, source_imports={src: SourceImport(t.shard.shard_id, t.desc)},
        index_exports={idx: (IndexDesc(src, [0]), t.desc)}, as_of=Frontier.at(up - 1)))


@contextlib.asynccontextmanager
async def session(host: str, port: int, *, step_log: bool = True,
                  ) -> AsyncIterator[Session]:
    conn = await connect(host, port, timeout=60)
    s = Session(conn)
    s.task = asyncio.create_task(s.pump())
    logging = LoggingConfig(interval_ms=500, enable_logging=True,
                            index_logs={"step_durations": STEP_LOG} if step_log else {})
    await conn.send(Hello(uuid.uuid4()))
    await conn.send(CreateInstance(InstanceConfig(logging=logging)))
    await conn.send(InitializationComplete())
    try:
        yield s
    finally:
        s.task.cancel()
        with contextlib.suppress(BaseException):
            await s.task
        await conn.aclose()


async def step_durations(s: Session) -> dict[str, list[tuple[int, int]]]:
    """The replica's step-duration histogram per runtime: sorted (le_us, count) buckets."""
    f = s.frontiers.get(STEP_LOG)
    if f is None or f.time is None:
        await s.wait(lambda: s.frontiers.get(STEP_LOG) is not None, "the step log", 30)
        f = s.frontiers[STEP_LOG]
    assert f.time is not None
    r = await s.peek(STEP_LOG, f.time - 1)
    out: dict[str, list[tuple[int, int]]] = {}
    if isinstance(r.result, PeekRows):
        for (runtime, le, count), diff in r.result.rows:
            out.setdefault(runtime, []).append((le, count * diff))
    return {k: sorted(v) for k, v in out.items()}


def bucket_percentile(buckets: list[tuple[int, int]], q: float) -> float:
    """The upper bound (ms) of the bucket holding the q-th percentile."""
    total = sum(c for _, c in buckets)
    if not total:
        return float("nan")
    acc = 0
    for le, c in buckets:
        acc += c
        if acc >= q / 100 * total:
            return le / 1000
    return buckets[-1][0] / 1000


def diff_buckets(after: list[tuple[int, int]], before: list[tuple[int, int]],
                 ) -> list[tuple[int, int]]:
    b = dict(before)
    return [(le, c - b.get(le, 0)) for le, c in after if c - b.get(le, 0) > 0]


async def settle(s: Session, long_us: int = 32_768, window: float = 1.0,
                 limit: float = 60.0) -> float:
    """Wait until a `window` passes with no step of `long_us` or more on any runtime (the
    arrangement's post-hydration merges are done), so no arm measures hydration leftovers."""
    start = time.perf_counter()
    before = await step_durations(s)
    while time.perf_counter() - start < limit:
        await asyncio.sleep(window)  # an observation window, not synchronisation
        after = await step_durations(s)
        new = [le for rt, b in after.items() for le, _ in diff_buckets(b, before.get(rt, []))]
        if not any(le >= long_us for le in new):
            break
        before = after
    return time.perf_counter() - start


