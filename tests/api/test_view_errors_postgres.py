"""`test_view_errors`' cases on PostgreSQL storage (`postgres+file`: PostgreSQL holds the shards'
state, including each view's companion error shard; a directory the blobs): a view's evaluation
errors are persisted, read back by every reader, kept across a reopen and retracted with the rows.
Skips with the reason when no PostgreSQL can be started (the `servers` fixture). These once
failed at random: a view created right after its table was given an as_of the controller's
critical reader had already passed (`tests/controller/test_storage_holds.py` pins that race)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from tests.api.test_view_errors import (
    check_read_fails_and_recovers,
    check_readers_equal_one_off,
    check_subscribe_gets_the_error,
    outcome,
    writes,
)

import twofold
from twofold.storage import open_storage
from twofold.storage.view_errors import error_shard_id
from twofold.testing.profiles import examples

pytestmark = pytest.mark.timeout(180)



@pytest.fixture(scope="module")
def pg_url_factory(servers: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return lambda: servers.storage_url("postgres+file", tmp_path_factory.mktemp("pgviews"))


@contextlib.contextmanager
def view_db(url: str, rows: str | None = "(6, 3)", create: bool = True
            ) -> Iterator[twofold.Database]:
    # Every write's time stays readable (`check_readers_equal_one_off` reads each): on
    # PostgreSQL the controller's reader moves a shard's since after `retain_history`, and a read
    # before it is ReadBeforeSince (bf5c51b) - which a slow run reached with the default 1 s.
    with twofold.open(url, tick_interval=0.005, timeout=20, retain_history=600) as db:
        if create:
            db.sql("CREATE TABLE t (a int, b int)")
            db.sql("CREATE MATERIALIZED VIEW v AS SELECT a, a / b AS q FROM t")
        if rows is not None:
            db.sql(f"INSERT INTO t VALUES {rows}")
        yield db


def test_view_read_fails_with_division_by_zero_and_recovers_on_postgres(
    pg_url_factory: Any,
) -> None:
    with view_db(pg_url_factory()) as db:
        check_read_fails_and_recovers(db)


def test_subscribe_of_an_errored_view_gets_the_error_on_postgres(pg_url_factory: Any) -> None:
    with view_db(pg_url_factory(), rows="(6, 3), (1, 0)") as db:
        check_subscribe_gets_the_error(db)


def test_reopened_postgres_database_keeps_the_views_error(pg_url_factory: Any) -> None:
    url = pg_url_factory()
    with view_db(url, rows="(6, 3), (1, 0)") as db:
        assert outcome(db, "SELECT * FROM v") == ("error", "22012")
        view = db.get("v")
        assert isinstance(view, twofold.MaterializedView)
        shard = view.shard
    with open_storage(url) as storage:  # the error shard is PostgreSQL's, beside the rows
        assert error_shard_id(shard) in storage.list_shards()
    with view_db(url, rows=None, create=False) as db:
        assert outcome(db, "SELECT * FROM v") == ("error", "22012")
        db.sql("DELETE FROM t WHERE b = 0")
        assert db.sql("SELECT * FROM v").rows == [(6, 2)]


@settings(max_examples=examples(3), deadline=None, suppress_health_check=list(HealthCheck))
@given(history=writes)
def test_view_readers_equal_the_one_off_query_at_every_time_on_postgres(
    pg_url_factory: Any, history: list[tuple[bool, list[tuple[int, int]]]],
) -> None:
    with view_db(pg_url_factory(), rows=None) as db:
        check_readers_equal_one_off(db, history)
