"""`TableState` (what checked writes read) loads a table at a time compaction cannot take away
while it reads there (`Shard.snapshot_and_listen`).

The flake (`tests/api/test_persistence.py::test_the_catalog_survives_on_postgres`, once in a
full run): the first checked write of a fresh table read its upper (1), then snapshotted and
listened at 0; a ticker round and the controller's hold step landed between the reads, moving
since to the last complete time, so the insert failed (`InvalidRows: ... cannot read at 0,
before since ...`). On any table, a thread stalled for longer than `retain_history` between the
reads failed the same way. Forced here by a hook on the backend's state read; then a property
over random histories of writes, compactions, reopens and such races.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.storage.helpers import AfterStateReads, reference_at, snapshot_counter

from twofold.api.tablestate import TableState
from twofold.api.writes import TableWriter
from twofold.protocol import ColumnType, Frontier, RelationDesc
from twofold.storage import open_storage
from twofold.storage.holds import ControllerHolds
from twofold.testing.profiles import examples
from twofold.testing.pytest_servers import Servers

pytestmark = pytest.mark.timeout(300)

DESC = RelationDesc(["id", "v"], [ColumnType("int", False), ColumnType("str", True)])


def test_a_fresh_tables_first_checked_write_survives_the_hold_step(servers: Servers,
                                                                   tmp_path: Path) -> None:
    """The flake's interleaving with the real actors on PostgreSQL: a ticker round and the
    controller's hold step (window 0: since to the upper's last time) right after the write's
    read of the upper 1, and again after the next read of an upper. Before: `SinceViolation:
    shard 'table/t': cannot read at 0, before since ...`."""
    with open_storage(servers.storage_url("postgres+file", tmp_path)) as storage:
        t = storage.create_table("t", DESC)
        holds = ControllerHolds(storage, dict, window=0)

        def tick_and_step() -> None:
            storage.advance_tables(Frontier.at(storage.oracle.write_ts() + 1))
            holds.step()

        ran = AfterStateReads(storage, 2, tick_and_step,
                                when=lambda s: s.upper != Frontier.minimum())
        writer = TableWriter(t, "t", ("id",))
        writer.insert(pl.DataFrame({"id": [1, 2], "v": ["a", "b"]}))
        assert ran.ran == 2
        assert snapshot_counter(t.shard, t.upper.time - 1) == {(1, "a"): 1, (2, "b"): 1}
        writer.state().sync()  # the state follows the write it made
        assert Counter(writer.state().live()[1].rows()) == {(1, "a"): 1, (2, "b"): 1}


# -- the property -------------------------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("insert"), st.lists(st.integers(0, 20), min_size=1, max_size=4)),
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("tick"), st.just(0)),
    st.tuples(st.just("compact"), st.floats(0, 1)),
    st.tuples(st.just("reopen"), st.just(0)),
    st.tuples(st.just("race"), st.integers(1, 4)),
    st.tuples(st.just("sync"), st.just(0)),
), max_size=20)


@pytest.fixture(scope="module", params=("memory", "sqlite", "postgres+file"))
def url(request: pytest.FixtureRequest, servers: Servers,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One storage per backend for the module (a fresh table per example)."""
    yield servers.storage_url(request.param, tmp_path_factory.mktemp("since"))


class History:
    """A table, the handle and `TableState` following it, and every update written to it."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        self.written: list[tuple[list[Any], int, int]] = []
        self.storage = open_storage(url)
        self.storage.create_table(name, DESC)
        self.state = TableState(self.storage.table(name), None)

    def write(self, ids: list[int], diff: int) -> int:
        ts = self.storage.table(self.name).write([[i, f"v{i}"] for i in ids], diff)
        self.written += [([i, f"v{i}"], ts, diff) for i in ids]
        return ts

    def present(self) -> list[int]:
        return sorted(row[0] for row in reference_at(self.written, 2**63))

    def compact_to(self, ts: int) -> None:
        self.storage.table(self.name).shard.downgrade_since(ts)

    def reopen(self) -> None:
        self.storage.close()
        self.storage = open_storage(self.url)
        self.state = TableState(self.storage.table(self.name), None)

    def check_sync(self) -> None:
        frontier = self.state.sync()
        assert frontier.time is not None
        _, rows = self.state.live()
        ids, _ = self.state.live()
        got = Counter(dict(zip(rows.rows(), self.state.counts[ids].tolist(), strict=True)))
        assert got == reference_at(self.written, frontier.time - 1)

    def check_readable_times(self) -> None:
        """The table at its since, its last complete time and a time between is exactly
        what was written up to each."""
        shard = self.storage.table(self.name).shard
        since, upper = shard.since.time, shard.upper.time
        assert since is not None and upper is not None
        for t in sorted({since, (since + upper - 1) // 2, upper - 1}):
            if since <= t < upper:
                assert snapshot_counter(shard, t) == reference_at(self.written, t), (
                    f"at {t}: since {since}, upper {upper}")


@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_a_loaded_state_is_the_table_at_its_frontier(url: str, ops: list[tuple[str, Any]]
                                                     ) -> None:
    h = History(url, f"t{uuid.uuid4().hex[:12]}")  # a fresh table per example
    try:
        h.write([0, 1], 1)
        for op, arg in ops:
            if op == "insert":
                h.write(arg, 1)
            elif op == "delete" and h.present():
                present = h.present()
                h.write([present[arg % len(present)]], -1)
            elif op == "tick":
                h.storage.advance_tables(Frontier.at(h.storage.oracle.write_ts() + 1))
            elif op == "compact":
                shard = h.storage.table(h.name).shard
                since, upper = shard.since.time, shard.upper.time
                assert since is not None and upper is not None
                h.compact_to(since + int(arg * (upper - 1 - since)))
            elif op == "reopen":
                h.reopen()
                h.check_readable_times()
            elif op == "race":
                # Another writer and a compaction up to its write land right after each of
                # the next `arg` reads of the upper during a sync (the state's load or poll).
                race = AfterStateReads(h.storage, arg,
                                       lambda: h.compact_to(h.write([99], 1)))
                try:
                    h.check_sync()
                finally:
                    race.stop()
            else:
                h.check_sync()
        h.check_sync()
        h.check_readable_times()
    finally:
        h.storage.close()
