"""pgwire: point lookups through a prepared statement (psycopg 3), twofold's indexed lookup
against PostgreSQL 15's primary-key lookup on the same data, at 1, 16 and 64 connections;
SUBSCRIBE delivery latency (INSERT on one connection → the row on another); COPY FROM STDIN;
another session's point lookups while a long statement runs (a 20k-row INSERT, a 100k-row
SELECT: spec/pgwire.md's "no statement of one session can block another session's reads").

Bar (issue 15): twofold's p50 within 2x of PostgreSQL's at every connection count. Every
timed operation is checked (the lookup returns the key's one row).

    python bench/pgwire.py [--rows 100000] [--seconds 5] [--quick] [--connections 1,16,64]
                           [--warmup 1]
                           [--lookups-only]

`--connections` picks the connection counts (`--connections 1` for the one-connection bar
alone); `--lookups-only` skips the SUBSCRIBE delivery run (the COPY that loads the table is
still timed). Before each timed window both servers get `--warmup` seconds (default 1) of the
same lookups, untimed: the steady state is measured, not the first second after the load
(twofold's maintenance process is still merging the batches COPY wrote then: 0.181 ms p50 in
the first 2.5 s against 0.157-0.165 in the next three windows, one connection, load 1.0).

The client is the same for both servers: its connections (one thread each) are spread over one
process per core, so one interpreter lock does not serialize them (a single client process
with 16 or 64 threads took ~70-90 us of CPU per lookup under its lock, which bounds the rate
near 11-14k q/s whichever server answers and adds its own queueing to both servers'
latencies). Each arm prints the client's CPU
per lookup beside the server's (twofold's serve process and maintenance child; PostgreSQL's
postmaster and backends): on two cores the client's share is the servers' to lose alike.
Both servers are up at once and each connection count's twofold arm is followed by
PostgreSQL's, so both meet about the same load on a shared machine; twofold (its serve process
and maintenance child) is stopped with SIGSTOP through PostgreSQL's arms, so that its idle
background work takes none of their CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import multiprocessing
import os
import random
import re
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).parent))
from bars import Verdicts
from procstat import _TICK, children, cpu_ticks


@contextlib.contextmanager
def twofold_serve() -> Iterator[tuple[str, int]]:
    """`twofold serve` in its own process (as PostgreSQL runs in its own): its DSN and pid."""
    argv = [sys.executable, "-c", "from twofold.cli.main import main; main()", "serve",
            "--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"listening on ([\d.]+):(\d+)", line)
        if found is None:
            raise RuntimeError(f"twofold serve did not start: {line!r}")
        yield f"host={found[1]} port={found[2]} user=twofold dbname=twofold", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ServerCpu:
    """A server's CPU seconds over a window: `pid`'s own (all its threads) and its children's
    (those alive when the window opens: a PostgreSQL backend per client connection, twofold's
    maintenance process), from `/proc`."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.own = 0.0
        self.children = 0.0

    @contextlib.contextmanager
    def window(self) -> Iterator[None]:
        kids = children(self.pid)
        t0 = cpu_ticks(self.pid) or 0
        k0 = sum(cpu_ticks(k) or 0 for k in kids)
        yield
        t1 = cpu_ticks(self.pid) or 0
        k1 = sum(cpu_ticks(k) or 0 for k in kids)
        self.own = (t1 - t0) / _TICK
        self.children = (k1 - k0) / _TICK


@contextlib.contextmanager
def paused(pid: int) -> Iterator[None]:
    """`pid` and its children stopped (SIGSTOP) for the block, then continued."""
    pids = [pid, *children(pid)]
    for p in pids:
        os.kill(p, signal.SIGSTOP)
    try:
        yield
    finally:
        for p in reversed(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def copy_in(dsn: str, table: str, rows: int) -> float:
    buf = io.StringIO()
    for k in range(rows):
        buf.write(f"{k}\t{k * 0.5}\tv{k}\n")
    data = buf.getvalue().encode()
    with psycopg.connect(dsn, autocommit=True) as c:
        start = time.perf_counter()
        with c.cursor().copy(f"COPY {table} FROM STDIN") as cp:
            for i in range(0, len(data), 1 << 20):
                cp.write(data[i:i + (1 << 20)])
        elapsed = time.perf_counter() - start
        (n,) = c.execute(f"SELECT count(*) FROM {table}").fetchone() or (0,)
        assert n == rows, (n, rows)
    return rows / elapsed


def _client_process(dsn: str, table: str, rows: int, conns: int, seed: int,
                    seconds: float, ready: Any, start: Any, done: Any, out: Any) -> None:
    """One client process: `conns` connections, one thread each, a closed loop of lookups for
    `seconds` once `start` is set; sends (latencies in ms, failures, its CPU seconds and its
    voluntary context switches over the window) back on `out`, and closes its connections
    once `done` is set (a PostgreSQL backend's CPU is read while it lives)."""
    lat: list[list[float]] = [[] for _ in range(conns)]
    failed = [0] * conns
    connections = [psycopg.connect(dsn, autocommit=True) for _ in range(conns)]
    sql = f"SELECT k, v, s FROM {table} WHERE k = %s"
    for c in connections:  # prepare on the server before timing
        for _ in range(3):
            c.execute(sql, [0], prepare=True).fetchall()
    ready.set()
    start.wait()
    stop = time.perf_counter() + seconds
    cpu0 = time.process_time()
    waits0 = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw

    def client(i: int) -> None:
        rnd = random.Random(seed * 1000 + i)
        c = connections[i]
        while time.perf_counter() < stop:
            k = rnd.randrange(rows)
            t0 = time.perf_counter()
            try:
                got = c.execute(sql, [k], prepare=True).fetchall()
                ok = got == [(k, k * 0.5, f"v{k}")]
            except psycopg.Error:
                ok = False
            lat[i].append((time.perf_counter() - t0) * 1000)
            failed[i] += not ok

    threads = [threading.Thread(target=client, args=(i,)) for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = time.process_time() - cpu0
    waits = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - waits0
    out.send(([x for xs in lat for x in xs], sum(failed), cpu, waits))
    out.close()
    done.wait(60)
    for c in connections:
        c.close()


def client_processes(conns: int) -> int:
    """How many processes the `conns` client connections are spread over: one per core (at
    most one per connection), so the client's interpreter lock does not serialize its threads
    and cap the servers' rate; the same for both servers."""
    return max(1, min(conns, os.cpu_count() or 1))


def lookups(dsn: str, table: str, rows: int, conns: int, seconds: float,
            window: Any = None) -> tuple[list[float], int, int, float, int]:
    """(latencies in ms, operations, failures, client CPU seconds, client voluntary context
    switches: each time one of its threads slept, on its socket or on its interpreter
    lock) of `conns` clients for
    `seconds`, spread over `client_processes(conns)` processes; `window` (a context manager
    factory) is entered for exactly the timed window, once every client is connected."""
    ctx = multiprocessing.get_context("fork")
    procs = client_processes(conns)
    start, done = ctx.Event(), ctx.Event()
    workers = []
    for p in range(procs):
        n = conns // procs + (p < conns % procs)
        ready = ctx.Event()
        recv, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client_process,
                           args=(dsn, table, rows, n, p, seconds, ready, start, done, send))
        proc.start()
        send.close()
        workers.append((proc, ready, recv))
    for _, ready, _ in workers:
        if not ready.wait(60):
            raise RuntimeError("a client process did not connect")
    flat: list[float] = []
    bad = 0
    cpu = 0.0
    waits = 0
    with window() if window is not None else contextlib.nullcontext():
        start.set()
        results = [recv.recv() for _, _, recv in workers]
    done.set()
    for proc, _, _ in workers:
        proc.join(30)
    for lat, failed, used, slept in results:
        flat += lat
        bad += failed
        cpu += used
        waits += slept
    return flat, len(flat), bad, cpu, waits


def _run_statement(dsn: str, text: str, out: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        start = time.perf_counter()
        c.execute(text)
        out.send((start, time.perf_counter()))


def reads_during(dsn: str, table: str, text: str) -> tuple[list[float], float]:
    """Another session's point lookups (one connection, closed loop) while statement `text`
    runs in a client process of its own (its rows decoded under its own interpreter lock, not
    the measuring one's): the latencies (ms) of the lookups that began and ended inside the
    statement's span, and the span (ms). The spec's "no statement of one session can block
    another session's reads", measured."""
    ctx = multiprocessing.get_context("fork")
    spans: list[tuple[float, float]] = []
    stop = threading.Event()

    def reader() -> None:
        with psycopg.connect(dsn, autocommit=True) as r:
            sql = f"SELECT k, v, s FROM {table} WHERE k = %s"
            while not stop.is_set():
                t0 = time.perf_counter()
                r.execute(sql, [7], prepare=True).fetchall()
                spans.append((t0, time.perf_counter()))

    th = threading.Thread(target=reader)
    th.start()
    time.sleep(0.3)
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_run_statement, args=(dsn, text, send))
    proc.start()
    send.close()
    start, end = recv.recv()
    proc.join(30)
    stop.set()
    th.join(30)
    inside = [(b - a) * 1000 for a, b in spans if a > start and b < end]
    return inside, (end - start) * 1000


def long_statements(dsn: str) -> dict[str, tuple[list[float], float]]:
    """`reads_during` a 20,000-row INSERT ... VALUES and a 100,000-row SELECT."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE long_ins (k bigint, v double precision, s text)")
    values = ", ".join(f"({k}, {k}.5, 'x{k}')" for k in range(20_000))
    return {
        "20k-row INSERT": reads_during(dsn, "kv", f"INSERT INTO long_ins VALUES {values}"),
        "100k-row SELECT": reads_during(dsn, "kv", "SELECT * FROM kv"),
    }


def subscribe_latency(dsn: str, samples: int) -> tuple[list[float], int]:
    with psycopg.connect(dsn, autocommit=True) as w:
        w.execute("CREATE TABLE sub_bench (k bigint, t double precision)")
    sent: dict[int, float] = {}
    got: list[float] = []
    done = threading.Event()

    def reader() -> None:
        with psycopg.connect(dsn, autocommit=True) as r, r.cursor() as cur:
            for row in cur.stream("SUBSCRIBE sub_bench WITH (SNAPSHOT = false)"):
                k = row[2]
                if k in sent:
                    got.append((time.perf_counter() - sent[k]) * 1000)
                if len(got) >= samples or done.is_set():
                    break

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    time.sleep(1.0)
    with psycopg.connect(dsn, autocommit=True) as w:
        for k in range(samples):
            sent[k] = time.perf_counter()
            w.execute("INSERT INTO sub_bench VALUES (%s, 0)", [k])
            time.sleep(0.05)
    th.join(30)
    done.set()
    return got, samples - len(got)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--connections", default=None,
                    help="comma-separated connection counts (default 1,16,64; --quick 1,4)")
    ap.add_argument("--lookups-only", action="store_true", help="no SUBSCRIBE delivery run")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="untimed seconds of the same lookups before each timed window")
    args = ap.parse_args()
    rows, seconds, levels = args.rows, args.seconds, [1, 16, 64]
    if args.quick:
        rows, seconds, levels = 5_000, 1.0, [1, 4]
    if args.connections:
        levels = [int(n) for n in args.connections.split(",")]
    verdicts = Verdicts("pgwire")
    from twofold.testing.pgcluster import PgCluster, ServerUnavailable

    results: dict[str, dict[int, tuple[float, float, float]]] = {"twofold": {}, "postgres": {}}
    # The mean latency beside the percentiles: a server that serves its connections unevenly
    # (some often, some rarely) has its p50 well below its mean.
    means: dict[str, dict[int, float]] = {"twofold": {}, "postgres": {}}
    copy_rate: dict[str, float] = {}
    sub: tuple[list[float], int] = ([], 0)
    during: dict[str, dict[str, tuple[list[float], float]]] = {}
    load = os.getloadavg()
    print(f"pgwire: {rows:,} rows, {seconds:g} s per arm, psycopg 3 prepared statements, "
          f"each server in its own process; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f} at start")
    if load[0] > 1.0 or load[1] > 1.0:
        print(f"machine shared with other work (load {load[0]:.2f}/{load[1]:.2f} over 1/5 min "
              "> 1): latencies are indicative, CPU per lookup less affected")
    # The serve process's CPU (utime + stime, all threads, from /proc) per lookup served, and
    # its maintenance child's: unlike p50 it holds while other work shares the cores.
    cpu_us: dict[int, tuple[float, float]] = {}
    pg_cpu_us: dict[int, float] = {}  # PostgreSQL's postmaster and all its children
    # The client processes' CPU per lookup (the same client for both servers): it shares the
    # machine's cores with the server measured, so it is printed beside the server's.
    client_us: dict[str, dict[int, float]] = {"twofold": {}, "postgres": {}}
    # ... and its voluntary context switches per lookup: one is the wait for the reply; more
    # are its threads waiting for their process's interpreter lock (replies arriving
    # together wake several threads of one process at once).
    client_waits: dict[str, dict[int, float]] = {"twofold": {}, "postgres": {}}
    # Both servers run side by side, PostgreSQL loaded first (idle, it takes no CPU while
    # twofold loads; twofold's maintenance process merges its COPY's batches for a while
    # after it), and each connection count's two arms follow each other: on a machine others
    # share, both see about the same load. PostgreSQL idles through twofold's arms; twofold
    # (serve process and maintenance child) is stopped (SIGSTOP) through PostgreSQL's, as its
    # idle background work (~10-15% of a core) would take CPU from them.
    with contextlib.ExitStack() as stack:
        try:
            pg: Any = stack.enter_context(PgCluster())
        except ServerUnavailable as e:
            print(f"PostgreSQL unavailable: {e}")
            pg = None
        if pg is not None:
            pg_dsn = f"host=127.0.0.1 port={pg.port} user=postgres dbname=postgres"
            with psycopg.connect(pg_dsn, autocommit=True) as c:
                c.execute("CREATE TABLE kv (k bigint PRIMARY KEY, v double precision, s text)")
            copy_rate["postgres"] = copy_in(pg_dsn, "kv", rows)
            with psycopg.connect(pg_dsn, autocommit=True) as c:
                c.execute("VACUUM ANALYZE kv")
            postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
        dsn, serve_pid = stack.enter_context(twofold_serve())
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE TABLE kv (k bigint PRIMARY KEY, v double precision, s text)")
            # Untimed warm-up, as PostgreSQL's is already running: `twofold serve` says where
            # to connect while its maintenance process is still starting (imports, ~2 s of
            # CPU), which the first COPY otherwise shares the two cores with.
            c.execute("CREATE TABLE kv_warm (k bigint PRIMARY KEY, v double precision, s text)")
        copy_in(dsn, "kv_warm", 1_000)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE INDEX kv_warm_k ON kv_warm (k)")
            c.execute("SELECT * FROM kv_warm WHERE k = 1").fetchall()
        copy_rate["twofold"] = copy_in(dsn, "kv", rows)
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE INDEX kv_k ON kv (k)")
            c.execute("SELECT * FROM kv WHERE k = 1").fetchall()
        for n in levels:
            lookups(dsn, "kv", rows, n, args.warmup)
            meter = ServerCpu(serve_pid)
            lat, ops, bad, client_cpu, waits = lookups(dsn, "kv", rows, n, seconds,
                                                       meter.window)
            verdicts.ok(f"twofold lookups at {n} connections", bad, ops)
            results["twofold"][n] = (pct(lat, 50), pct(lat, 99), ops / seconds)
            means["twofold"][n] = statistics.fmean(lat) if lat else float("nan")
            per = 1e6 / max(ops, 1)
            cpu_us[n] = (meter.own * per, meter.children * per)
            client_us["twofold"][n] = client_cpu * per
            client_waits["twofold"][n] = waits / max(ops, 1)
            if pg is None:
                continue
            with paused(serve_pid):
                lookups(pg_dsn, "kv", rows, n, args.warmup)
                meter = ServerCpu(postmaster)
                lat, ops, bad, client_cpu, waits = lookups(pg_dsn, "kv", rows, n, seconds,
                                                           meter.window)
            verdicts.ok(f"postgres lookups at {n} connections", bad, ops)
            results["postgres"][n] = (pct(lat, 50), pct(lat, 99), ops / seconds)
            means["postgres"][n] = statistics.fmean(lat) if lat else float("nan")
            per = 1e6 / max(ops, 1)
            pg_cpu_us[n] = (meter.own + meter.children) * per
            client_us["postgres"][n] = client_cpu * per
            client_waits["postgres"][n] = waits / max(ops, 1)
        if not args.lookups_only:
            sub = subscribe_latency(dsn, 20 if args.quick else 100)
            verdicts.ok("SUBSCRIBE rows delivered", sub[1], sub[1] + len(sub[0]))
            during["twofold"] = long_statements(dsn)
            if pg is not None:
                with paused(serve_pid):
                    during["postgres"] = long_statements(pg_dsn)
    for n in levels:
        tw = results["twofold"][n]
        line = (f"lookup {n:>2} conn: twofold p50 {tw[0]:.3f} ms p99 {tw[1]:.3f} ms "
                f"{tw[2]:,.0f} q/s")
        pgr = results["postgres"].get(n)
        if pgr is not None:
            line += (f" | postgres p50 {pgr[0]:.3f} ms p99 {pgr[1]:.3f} ms {pgr[2]:,.0f} q/s"
                     f" | p50 ratio {tw[0] / pgr[0]:.2f}x, q/s ratio {tw[2] / pgr[2]:.2f}x")
        print(line)
        if pgr is not None:
            tm, pm = means["twofold"][n], means["postgres"][n]
            print(f"lookup {n:>2} conn: mean twofold {tm:.3f} ms, postgres {pm:.3f} ms "
                  f"(ratio {tm / pm:.2f}x; p50 / mean: twofold {tw[0] / tm:.2f}, "
                  f"postgres {pgr[0] / pm:.2f})")
        if n in cpu_us:
            print(f"lookup {n:>2} conn: twofold serve process CPU {cpu_us[n][0]:.0f} us/lookup"
                  f" (its maintenance child {cpu_us[n][1]:.0f} us/lookup)")
        if n in client_us["twofold"]:
            line = (f"lookup {n:>2} conn: client CPU ({client_processes(n)} processes) "
                    f"{client_us['twofold'][n]:.0f} us/lookup with twofold "
                    f"({client_waits['twofold'][n]:.2f} context switches/lookup)")
            if n in client_us["postgres"]:
                line += (f", {client_us['postgres'][n]:.0f} with postgres "
                         f"({client_waits['postgres'][n]:.2f}; its processes "
                         f"took {pg_cpu_us[n]:.0f} us/lookup)")
            print(line)
        if pgr is not None:
            verdicts.at_most(f"twofold p50 / postgres p50 at {n} connections",
                             tw[0] / pgr[0], 2.0)
    lat = sub[0]
    mean = statistics.mean(lat) if lat else float("nan")
    if not args.lookups_only:
        print(f"SUBSCRIBE delivery INSERT -> row: p50 {pct(lat, 50):.1f} ms "
              f"p99 {pct(lat, 99):.1f} ms mean {mean:.1f} ms ({len(lat)} rows)")
    for what in during.get("twofold", {}):
        parts = []
        for server in ("twofold", "postgres"):
            if server in during:
                lat, span = during[server][what]
                worst = max(lat) if lat else float("nan")
                parts.append(f"{server} {len(lat)} lookups, p50 {pct(lat, 50):.2f} ms, "
                             f"worst {worst:.1f} ms (statement {span:.0f} ms)")
        print(f"reads during a {what}: " + " | ".join(parts))
    print("COPY FROM STDIN: " + ", ".join(f"{k} {copy_rate[k]:,.0f} rows/s"
                                          for k in ("twofold", "postgres") if k in copy_rate))
    verdicts.exit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
