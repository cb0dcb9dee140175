"""A materialized view's evaluation errors are part of its output (`docs/semantics.md`, "Errors").

A view's sink persists its error collection in the shard's error part (`storage.view_errors`),
so every reader of the view's shard — a one-off `SELECT` from it, an index on it, a view over
it, a subscribe — fails at exactly the times the view's query fails, with its SQLSTATE, and
recovers when the offending rows retract. Before, the sink stopped writing at the first error and
every later read of the view timed out (57014).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import twofold
from twofold.sql.errors import sqlstate_of
from twofold.storage import open_storage
from twofold.storage.view_errors import ERRORS_DESC, ensure_error_shard, error_shard_id
from twofold.testing.profiles import examples

pytestmark = pytest.mark.timeout(120)


def outcome(db: Any, query: str) -> tuple[str, Any]:
    """`("rows", sorted rows)` or `("error", SQLSTATE)` of a one-off SQL query."""
    try:
        return "rows", sorted(db.sql(query).rows)
    except twofold.TwofoldError as e:
        return "error", sqlstate_of(e)


@contextlib.contextmanager
def view_db(path: Path | None = None, rows: str | None = "(6, 3)") -> Iterator[twofold.Database]:
    """A database with `t (a, b)` holding `rows` and `v = SELECT a, a / b AS q FROM t`."""
    with twofold.open(path, tick_interval=0.005, timeout=10) as db:
        db.sql("CREATE TABLE t (a int, b int)")
        db.sql("CREATE MATERIALIZED VIEW v AS SELECT a, a / b AS q FROM t")
        if rows is not None:
            db.sql(f"INSERT INTO t VALUES {rows}")
        yield db


def check_read_fails_and_recovers(db: twofold.Database) -> None:
    """`view_db`'s view (holding (6, 3)) fails with 22012 once a row divides by zero, and
    recovers when it retracts. Shared with the PostgreSQL-storage tests."""
    assert db.sql("SELECT * FROM v").rows == [(6, 2)]
    db.sql("INSERT INTO t VALUES (1, 0)")
    assert outcome(db, "SELECT * FROM v") == ("error", "22012")
    assert outcome(db, "SELECT q FROM v WHERE a = 6") == ("error", "22012")
    # The sink kept writing past the error: later rows are there once it retracts.
    db.sql("INSERT INTO t VALUES (8, 4)")
    db.sql("DELETE FROM t WHERE b = 0")
    assert sorted(db.sql("SELECT * FROM v").rows) == [(6, 2), (8, 2)]


def check_subscribe_gets_the_error(db: twofold.Database) -> None:
    """A subscribe to `view_db`'s view holding (1, 0) fails with 22012."""
    with db.sql("SUBSCRIBE TO v") as sub, pytest.raises(twofold.TwofoldError) as info:
        for _ in range(100):
            sub.next(timeout=5)
    assert sqlstate_of(info.value) == "22012", info.value


def test_view_read_fails_with_division_by_zero_and_recovers() -> None:
    with view_db() as db:
        check_read_fails_and_recovers(db)


def test_subscribe_of_an_errored_view_gets_the_error() -> None:
    with view_db(rows="(6, 3), (1, 0)") as db:
        check_subscribe_gets_the_error(db)


def test_reopened_database_keeps_the_views_error(tmp_path: Path) -> None:
    path = tmp_path / "errors.db"
    with view_db(path, rows="(6, 3), (1, 0)") as db:
        assert outcome(db, "SELECT * FROM v") == ("error", "22012")
    with twofold.open(path, tick_interval=0.005, timeout=10) as db:
        assert outcome(db, "SELECT * FROM v") == ("error", "22012")
        db.sql("DELETE FROM t WHERE b = 0")
        assert db.sql("SELECT * FROM v").rows == [(6, 2)]


def test_view_without_an_error_part_reads_as_error_free(tmp_path: Path) -> None:
    """A database from before error parts: the view's shard has none; absent is empty."""
    path = tmp_path / "old.db"
    with view_db(path) as db:
        assert db.sql("SELECT * FROM v").rows == [(6, 2)]
        view = db.get("v")
        assert isinstance(view, twofold.MaterializedView)
        shard = view.shard
    _drop_shard(path, error_shard_id(shard))
    with open_storage(f"sqlite:///{path}") as storage:
        assert error_shard_id(shard) not in storage.list_shards()
    with twofold.open(path, tick_interval=0.005, timeout=10) as db:
        assert db.sql("SELECT * FROM v").rows == [(6, 2)]
        db.sql("INSERT INTO t VALUES (1, 0)")
        assert outcome(db, "SELECT * FROM v") == ("error", "22012")


def _drop_shard(path: Path, shard_id: str) -> None:
    import sqlite3

    con = sqlite3.connect(path)  # what a database from before error parts holds
    try:
        with con:
            con.execute("DELETE FROM parts WHERE shard_id = ?", (shard_id,))
            con.execute("DELETE FROM shards WHERE shard_id = ?", (shard_id,))
    finally:
        con.close()


def test_ensure_error_shard_is_empty_up_to_the_rows_upper() -> None:
    with open_storage("memory://") as storage:
        rows = storage.create_shard("mv/x/u1", ERRORS_DESC)
        rows.compare_and_append([(("a",), 3, 1)], 0, 7)
        err = ensure_error_shard(storage, "mv/x/u1")
        assert err.upper == rows.upper
        assert err.snapshot(6).num_rows == 0
        again = ensure_error_shard(storage, "mv/x/u1")  # idempotent: nothing more written
        assert again.upper == rows.upper


# -- property: every reader of the view equals the one-off query, errors included --------------

writes = st.lists(
    st.tuples(st.booleans(), st.lists(st.tuples(st.integers(-3, 3), st.integers(-1, 1)),
                                      min_size=1, max_size=3)),
    min_size=1, max_size=6,
)  # fmt: skip


@settings(max_examples=examples(4), deadline=None, suppress_health_check=list(HealthCheck))
@given(writes)
def test_view_readers_equal_the_one_off_query_at_every_time(
    history: list[tuple[bool, list[tuple[int, int]]]],
) -> None:
    with view_db(rows=None) as db:
        check_readers_equal_one_off(db, history)


def check_readers_equal_one_off(db: twofold.Database,
                                history: list[tuple[bool, list[tuple[int, int]]]]) -> None:
    """After `history`'s inserts and deletes into `view_db`'s (empty) table, the view, an
    index on it and a view over it equal the one-off query over the table at every write's
    time (rows, or the same SQLSTATE). Shared with the PostgreSQL-storage tests."""
    table, view = db.table("t"), db.get("v")
    idx = db.create_index("vi", view, key="a", retain_history=600)
    db.sql("CREATE MATERIALIZED VIEW w AS SELECT q, count(*) AS n FROM v GROUP BY q")
    live: Counter[tuple[int, int]] = Counter()
    times = []
    for insert, batch in history:
        if insert or not live:
            w = table.insert(batch)
            live.update(batch)
        else:
            gone = sorted(live)[: len(batch)]
            w = table.delete(gone)
            live.subtract(gone)
            live = +live
        times.append(w.timestamp)
    for ts in times:
        want = outcome(db, f"SELECT a, a / b FROM t AS OF {ts}")
        assert outcome(db, f"SELECT * FROM v AS OF {ts}") == want, ts
        try:
            got: tuple[str, Any] = ("rows", sorted(idx.collect(as_of=ts).rows))
        except twofold.TwofoldError as e:
            got = ("error", sqlstate_of(e))
        assert got == want, ts
        grouped = outcome(db, f"SELECT a / b, count(*) FROM t GROUP BY a / b AS OF {ts}")
        assert outcome(db, f"SELECT * FROM w AS OF {ts}") == grouped, ts
