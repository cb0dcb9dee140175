"""SQL front end: compile time, SQL-built vs DSL-built maintained views, select1.test.

Measures, side by side in one run:

- compile time (uncached parse + bind + plan, median) of a typical 3-way join with aggregation
  and of a 20-table comma join, absolute and as a ratio to executing the same query once over
  10 k rows (bar: the typical query compiles in <= 5 ms);
- a materialized view defined in SQL and the same view built with the DSL, each maintained
  through the same stream of writes: the ratio of their throughputs (bar: within 0.8-1.25 —
  they are one plan, so ~1.0);
- a point query through `db.sql` (`SELECT ... WHERE k = $1`, answered by an index lookup) beside
  `db.lookup` of the same keys on the same index, medians and their ratio (bar: within 2x);
- `select1.test` (the SQLite sqllogictest file, when `../shared/slt` is beside the checkout) run
  through `db.sql`, with DuckDB's time on the same file beside it (bar: every record passes).

`--quick` shrinks everything for a smoke run. Exits non-zero on a missed bar (`bars.py`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import twofold
from bars import Verdicts
from twofold import col, count, sum
from twofold.sql import compile_query
from twofold.sql.parser import _parse as parse  # uncached: `parse` keeps recent texts' trees

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TYPICAL = """SELECT c.country, p.category, count(*) AS n, sum(o.amount) AS total
FROM orders o JOIN customers c ON o.customer = c.id, products p
WHERE o.product = p.id AND o.amount > 10 GROUP BY c.country, p.category"""


def _median_ms(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def compile_times(v: Verdicts, rows: int, reps: int) -> None:
    with twofold.open(tick_interval=0.01) as db:
        db.sql("CREATE TABLE orders (id int, customer int, product int, amount double precision)")
        db.sql("CREATE TABLE customers (id int, name text, country text)")
        db.sql("CREATE TABLE products (id int, category text)")
        db.table("orders").insert([(i, i % 500, i % 50, float(i % 97)) for i in range(rows)])
        db.table("customers").insert([(i, f"c{i}", f"k{i % 20}") for i in range(500)])
        db.table("products").insert([(i, f"cat{i % 7}") for i in range(50)])
        n = 20
        for i in range(n):
            db.sql(f"CREATE TABLE j{i} (a{i} int, b{i} int)")
            db.table(f"j{i}").insert([(k, k) for k in range(rows // n)])
        chain = "SELECT count(*) FROM " + ", ".join(f"j{i}" for i in range(n)) + " WHERE " + \
            " AND ".join(f"b{i} = a{i + 1}" for i in range(n - 1))
        for name, sql in (("3-way join + aggregation", TYPICAL), ("20-table comma join", chain)):
            compile_ms = _median_ms(lambda s=sql: compile_query(db.core, parse(s)), reps)
            db.sql(sql)  # warm
            run_ms = _median_ms(lambda s=sql: db.sql(s), max(reps // 10, 3))
            print(f"compile {name}: {compile_ms:.2f} ms; executing once over {rows:,} rows "
                  f"{run_ms:.1f} ms (compile / execute {compile_ms / run_ms:.3f})")
            if name.startswith("3-way"):
                v.at_most("compile of a typical query (ms)", compile_ms, 5.0)
        parse_ms = _median_ms(lambda: parse(TYPICAL), reps)
        print(f"  of which parsing (sqlglot) the typical query: {parse_ms:.2f} ms")


def _feed(db: twofold.Database, view: object, batches: int, size: int) -> float:
    t = db.table("events")
    start = time.perf_counter()
    ts = 0
    for b in range(batches):
        ts = t.insert([(b * size + i, (b * size + i) % 100, 1.0) for i in range(size)]).timestamp
    while True:
        upper = db.frontier(view)  # type: ignore[arg-type]
        if upper.time is None or upper.time > ts:
            break
        time.sleep(0.002)
    return batches * size / (time.perf_counter() - start)


def view_throughput(v: Verdicts, batches: int, size: int) -> None:
    rates = {}
    for how in ("sql", "dsl", "sql2", "dsl2"):
        with twofold.open(tick_interval=0.01) as db:
            db.sql("CREATE TABLE events (id int, k int, x double precision)")
            if how.startswith("sql"):
                view = db.sql("CREATE MATERIALIZED VIEW agg AS SELECT k, count(*) AS n, "
                              "sum(id) AS s FROM events WHERE x > 0 GROUP BY k")
            else:
                ev = db.table("events")
                view = db.create_materialized_view("agg", ev.filter(col("x") > 0).group_by(
                    "k").agg(count().alias("n"), sum("id").alias("s")))
            rates[how] = _feed(db, view, batches, size)
            ok = len(db.sql("SELECT * FROM agg").rows) == 100
            v.ok(f"{how} view holds every group", 0 if ok else 1, 1)
    sql_rate = (rates["sql"] + rates["sql2"]) / 2
    dsl_rate = (rates["dsl"] + rates["dsl2"]) / 2
    ratio = sql_rate / dsl_rate
    print(f"maintained view: SQL-built {sql_rate:,.0f} rows/s, DSL-built {dsl_rate:,.0f} rows/s "
          f"(ratio {ratio:.2f})")
    v.check("SQL-built / DSL-built view throughput within 0.8-1.25", 0.8 <= ratio <= 1.25,
            f"{ratio:.2f}")


def point_query(v: Verdicts, rows: int, reps: int) -> None:
    with twofold.open() as db:
        db.sql("CREATE TABLE kv (k int, v text, x double precision)")
        idx = db.sql("CREATE INDEX kv_k ON kv (k)")
        db.table("kv").insert([(i, f"v{i}", i * 0.5) for i in range(rows)])
        keys = iter(range(10**9))
        sql = "SELECT k, v, x FROM kv WHERE k = $1"
        ok = db.sql(sql, [7]).rows == [(7, "v7", 3.5)] == db.lookup(idx, 7).rows
        v.ok("point query answers as db.lookup", 0 if ok else 1, 1)
        for _ in range(2):  # warm both paths, then alternate rounds of each
            db.sql(sql, [next(keys) % rows])
            db.lookup(idx, next(keys) % rows)
        sql_ms: list[float] = []
        lookup_ms: list[float] = []
        for _ in range(5):
            sql_ms.append(_median_ms(lambda: db.sql(sql, [next(keys) % rows]), reps // 5))
            lookup_ms.append(_median_ms(lambda: db.lookup(idx, next(keys) % rows), reps // 5))
        a, b = statistics.median(sql_ms), statistics.median(lookup_ms)
        print(f"point query over {rows:,} rows: db.sql {a:.2f} ms, db.lookup {b:.2f} ms "
              f"(db.sql / db.lookup {a / b:.2f})")
        v.at_most("db.sql point query / db.lookup", a / b, 2.0)


def select1(v: Verdicts) -> None:
    path = ROOT.parent / "shared" / "slt" / "select1.test"
    if not path.exists():
        print(f"select1.test: skipped ({path} is not present)")
        return
    from tests.sql.slt import run_file

    timings = {}
    for engine in ("duckdb", "twofold"):
        t = time.perf_counter()
        report = run_file(path, engine)
        timings[engine] = time.perf_counter() - t
        v.ok(f"select1.test records on {engine}", len(report.failures),
             report.passed + len(report.failures))
    print(f"select1.test: twofold {timings['twofold']:.1f} s, DuckDB {timings['duckdb']:.1f} s "
          f"({timings['twofold'] / timings['duckdb']:.1f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, no select1")
    parser.add_argument("--part", choices=("compile", "views", "point", "select1"),
                        action="append", help="run only these parts (default: all)")
    args = parser.parse_args()
    parts = set(args.part or ("compile", "views", "point", "select1"))
    v = Verdicts("sql")
    if "compile" in parts:
        compile_times(v, 1_000 if args.quick else 10_000, 20 if args.quick else 200)
    if "views" in parts:
        view_throughput(v, 5 if args.quick else 40, 200 if args.quick else 2_000)
    if "point" in parts:
        point_query(v, 10_000 if args.quick else 100_000, 50 if args.quick else 500)
    if "select1" in parts and not args.quick:
        select1(v)
    v.exit()


if __name__ == "__main__":
    main()
