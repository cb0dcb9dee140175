"""Storage throughput, every backend side by side in one run: memory, SQLite, and PostgreSQL
consensus with file blobs and with S3 blobs (a throwaway PostgreSQL 15, fsync on, and `rclone
serve s3`, both started here; the PostgreSQL rows are skipped, with the reason, if they cannot
start).

- **large appends**: N updates of a 3-column row (int, str, float) in batches of B (default
  100 k rows: blob parts on PostgreSQL) through `compare_and_append`, read back with `snapshot`
  (decode, concatenate, consolidate every part) and a `listen` from the start; updates/s, best of
  --repeat runs, the backends alternating so all see the same machine noise;
- **small appends**: compare-and-appends of 3 rows (inlined parts) on one shard, and on 4 shards
  from 4 writer processes at once; appends/s and p50/p99 latency. On PostgreSQL + file blobs
  also on one shard that a listener in another process follows (no bar: a shard nobody listens
  to sends no NOTIFY, this is what one that is listened to costs). Beside them, in the same run
  and alternating with them, what PostgreSQL alone does on the same cluster: the reference's
  compare-and-set statement (`FOR KEY SHARE` + INSERT of version n+1 with a 10 KB state, the
  figures `spec` quotes were measured with) on 1 and on 4 shards, and a plain autocommit INSERT
  of a 1 KB row; so the ratio means something on a shared machine. The cluster: PostgreSQL 15,
  `fsync=on`, `synchronous_commit=on`, `shared_buffers=64MB`, other settings the defaults
  (`wal_sync_method=fdatasync`, `commit_delay=0`, `full_page_writes=on`);
- **rehydration**: a 1 M-row table, then the time from `create_index` to its first answer (the
  replica reads the whole table back from storage and arranges it).

Bars: SQLite append >= 300k updates/s, snapshot >= 1M updates/s; PostgreSQL + file blobs: small
appends >= 1,000/s on one shard and >= 2,000/s across 4 shards, large appends >= 1M updates/s,
snapshot >= 1M updates/s.

    python bench/storage.py [--quick] [--updates N] [--batch B] [--small N]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from bars import Verdicts  # bench/ is the script's directory
from twofold.protocol import ColumnType, Frontier, RelationDesc
from twofold.storage import Storage, open_storage, update_schema
from twofold.testing.pgcluster import PgCluster, S3Server, ServerUnavailable

DESC = RelationDesc(
    names=["id", "name", "score"],
    types=[ColumnType("int", nullable=False), ColumnType("str"), ColumnType("float")],
)


def make_batches(total: int, batch: int) -> list[pa.Table]:
    """Distinct rows (so consolidation keeps every one); batch i is at time i + 1."""
    schema = update_schema(DESC)
    rng = np.random.default_rng(7)
    out = []
    for i, start in enumerate(range(0, total, batch)):
        n = min(batch, total - start)
        ids = np.arange(start, start + n, dtype=np.int64)
        names = pa.array([f"name-{j % 1000}" for j in range(n)], pa.large_string())
        out.append(pa.Table.from_arrays([
            pa.array(ids), names, pa.array(rng.random(n)),
            pa.array(np.full(n, i + 1, dtype=np.uint64)), pa.array(np.ones(n, dtype=np.int64)),
        ], schema=schema))
    return out


def run(storage: Storage, batches: list[pa.Table], name: str) -> dict[str, float]:
    """Updates/s for append, snapshot and listen on a fresh shard."""
    shard = storage.create_shard(name, DESC)
    shard.compare_and_append([], 0, 1)
    total = sum(b.num_rows for b in batches)
    start = time.perf_counter()
    for i, b in enumerate(batches):
        shard.compare_and_append(b, i + 1, i + 2)
    append_s = time.perf_counter() - start
    start = time.perf_counter()
    snap = shard.snapshot(len(batches))
    snapshot_s = time.perf_counter() - start
    assert snap.num_rows == total, (snap.num_rows, total)
    start = time.perf_counter()
    listened = sum(len(b) for b in shard.listen(0).poll())
    listen_s = time.perf_counter() - start
    assert listened == total, (listened, total)
    return {"append": total / append_s, "snapshot": total / snapshot_s, "listen": total / listen_s}


SMALL = RelationDesc(
    names=["writer", "seq"], types=[ColumnType("int", nullable=False)] * 2
)
SPAWN = multiprocessing.get_context("spawn")


def small_batches(n: int, writer: int = 0) -> list[pa.Table]:
    """`n` batches of 3 rows; batch `t` is at time `t` (built before any append is timed)."""
    schema = update_schema(SMALL)
    return [pa.Table.from_arrays([
        pa.array([writer] * 3, pa.int64()), pa.array([3 * t, 3 * t + 1, 3 * t + 2], pa.int64()),
        pa.array([t] * 3, pa.uint64()), pa.array([1, 1, 1], pa.int64()),
    ], schema=schema) for t in range(n)]


def timed_appends(shard: Any, batches: list[pa.Table]) -> list[float]:
    """Compare-and-append `batches` in order; each one's latency (s)."""
    latencies = []
    for t, batch in enumerate(batches):
        start = time.perf_counter()
        shard.compare_and_append(batch, Frontier.at(t), Frontier.at(t + 1))
        latencies.append(time.perf_counter() - start)
    return latencies


def check_small(shard: Any, n: int) -> None:
    assert shard.snapshot(n - 1).num_rows == 3 * n


def small_appends(storage: Storage, shard_id: str, n: int, writer: int = 0) -> list[float]:
    """`n` compare-and-appends of 3 rows each on a fresh shard; each one's latency (s)."""
    batches = small_batches(n, writer)
    shard = storage.create_shard(shard_id, SMALL)
    latencies = timed_appends(shard, batches)
    check_small(shard, n)
    return latencies


def process_small_writer(url: str, shard_id: str, n: int, writer: int, ready: Any,
                         start: Any, out: Any) -> None:
    """One of the four writers: everything but the appends (opening storage, creating the
    shard, building the batches, and reading them back to check) is outside the timed span."""
    with open_storage(url) as storage:
        shard = storage.create_shard(shard_id, SMALL)
        batches = small_batches(n, writer)
        ready.release()
        start.wait()
        began = time.perf_counter()
        latencies = timed_appends(shard, batches)
        ended = time.perf_counter()
        check_small(shard, n)
        out.put((latencies, began, ended))


def process_listener(url: str, shard_id: str, n: int, ready: Any, out: Any) -> None:
    """A listener in another process following the shard from the start until time `n`."""
    with open_storage(url) as storage:
        listener = storage.create_shard(shard_id, SMALL).listen(0)  # its lease is in the state
        ready.release()
        rows, upper = 0, 0
        while upper < n:
            batch = listener.next_batch(timeout=120)
            assert batch is not None and batch.upper.time is not None, "no batch"
            rows += len(batch)
            upper = batch.upper.time
        listener.close()
        out.put(rows)


def listened_appends(storage: Storage, url: str, shard_id: str, n: int) -> list[float]:
    """`small_appends` on a shard a listener in another process holds, so each append also
    wakes it (a NOTIFY) and the listener reads the shard as the appends go."""
    ready, out = SPAWN.Semaphore(0), SPAWN.Queue()
    proc = SPAWN.Process(target=process_listener, args=(url, shard_id, n, ready, out))
    proc.start()
    assert ready.acquire(timeout=120)
    latencies = small_appends(storage, shard_id, n)
    got = out.get(timeout=120)
    assert got == 3 * (n - 1), got  # listen(0) delivers the times after 0
    proc.join(timeout=60)
    assert proc.exitcode == 0
    return latencies


def four_shards(url: str, n: int, tag: str) -> tuple[float, list[float]]:
    """4 writer processes, one shard each, `n` small appends each; (appends/s, latencies)."""
    return four_writers(process_small_writer,
                        [(url, f"four-{tag}-{w}", n, w) for w in range(4)])


def raw_inserts(pg: PgCluster, n: int) -> float:
    """The ceiling on this machine now: plain autocommit INSERTs of 1 KB rows per second, one
    connection (each waits for its WAL flush, as a compare-and-set does)."""
    import psycopg

    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS raw_bench")
        conn.execute("CREATE TABLE raw_bench (k bigint PRIMARY KEY, d bytea)")
        payload = os.urandom(1000)
        start = time.perf_counter()
        for i in range(n):
            conn.execute("INSERT INTO raw_bench VALUES (%s, %s)", (i, payload))
        elapsed = time.perf_counter() - start
        conn.execute("DROP TABLE raw_bench")
    return n / elapsed


REFERENCE_CAS = (
    "WITH head AS (SELECT 1 FROM ref_consensus WHERE shard = %(s)s AND seqno = %(n)s "
    "FOR KEY SHARE) INSERT INTO ref_consensus (shard, seqno, data) "
    "SELECT %(s)s, %(n)s + 1, %(d)s FROM head"
)


def reference_setup(conn: Any, shard: str) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS ref_consensus (shard text, seqno bigint, "
                 "data bytea, PRIMARY KEY (shard, seqno))")
    conn.execute("INSERT INTO ref_consensus VALUES (%s, 0, '') ON CONFLICT DO NOTHING", (shard,))


def reference_loop(conn: Any, shard: str, n: int) -> list[float]:
    """PostgreSQL alone: the reference's CAS of version n+1 (10 KB state) `n` times on one
    shard, one connection; each one's latency (s)."""
    state = os.urandom(10_000)
    latencies = []
    for i in range(n):
        start = time.perf_counter()
        cur = conn.execute(REFERENCE_CAS, {"s": shard, "n": i, "d": state})
        latencies.append(time.perf_counter() - start)
        assert cur.rowcount == 1
    return latencies


def reference_cas(url: str, shard: str, n: int) -> list[float]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        reference_setup(conn, shard)
        return reference_loop(conn, shard, n)


def process_reference_writer(url: str, shard: str, n: int, ready: Any, start: Any,
                             out: Any) -> None:
    """As `process_small_writer`: connecting and creating the shard are not timed."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        reference_setup(conn, shard)
        ready.release()
        start.wait()
        began = time.perf_counter()
        latencies = reference_loop(conn, shard, n)
        out.put((latencies, began, time.perf_counter()))


def four_writers(target: Any, args: list[tuple[Any, ...]]) -> tuple[float, list[float]]:
    """4 processes running `target(*args[w], ready, start, out)` at once; (appends/s,
    latencies), each writer's result being (latencies, began, ended)."""
    ready, start, out = SPAWN.Semaphore(0), SPAWN.Event(), SPAWN.Queue()
    procs = [SPAWN.Process(target=target, args=(*a, ready, start, out)) for a in args]
    for p in procs:
        p.start()
    for _ in procs:
        assert ready.acquire(timeout=120)
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    wall = max(r[2] for r in results) - min(r[1] for r in results)
    return sum(len(r[0]) for r in results) / wall, [x for r in results for x in r[0]]


def pct(latencies: list[float], q: int) -> float:
    return statistics.quantiles(latencies, n=100)[q - 1] * 1000 if len(latencies) > 1 else 0.0


def rehydration(url: str, rows: int) -> float:
    """Seconds from `create_index` over a `rows`-row table to the index's first answer."""
    import polars as pl

    import twofold

    with twofold.open(url, runtimes="one", timeout=300) as db:
        t = db.create_table("big", {"id": int, "name": str, "score": float})
        step = 100_000
        for lo in range(0, rows, step):
            ids = np.arange(lo, min(rows, lo + step), dtype=np.int64)
            t.insert(pl.DataFrame({"id": ids, "name": [f"n{i % 1000}" for i in ids],
                                   "score": ids.astype(np.float64)}))
        start = time.perf_counter()
        index = db.create_index("big_by_id", t, key="id")
        got = index.lookup(rows - 1).rows
        elapsed = time.perf_counter() - start
        assert got == [(rows - 1, f"n{(rows - 1) % 1000}", float(rows - 1))], got
        return elapsed


@contextlib.contextmanager
def servers() -> Iterator[tuple[PgCluster | None, S3Server | None, str]]:
    """A PostgreSQL (fsync on) and an S3 server, or `None` with the reason."""
    pg = s3 = None
    why = ""
    try:
        pg = PgCluster(fsync=True)
        s3 = S3Server(("bench",))
        os.environ.update(s3.env())
    except ServerUnavailable as e:
        why = str(e)
    try:
        yield pg, s3, why
    finally:
        if pg is not None:
            pg.close()
        if s3 is not None:
            s3.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--updates", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--small", type=int, default=2_000, help="small appends per writer")
    parser.add_argument("--rehydrate", type=int, default=1_000_000, help="rows of the index")
    parser.add_argument("--repeat", type=int, default=3, help="report the best of N runs")
    args = parser.parse_args()
    total = 100_000 if args.quick else args.updates
    small = 200 if args.quick else args.small
    rehydrate_rows = 100_000 if args.quick else args.rehydrate
    batches = make_batches(total, min(args.batch, total))
    repeat = 1 if args.quick else args.repeat
    print(f"storage bench: {total:,} updates of (int, str, float) in batches of "
          f"{min(args.batch, total):,}, best of {repeat}; {small:,} small appends per writer; "
          f"{rehydrate_rows:,}-row rehydration (a shared 2-core machine: figures are noisy)")
    verdicts = Verdicts("storage")
    with tempfile.TemporaryDirectory() as tmp, servers() as (pg, s3, why):
        urls = {"memory": "memory://", "sqlite": f"sqlite://{Path(tmp) / 'bench.db'}"}
        if pg is not None and s3 is not None:
            urls["pg+file"] = f"{pg.url}?blob=file://{tmp}/blobs"
            urls["pg+s3"] = f"{pg.url}?schema=s3bench&blob=s3://bench/parts"
        else:
            print(f"PostgreSQL backends skipped: {why}")
        stores = {name: open_storage(url) for name, url in urls.items()}
        try:
            warm = make_batches(20_000, 5_000)  # load polars/arrow kernels before timing
            for st in stores.values():
                run(st, warm, "warm")
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in stores}
            for i in range(repeat):  # alternate, so every backend sees the same noise
                for name, st in stores.items():
                    runs[name].append(run(st, batches, f"bench-{i}"))
            large = {name: {k: max(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
            # Small appends, alternating with PostgreSQL alone on the same cluster.
            ones: dict[str, list[list[float]]] = {n: [] for n in stores if n != "memory"}
            raws: list[float] = []
            listened: list[list[float]] = []
            for i in range(repeat):
                for name in stores:
                    if name != "memory":
                        ones[name].append(small_appends(stores[name], f"small-one-{i}", small))
                if "pg+file" in stores:
                    listened.append(listened_appends(stores["pg+file"], urls["pg+file"],
                                                     f"small-listened-{i}", small))
                if pg is not None:
                    ones.setdefault("pg alone", []).append(
                        reference_cas(pg.url, f"ref-one-{i}", small))
                    raws.append(raw_inserts(pg, small))
        finally:
            for st in stores.values():
                st.close()
        one = {name: min(runs_, key=sum) for name, runs_ in ones.items()}  # the fastest run
        fours: dict[str, list[tuple[float, list[float]]]] = {}
        for i in range(repeat):
            for name, url in urls.items():
                if name != "memory":
                    fours.setdefault(name, []).append(four_shards(url, small, f"{name}-{i}"))
            if pg is not None:
                fours.setdefault("pg alone", []).append(four_writers(
                    process_reference_writer, [(pg.url, f"ref-four-{i}-{w}", small)
                                               for w in range(4)]))
        four = {name: max(runs_, key=lambda r: r[0]) for name, runs_ in fours.items()}
        raw = max(raws) if raws else float("nan")
        rehydrate = {}
        for name, url in urls.items():
            if name == "memory":
                continue
            if name == "sqlite":
                url = f"sqlite://{Path(tmp) / 'rehydrate.db'}"
            elif name == "pg+file":
                url = f"{url.split('?')[0]}?schema=rehydrate&blob=file://{tmp}/rehydrate"
            else:
                url = f"{url.split('?')[0]}?schema=rehydrate_s3&blob=s3://bench/rehydrate"
            rehydrate[name] = rehydration(url, rehydrate_rows)
    print(f"{'large appends':<16}" + "".join(f"{n:>16}" for n in large))
    for what in ("append", "snapshot", "listen"):
        print(f"  {what + ' upd/s':<14}" + "".join(f"{large[n][what]:>16,.0f}" for n in large))
    print(f"{'small appends':<16}" + "".join(f"{n:>16}" for n in one))
    print(f"  {'1 shard /s':<14}" + "".join(f"{len(v) / sum(v):>16,.0f}" for v in one.values()))
    print(f"  {'1 shard p50 ms':<14}" + "".join(f"{pct(v, 50):>16.2f}" for v in one.values()))
    print(f"  {'1 shard p99 ms':<14}" + "".join(f"{pct(v, 99):>16.2f}" for v in one.values()))
    print(f"  {'4 shards /s':<14}" + "".join(f"{r:>16,.0f}" for r, _ in four.values()))
    print(f"  {'4 shards p50':<14}" + "".join(f"{pct(v, 50):>16.2f}" for _, v in four.values()))
    print(f"  {'4 shards p99':<14}" + "".join(f"{pct(v, 99):>16.2f}" for _, v in four.values()))
    if listened:
        best = min(listened, key=sum)
        print(f"  1 shard, a listener in another process: pg+file {len(best) / sum(best):,.0f}/s, "
              f"p50 {pct(best, 50):.2f} ms, p99 {pct(best, 99):.2f} ms (each append also "
              f"NOTIFYs it; it reads the shard as the appends go)")
    print(f"  {'raw PG INSERT/s':<14}{'':>16}{raw:>16,.0f}   (1 KB rows, one connection: "
          f"the ceiling for one shard here)")
    if "pg alone" in one:
        ref1 = len(one["pg alone"]) / sum(one["pg alone"])
        for name in ("pg+file", "pg+s3"):
            print(f"  {name} / PostgreSQL alone: 1 shard "
                  f"{len(one[name]) / sum(one[name]) / ref1:.2f}x, 4 shards "
                  f"{four[name][0] / four['pg alone'][0]:.2f}x ('pg alone': the reference's "
                  f"CAS statement, 10 KB state, same cluster, alternating with ours)")
    print(f"{'rehydrate s':<16}" + "".join(f"{rehydrate[n]:>16.2f}" for n in rehydrate))
    # `run` asserts every snapshot and listen returned all `total` updates, `small_appends`
    # that every small append is in the shard, `rehydration` the index's answer.
    verdicts.ok("appended updates read back by snapshot and listen", 0,
                total * repeat * 2 * len(large))
    verdicts.ok("small appends read back", 0,
                small * 5 * repeat * len(ones) + small * len(listened))
    verdicts.at_least("sqlite append updates/s", large["sqlite"]["append"], 300_000, "{:,.0f}")
    verdicts.at_least("sqlite snapshot updates/s", large["sqlite"]["snapshot"], 1_000_000,
                      "{:,.0f}")
    if "pg+file" in large:
        verdicts.at_least("pg+file small appends/s, one shard",
                          len(one["pg+file"]) / sum(one["pg+file"]), 1_000, "{:,.0f}")
        verdicts.at_least("pg+file small appends/s, 4 shards", four["pg+file"][0], 2_000,
                          "{:,.0f}")
        verdicts.at_least("pg+file large append updates/s", large["pg+file"]["append"],
                          1_000_000, "{:,.0f}")
        verdicts.at_least("pg+file snapshot updates/s", large["pg+file"]["snapshot"],
                          1_000_000, "{:,.0f}")
    else:
        verdicts.check("PostgreSQL backends measured", False, why)
    verdicts.exit()


if __name__ == "__main__":
    main()
