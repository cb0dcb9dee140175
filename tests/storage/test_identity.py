"""A storage's identity: one id per storage, whatever URL names it, agreed under races."""

from __future__ import annotations

import threading
from pathlib import Path

from twofold.storage import Storage, open_storage
from twofold.storage.identity import storage_id


def test_one_storage_has_one_id_under_any_url(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    with (
        open_storage(f"sqlite:///{tmp_path}/x.db") as a,
        open_storage(f"sqlite:///{tmp_path}/sub/../x.db") as b,
        open_storage(f"sqlite:///{tmp_path}/y.db") as other,
    ):
        assert storage_id(a) == storage_id(b) == storage_id(a)
        assert storage_id(other) != storage_id(a)


def test_the_id_survives_a_reopen(tmp_path: Path) -> None:
    with open_storage(f"sqlite:///{tmp_path}/x.db") as a:
        first = storage_id(a)
    with open_storage(f"sqlite:///{tmp_path}/x.db") as a:
        assert storage_id(a) == first


def test_processes_racing_to_create_the_id_agree(tmp_path: Path) -> None:
    handles = [open_storage(f"sqlite:///{tmp_path}/x.db") for _ in range(6)]
    ids: list[str] = []
    barrier = threading.Barrier(len(handles))

    def run(s: Storage) -> None:
        barrier.wait()
        ids.append(storage_id(s))

    threads = [threading.Thread(target=run, args=(s,)) for s in handles]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in handles:
        s.close()
    assert len(ids) == len(handles) and len(set(ids)) == 1


def test_memory_storages_have_distinct_ids() -> None:
    with open_storage("memory://") as a, open_storage("memory://") as b:
        assert storage_id(a) != storage_id(b)
