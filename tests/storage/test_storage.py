"""`open_storage`, the shard catalog, persistence and damaged files."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from twofold.protocol import ColumnType, Frontier, RelationDesc
from twofold.storage import (
    CorruptStorage,
    InvalidName,
    InvalidStorageUrl,
    SchemaMismatch,
    ShardExists,
    Storage,
    StorageClosed,
    StorageError,
    UnknownShard,
    drop_memory_store,
    open_storage,
)

from .helpers import DESC, fresh_id, snapshot_counter


@pytest.mark.parametrize(
    "url",
    ["postgres://db/x", "file:///tmp/x.db", "nonsense", "sqlite://host/x.db", "sqlite://",
     "memory://name/extra"],
)
def test_bad_urls_are_typed_errors(url: str) -> None:
    with pytest.raises(InvalidStorageUrl, match="URL"):
        open_storage(url)


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="does not exist"):
        open_storage(f"sqlite://{tmp_path}/missing/x.db")


def test_relative_sqlite_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_storage("sqlite:rel.db") as st:
        st.create_shard("s", DESC)
    assert (tmp_path / "rel.db").exists()


def test_bad_names(storage: Storage) -> None:
    with pytest.raises(InvalidName, match="shard id"):
        storage.create_shard("", DESC)
    with pytest.raises(InvalidName, match="table name"):
        storage.create_table("", DESC)
    assert storage.list_shards() == []


def test_unknown_shard(storage: Storage) -> None:
    with pytest.raises(UnknownShard, match="'nope'"):
        storage.shard("nope")


def test_create_list_and_reopen_shards(storage: Storage) -> None:
    a = storage.create_shard("a", DESC)
    assert storage.create_shard("a", DESC).desc == a.desc  # idempotent for the same schema
    with pytest.raises(ShardExists, match="already exists"):
        storage.create_shard("a", DESC, exist_ok=False)
    other = RelationDesc(names=["x"], types=[ColumnType("float")])
    with pytest.raises(ShardExists, match="schema"):
        storage.create_shard("a", other)
    storage.create_shard("b", other)
    assert storage.list_shards() == ["a", "b"]
    with pytest.raises(SchemaMismatch, match="reserved"):
        storage.create_shard("c", RelationDesc(names=["diff"], types=[ColumnType("int")]))
    assert storage.list_shards() == ["a", "b"]


def test_memory_stores_are_shared_by_name() -> None:
    name = fresh_id()
    with open_storage(f"memory://{name}") as one, open_storage(f"memory://{name}") as two:
        one.create_shard("s", DESC).compare_and_append([([1, "a"], 0, 1)], 0, 1)
        assert snapshot_counter(two.shard("s"), 0) == Counter({(1, "a"): 1})
        with open_storage("memory://") as private:
            assert private.list_shards() == []
    drop_memory_store(name)
    with open_storage(f"memory://{name}") as fresh:
        assert fresh.list_shards() == []


def test_sqlite_survives_reopen(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/s.db"
    with open_storage(url) as st:
        shard = st.create_shard("s", DESC)
        shard.compare_and_append([([1, "a"], 0, 1), ([2, None], 3, 2)], 0, 5)
        shard.downgrade_since(1)
    with open_storage(url) as st:
        shard = st.shard("s")
        assert shard.desc == DESC
        assert (shard.upper, shard.since) == (Frontier.at(5), Frontier.at(1))
        assert snapshot_counter(shard, 4) == Counter({(1, "a"): 1, (2, None): 2})


def test_closed_storage_refuses_use(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    storage.close()
    with pytest.raises(StorageClosed):
        storage.shard("s")
    with pytest.raises(StorageClosed):
        shard.compare_and_append([], 0, 1)
    storage.close()  # idempotent


def test_garbage_file_is_corrupt_storage(tmp_path: Path) -> None:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database at all" * 200)
    with pytest.raises(CorruptStorage, match="not a readable twofold storage file"):
        open_storage(f"sqlite://{path}")
    assert path.read_bytes() == b"this is not a database at all" * 200  # left untouched


def test_foreign_sqlite_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE twofold_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO twofold_meta VALUES ('format', 'something-else')")
    conn.commit()
    conn.close()
    with pytest.raises(CorruptStorage, match="something-else"):
        open_storage(f"sqlite://{path}")


def test_corrupt_stored_batch_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with open_storage(f"sqlite://{path}") as st:
        shard = st.create_shard("s", DESC)
        shard.compare_and_append([([1, "a"], 0, 1)], 0, 1)
        shard.compare_and_append([([2, "b"], 1, 1)], 1, 2)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE parts SET data = x'deadbeef'")
    conn.commit()
    conn.close()
    with open_storage(f"sqlite://{path}") as st:
        shard = st.shard("s")
        with pytest.raises(CorruptStorage, match="shard 's' part"):
            shard.snapshot(1)
        with pytest.raises(CorruptStorage, match="not a valid Arrow IPC stream"):
            shard.listen(0).poll()
