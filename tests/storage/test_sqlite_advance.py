"""On SQLite the ticker's round (`Storage.advance_tables`) is one autocommit statement that finds
the tables itself (`SqliteBackend.advance_prefixed_uppers`): it moves exactly the table shards
whose upper is below the target, leaves closed and later ones alone, sees tables another
handle created, and tells the notifier of each shard it moved."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from twofold.protocol import Frontier
from twofold.storage import open_storage
from twofold.storage.sqlite import SqliteBackend
from twofold.storage.table import TABLE_PREFIX

from .helpers import DESC

# Shard ids just outside the table prefix's range on either side, and one inside it.
NOT_TABLES = ["table", "tabld/x", "table0", "table0/x", "tablf", "s", "u/table/x"]


def test_one_statement_moves_exactly_the_tables_below_the_target(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/advance.db"
    with open_storage(url) as storage, open_storage(url) as other:
        backend = storage.backend
        assert isinstance(backend, SqliteBackend)
        for shard_id in NOT_TABLES:
            storage.create_shard(shard_id, DESC)
        storage.create_table("a", DESC)
        storage.create_table("closed", DESC).shard.compare_and_append([], 0, Frontier.empty())
        storage.create_table("ahead", DESC).shard.compare_and_append([], 0, 50)
        other.create_table("made elsewhere", DESC)  # another handle: another connection
        notified: list[str] = []

        def on_change(shard_id: str) -> Callable[[], None]:
            return lambda: notified.append(shard_id)

        for shard_id in storage.list_shards():
            backend.notifier.subscribe(shard_id, on_change(shard_id))
        statements: list[str] = []
        backend._conn().set_trace_callback(statements.append)

        storage.advance_tables(Frontier.at(20))

        backend._conn().set_trace_callback(None)
        # One write statement (no BEGIN/COMMIT, no listing first), then the moved ones read back.
        assert [s.split()[0] for s in statements] == ["UPDATE", "SELECT"]
        uppers = {s: backend.state(s).upper for s in storage.list_shards()}
        assert uppers == {
            **{s: Frontier.at(0) for s in NOT_TABLES},
            "table/a": Frontier.at(20),
            "table/closed": Frontier.empty(),
            "table/ahead": Frontier.at(50),
            "table/made elsewhere": Frontier.at(20),
        }
        assert sorted(notified) == ["table/a", "table/made elsewhere"]
        # What the other handle reads: committed, not left in an open transaction.
        assert other.backend.state("table/a").upper == Frontier.at(20)


def test_a_round_that_moves_nothing_reads_nothing_back(tmp_path: Path) -> None:
    with open_storage(f"sqlite:///{tmp_path}/still.db") as storage:
        backend = storage.backend
        assert isinstance(backend, SqliteBackend)
        storage.create_table("a", DESC).shard.compare_and_append([], 0, 50)
        statements: list[str] = []
        backend._conn().set_trace_callback(statements.append)
        storage.advance_tables(Frontier.at(20))
        backend._conn().set_trace_callback(None)
        assert [s.split()[0] for s in statements] == ["UPDATE"]
        assert backend.state("table/a").upper == Frontier.at(50)


def test_any_table_name_is_notified(tmp_path: Path) -> None:
    with open_storage(f"sqlite:///{tmp_path}/names.db") as storage:
        backend = storage.backend
        assert isinstance(backend, SqliteBackend)
        names = ["a\0b", 'q"u,o]t[e', "ü ñ", "a"]
        notified: list[str] = []
        for name in names:
            storage.create_table(name, DESC)
            backend.notifier.subscribe(f"table/{name}",
                                       lambda n=name: notified.append(n))  # type: ignore[misc]
        storage.advance_tables(Frontier.at(7))
        assert sorted(notified) == sorted(names)
        assert {backend.state(f"table/{n}").upper for n in names} == {Frontier.at(7)}


def test_advancing_with_no_tables_writes_nothing(tmp_path: Path) -> None:
    with open_storage(f"sqlite:///{tmp_path}/empty.db") as storage:
        storage.create_shard("s", DESC)
        storage.advance_tables(Frontier.at(5))
        assert storage.backend.state("s").upper == Frontier.at(0)
        storage.advance_tables(Frontier.empty())  # an empty target moves nothing either
        assert storage.list_tables() == []


def test_the_prefix_must_not_be_empty(tmp_path: Path) -> None:
    with open_storage(f"sqlite:///{tmp_path}/prefix.db") as storage:
        backend = storage.backend
        assert isinstance(backend, SqliteBackend)
        storage.create_table("a", DESC)
        with pytest.raises(ValueError):
            backend.advance_prefixed_uppers("", Frontier.at(5))
        backend.advance_prefixed_uppers(TABLE_PREFIX, Frontier.empty())
        assert backend.state("table/a").upper == Frontier.at(0)
