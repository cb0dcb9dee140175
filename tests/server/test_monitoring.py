"""twofold's monitoring relations over psycopg: frontiers, freshness lag, arrangement sizes and
per-runtime peek and step durations, queried with filters, joins and parameters, fresh on every
query."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from twofold.testing.pgwire import ServerHandle


def connect(server: ServerHandle) -> psycopg.Connection:
    return psycopg.connect(server.dsn(), autocommit=True, connect_timeout=10)


def eventually(fn: Callable[[], Any], ok: Callable[[Any], bool], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if ok(got):
            return got
        assert time.monotonic() < deadline, got
        time.sleep(0.05)


def setup(c: psycopg.Connection, name: str, n: int = 100) -> None:
    c.execute(f"CREATE TABLE {name} (k bigint, v bigint)")
    c.execute(f"INSERT INTO {name} VALUES " + ", ".join(f"({i}, {i * i})" for i in range(n)))
    c.execute(f"CREATE INDEX {name}_k ON {name} (k)")
    c.execute(f"CREATE MATERIALIZED VIEW {name}_mv AS SELECT count(*) AS n FROM {name}")


def test_frontiers_of_every_object_fresh_on_each_query(server: ServerHandle,
                                                       name: str) -> None:
    with connect(server) as c:
        setup(c, name)
        q = ("SELECT f.object, f.type, f.since, f.upper FROM twofold_frontiers f JOIN "
             "twofold_objects o ON o.name = f.object WHERE f.object LIKE %s ORDER BY f.object")
        got = c.execute(q, [f"{name}%"]).fetchall()
        assert [(r[0], r[1]) for r in got] == [(name, "table"), (f"{name}_k", "index"),
                                               (f"{name}_mv", "materialized view")]
        assert all(r[2] is not None and r[3] is not None and r[2] <= r[3] for r in got)
        table_upper = got[0][3]
        # The table's upper moves with time (the ticker), and each query sees it now.
        later = eventually(lambda: c.execute(
            "SELECT upper FROM twofold_frontiers WHERE object = %s", [name]).fetchone(),
            lambda r: r[0] > table_upper)
        assert later[0] > table_upper
        ids = dict(c.execute("SELECT object, id FROM twofold_frontiers").fetchall())
        assert ids[name] != ids[f"{name}_k"]


def test_lag_of_views_and_indexes_behind_their_inputs(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        setup(c, name)
        rows = c.execute("SELECT object, type, upper, input_upper, local_lag_ms, global_lag_ms "
                         "FROM twofold_lag WHERE object LIKE %s ORDER BY object",
                         [f"{name}%"]).fetchall()
        assert [r[0] for r in rows] == [name, f"{name}_k", f"{name}_mv"]
        table, index, view = rows
        assert table[3] is None and table[4] is None and table[5] >= 0
        for r in (index, view):
            assert r[3] is not None and r[4] >= 0 and r[5] >= 0
            assert r[4] == max(0, r[3] - r[2])
        # The lag is measured against the relations it reads: a write makes it visible.
        c.execute(f"INSERT INTO {name} VALUES (1000, 1)")
        assert c.execute(f"SELECT n FROM {name}_mv").fetchone() == (101,)


def test_arrangement_sizes_follow_the_index(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        setup(c, name, n=100)
        q = ("SELECT s.records, s.batches, s.bytes FROM twofold_arrangement_sizes s "
             "JOIN twofold_indexes i ON i.name = s.object WHERE i.\"on\" = %s")
        got = eventually(lambda: c.execute(q, [name]).fetchall(),
                         lambda rows: rows and rows[0][0] == 100)
        _, batches, nbytes = got[0]
        assert batches >= 1 and nbytes > 0
        c.execute(f"INSERT INTO {name} VALUES " + ", ".join(f"({i}, 0)" for i in range(100, 150)))
        got = eventually(lambda: c.execute(q, [name]).fetchall(),
                         lambda rows: rows and rows[0][0] == 150)
        assert got[0][2] > nbytes


def test_peek_and_step_durations_per_runtime(server: ServerHandle, name: str) -> None:
    with connect(server) as c:
        setup(c, name, n=10)
        for k in range(5):
            assert c.execute(f"SELECT v FROM {name} WHERE k = %s", [k]).fetchone() == (k * k,)

        def totals(relation: str) -> dict[str, int]:
            return dict(c.execute(f"SELECT runtime, sum(count)::BIGINT FROM {relation} "
                                  "GROUP BY runtime").fetchall())

        peeks = eventually(lambda: totals("twofold_peek_durations"),
                           lambda t: t.get("interactive", 0) >= 5)
        assert set(peeks) <= {"interactive", "maintenance"}
        steps = eventually(lambda: totals("twofold_step_durations"),
                           lambda t: t.get("maintenance", 0) > 0)
        assert all(n > 0 for n in steps.values())
        buckets = c.execute("SELECT le_us FROM twofold_peek_durations WHERE runtime = %s",
                            ["interactive"]).fetchall()
        assert buckets and all(b & (b - 1) == 0 for (b,) in buckets)  # powers of two


def test_monitoring_relations_from_psql(server: ServerHandle, name: str) -> None:
    from tests.server.test_psql import psql

    with connect(server) as c:
        setup(c, name, n=3)
    out = psql(server, "SELECT f.object, f.type, l.local_lag_ms >= 0 AS caught_up FROM "
                       "twofold_frontiers f JOIN twofold_lag l USING (object) WHERE f.object "
                       f"= '{name}_k'", "SELECT count(*) > 0 AS ok FROM twofold_step_durations"
               ).stdout
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert f"{name}_k | index | t" in lines and "t" in lines
