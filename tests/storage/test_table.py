"""Tables over shards, and the ticker that keeps their uppers moving."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import polars as pl
import pyarrow as pa
import pytest

from twofold.protocol import Frontier
from twofold.storage import (
    InvalidUpdates,
    SchemaMismatch,
    Storage,
    TableExists,
    UnknownTable,
    open_storage,
    to_tuples,
)
from twofold.testing.pytest_servers import BACKENDS, Servers

from .helpers import DESC


def contents(table_snapshot: pa.Table) -> Counter[tuple]:
    return Counter({tuple(r): d for r, _, d in to_tuples(table_snapshot)})


def stepping_storage(url: str) -> Storage:
    clock = iter(range(100, 10**9, 10))
    return open_storage(url, clock=lambda: next(clock))


@pytest.fixture(params=BACKENDS)
def ticking(request: pytest.FixtureRequest, servers: Servers, tmp_path) -> Iterator[Storage]:  # type: ignore[no-untyped-def]
    with stepping_storage(servers.storage_url(request.param, tmp_path)) as st_:
        yield st_


def test_insert_delete_update(ticking: Storage) -> None:
    table = ticking.create_table("people", DESC)
    t1 = table.insert([[1, "ann"], [2, "bob"], [2, "bob"]])
    assert table.upper == Frontier.at(t1 + 1)
    t2 = table.delete([[2, "bob"]])
    t3 = table.update([[1, "ann"]], [[1, "anne"]])
    assert t1 < t2 < t3
    assert contents(table.snapshot(t1)) == Counter({(1, "ann"): 1, (2, "bob"): 2})
    assert contents(table.snapshot(t2)) == Counter({(1, "ann"): 1, (2, "bob"): 1})
    assert contents(table.snapshot()) == Counter({(1, "anne"): 1, (2, "bob"): 1})
    # The update is one batch at one time: no reader can see the old row gone and the new one
    # missing.
    batches = [b for b in table.shard.listen(t2).poll() if len(b)]
    assert len(batches) == 1 and {t for _, t, _ in batches[0].to_tuples()} == {t3}


def test_columnar_writes_and_diffs(ticking: Storage) -> None:
    table = ticking.create_table("t", DESC)
    table.insert(pl.DataFrame({"k": [1, 2], "s": ["a", None]}))
    table.insert(pa.table({"s": ["c"], "k": [3]}))
    table.write([[4, "d"], [5, "e"]], [3, -1])
    assert contents(table.snapshot()) == Counter(
        {(1, "a"): 1, (2, None): 1, (3, "c"): 1, (4, "d"): 3, (5, "e"): -1}
    )


def test_bad_table_writes_write_nothing(ticking: Storage) -> None:
    table = ticking.create_table("t", DESC)
    before = table.upper
    with pytest.raises(SchemaMismatch, match="'k'"):
        table.insert([["x", "a"]])
    with pytest.raises(SchemaMismatch, match="2 values"):
        table.insert([[1]])
    with pytest.raises(InvalidUpdates, match="2 rows but 1 diffs"):
        table.write([[1, "a"], [2, "b"]], [1])
    with pytest.raises(InvalidUpdates, match="non-zero"):
        table.write([[1, "a"]], 0)
    with pytest.raises(InvalidUpdates, match="sequence of rows"):
        table.insert("rows")  # type: ignore[arg-type]
    assert table.upper == before


def test_table_catalog(ticking: Storage) -> None:
    with pytest.raises(UnknownTable, match="'ghost'"):
        ticking.table("ghost")
    ticking.create_table("a", DESC)
    ticking.create_table("a", DESC)
    with pytest.raises(TableExists):
        ticking.create_table("a", DESC, exist_ok=False)
    ticking.create_shard("not-a-table", DESC)
    assert ticking.list_tables() == ["a"]


def test_writes_from_two_handles_race_safely(process_url: str) -> None:
    # Two storage handles (as two processes would have), each with its own oracle whose clock
    # lags the other's: writes still all land, each at a distinct time.
    url = process_url
    with open_storage(url, clock=lambda: 0) as one, open_storage(url, clock=lambda: 0) as two:
        one.create_table("t", DESC)
        a, b = one.table("t"), two.table("t")
        barrier = threading.Barrier(2)
        stamps: list[int] = []

        def write(table, k: int) -> None:  # type: ignore[no-untyped-def]
            barrier.wait()
            stamps.extend(table.insert([[k, str(i)]]) for i in range(20))

        threads = [threading.Thread(target=write, args=(t, k)) for k, t in enumerate((a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(stamps)) == 40
        assert sum(contents(a.snapshot()).values()) == 40


def test_ticker_advances_every_table_and_stops(ticking: Storage) -> None:
    a = ticking.create_table("a", DESC)
    b = ticking.create_table("b", DESC)
    ticker = ticking.ticker(interval=0.001)
    with ticker:
        assert ticker.running
        assert ticker.wait_for_ticks(3, timeout=30)
    assert not ticker.running
    ticks = ticker.ticks
    assert a.upper == b.upper and a.upper.time is not None and a.upper.time > 100
    upper = a.upper
    # A write after ticks still lands after every tick; no tick happens after stop.
    ts = a.insert([[1, "x"]])
    assert upper.time is not None and ts >= upper.time
    assert ticker.ticks == ticks
    ticker.stop()  # idempotent


def test_tick_is_synchronous_and_makes_now_readable(ticking: Storage) -> None:
    table = ticking.create_table("t", DESC)
    ts = ticking.ticker().tick()
    assert table.upper == Frontier.at(ts + 1)
    assert contents(table.snapshot(ts)) == Counter()


def test_ticker_races_with_writers(ticking: Storage) -> None:
    table = ticking.create_table("t", DESC)
    with ticking.ticker(interval=0.001) as ticker:
        start = ticker.ticks
        for i in range(30):
            table.insert([[i, "x"]])
        assert ticker.wait_for_ticks(start + 2, timeout=30)
    assert contents(table.snapshot()) == Counter({(i, "x"): 1 for i in range(30)})


def test_ticker_rejects_bad_interval(ticking: Storage) -> None:
    with pytest.raises(ValueError, match="positive"):
        ticking.ticker(interval=0)


def test_compare_and_write_lands_only_at_the_upper_it_read(ticking: Storage) -> None:
    table = ticking.create_table("t", DESC)
    table.insert([[1, "a"]])
    read_at = table.upper
    ts = table.compare_and_write(read_at, pa.table({"k": [2], "s": ["b"]}))
    assert ts is not None and table.upper == Frontier.at(ts + 1)
    # A second write planned at the same (now stale) upper writes nothing.
    assert table.compare_and_write(read_at, pa.table({"k": [3], "s": ["c"]})) is None
    assert contents(table.snapshot()) == Counter({(1, "a"): 1, (2, "b"): 1})
    # Nothing to write still takes a timestamp and makes it complete.
    upper = table.upper
    empty = table.compare_and_write(upper, None)
    assert empty is not None and table.upper == Frontier.at(empty + 1)
    assert contents(table.snapshot()) == Counter({(1, "a"): 1, (2, "b"): 1})
